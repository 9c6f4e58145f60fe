package cli

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/app"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// The admin API on a running process's listener: tokens from WATUKUY_ADMIN_TOKEN and from
// the config's admin.tokens, a read-only one refused an action, and a SIGHUP that rotates the
// config's token.
func TestAdminAPIOnTheListener(t *testing.T) {
	const envSecret, oldRead, newRead = "env-secret-0123456789", "old-read-0123456789", "new-read-0123456789"
	t.Setenv(app.AdminTokenEnv, envSecret)
	b := redistest.Real(t)
	poller := listPoller(t)
	adminBlock := func(secret string) string {
		return "admin:\n  tokens:\n    - {id: dashboards, token: " + secret + ", readOnly: true}\n"
	}
	cfg := writeConfig(t, adminBlock(oldRead)+"pollers:\n"+poller("orders"))
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	time.AfterFunc(30*time.Second, cancel)
	lines, errc := startCLI(t, ctx, "run", "--config", cfg, "--redis", b.URL, "--listen", addr)
	next(t, lines) // an event: the process serves
	go func() {
		for lines.Scan() {
		}
	}()

	call := func(method, path, secret string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+secret)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := call("GET", "/api/keys/orders/-", oldRead); code != 200 || !strings.Contains(body, `"poller": "orders"`) {
		t.Fatalf("inspect with the config's read-only token: %d %s", code, body)
	}
	if code, body := call("POST", "/api/keys/orders/-/pause", oldRead); code != 403 || !strings.Contains(body, "read_only") {
		t.Fatalf("pause with the read-only token: %d %s", code, body)
	}
	if code, body := call("POST", "/api/keys/orders/-/pause", envSecret); code != 200 {
		t.Fatalf("pause with the env token: %d %s", code, body)
	}
	eng, err := watukuy.New(watukuy.Options{Redis: b.Client})
	if err != nil {
		t.Fatal(err)
	}
	if ki, err := eng.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: ""}); err != nil || !ki.Paused {
		t.Fatalf("after the API's pause: %+v %v", ki, err)
	}

	if err := os.WriteFile(cfg, []byte(adminBlock(newRead)+"pollers:\n"+poller("orders")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	// The reload lands in the background: wait until the new token is taken.
	for code, _ := call("GET", "/api/whoami", newRead); code != 200; code, _ = call("GET", "/api/whoami", newRead) {
		if ctx.Err() != nil {
			t.Fatal("the rotated token was never taken")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, _ := call("GET", "/api/whoami", oldRead); code != 401 {
		t.Fatalf("the rotated-out token: %d", code)
	}
	if code, _ := call("GET", "/api/whoami", envSecret); code != 200 {
		t.Fatalf("the env token after the reload: %d", code)
	}
	cancel()
	if err := <-errc; err != nil && ctx.Err() == nil {
		t.Fatal(err)
	}
}

// watukuy dev without a configured token makes one up, prints it, and its admin API answers
// with it: the demo's keys are there.
func TestDevAdminToken(t *testing.T) {
	t.Setenv(app.AdminTokenEnv, "")
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	time.AfterFunc(30*time.Second, cancel)
	lines, errc := startCLI(t, ctx, "dev", "--listen", addr)
	var secret string
	for secret == "" {
		l := next(t, lines)
		if rest, ok := strings.CutPrefix(l, "admin API"); ok {
			_, secret, _ = strings.Cut(rest, "Bearer ")
			secret = strings.TrimSuffix(secret, ")")
		}
	}
	for !strings.Contains(next(t, lines), " created ") { // an event: the listener serves
	}
	go func() {
		for lines.Scan() {
		}
	}()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/api/pollers", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"customers"`) || !strings.Contains(string(body), `"orders"`) {
		t.Fatalf("dev's /api/pollers with its token %q: %d %s", secret, resp.StatusCode, body)
	}
	cancel()
	<-errc
}

// freeAddr is a loopback address with a port nothing listens on now, for a process to bind.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
