// Package e2e runs the built binaries as real processes: a redis-server, one scheduler and
// three workers, the fake API changing under them, and a webhook receiver that verifies every
// signature. Workers are SIGKILLed and restarted during the run.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/chaos/procchaos"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
	"github.com/watukuy/watukuy/webhook"
)

const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// verifier checks what the receivers get, as a receiver does.
var verifier = func() *webhook.Verifier {
	v, err := webhook.NewVerifier([]string{secret}, webhook.Options{})
	if err != nil {
		panic(err)
	}
	return v
}()

// build compiles the binaries into a temporary directory.
func build(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := procchaos.BuildBinaries(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// receiver is the webhook endpoint: it verifies each signature and records each delivery.
type receiver struct {
	mu        sync.Mutex
	events    []watukuytype.Event
	badSig    int
	idsByWhat map[string]map[string]bool // identity@version@type -> event ids
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	if err := verifier.Verify(req.Header, body); err != nil {
		r.mu.Lock()
		r.badSig++
		r.mu.Unlock()
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var ev watukuytype.Event
	if err := json.Unmarshal(body, &ev); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.events = append(r.events, ev)
	what := ev.Identity + "@" + ev.Version + "@" + string(ev.Type)
	if r.idsByWhat[what] == nil {
		r.idsByWhat[what] = map[string]bool{}
	}
	r.idsByWhat[what][ev.ID] = true
	r.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// final is the last delivered state per identity (version, or absent after a delete).
func (r *receiver) final() map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]string{}
	for _, ev := range r.events {
		if ev.Type == watukuytype.Deleted {
			delete(m, ev.Identity)
		} else {
			m[ev.Identity] = ev.Version
		}
	}
	return m
}

type proc struct {
	name string
	cmd  *exec.Cmd
	out  *syncBuffer
}

// syncBuffer is a process's output, read while the process writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// output is what the process wrote so far.
func (p *proc) output() string { return p.out.String() }

func start(t *testing.T, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: filepath.Base(bin), out: &syncBuffer{}}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Wait()
		}
		if t.Failed() {
			t.Logf("--- %s output:\n%s", p.name, lastBytes(p.out.String(), 3000))
		}
	})
	return p
}

func lastBytes(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func TestEndToEndProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	bins := build(t)
	rb := redistest.Real(t)

	api := fakeapi.New()
	api.SetNow(time.Now().UTC())
	srv := fakeapi.NewServer(api, fakeapi.ServerOptions{TieBreaker: true})
	defer srv.Close()
	rec := &receiver{idsByWhat: map[string]map[string]bool{}}
	hook := httptest.NewServer(rec)
	defer hook.Close()

	cfg := filepath.Join(t.TempDir(), "watukuy.yaml")
	if err := os.WriteFile(cfg, []byte(procchaos.OrdersConfig(rb.URL, "wk", srv.URL, hook.URL, 2*time.Second)), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Setenv("HOOK_SECRET", secret)
	common := []string{"--config", cfg, "--listen", "off", "--log-format", "console"}
	scheduler := start(t, filepath.Join(bins, "watukuy-scheduler"), common...)
	workers := make([]*proc, 3)
	for i := range workers {
		workers[i] = start(t, filepath.Join(bins, "watukuy-worker"), append(common, "--concurrency", "4", "--drain-timeout", "2s")...)
	}

	// Mutate for a while; SIGKILL worker 0 twice and start it again.
	rng := rand.New(rand.NewPCG(1, 2))
	deadline := time.Now().Add(6 * time.Second)
	kills := []time.Time{time.Now().Add(1500 * time.Millisecond), time.Now().Add(3500 * time.Millisecond)}
	for time.Now().Before(deadline) {
		api.SetNow(time.Now().UTC())
		id := "ord-" + strconv.Itoa(rng.IntN(40))
		if rng.IntN(6) == 0 {
			api.Delete(id)
		} else {
			api.Put(id, map[string]any{"total": rng.IntN(1000)})
		}
		if len(kills) > 0 && time.Now().After(kills[0]) {
			kills = kills[1:]
			if err := workers[0].cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = workers[0].cmd.Wait()
			workers[0] = start(t, filepath.Join(bins, "watukuy-worker"), append(common, "--concurrency", "4")...)
		}
		time.Sleep(20 * time.Millisecond) // the pace of the API's changes, not a wait for a result
	}

	// Every change the API recorded must arrive: the last delivered version per identity equals
	// the API's final state, deletes included.
	want := map[string]string{}
	for id, v := range api.Final() {
		want[id] = strconv.Itoa(v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for {
		got := rec.final()
		if equal(got, want) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("after 60s the delivered state still differs from the API:\n got  %v\n want %v", got, want)
		}
		time.Sleep(100 * time.Millisecond) // polling real processes: there is no signal to wait on
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.badSig != 0 {
		t.Errorf("%d deliveries failed signature verification", rec.badSig)
	}
	last := map[string]int{}
	for _, ev := range rec.events {
		if ev.Type == watukuytype.Deleted {
			continue
		}
		v, _ := strconv.Atoi(ev.Version)
		if v < last[ev.Identity] {
			t.Errorf("%s went back from v%d to v%d", ev.Identity, last[ev.Identity], v)
		}
		last[ev.Identity] = v
	}
	for what, ids := range rec.idsByWhat {
		if len(ids) != 1 {
			t.Errorf("%s was delivered with %d different ids", what, len(ids))
		}
	}
	t.Logf("%d deliveries of %d changes, 2 worker kills", len(rec.events), len(api.Changes()))

	// SIGTERM: every process stops taking work, drains and exits 0.
	for _, p := range append(workers, scheduler) {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range append(workers, scheduler) {
		exited := make(chan error, 1)
		go func() { exited <- p.cmd.Wait() }()
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("%s exited with %v after SIGTERM", p.name, err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("%s did not exit within 20s of SIGTERM", p.name)
		}
	}
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
