package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/luascripts"
	"github.com/watukuy/watukuy/internal/redistest"
)

// limitedAPI is an API whose accounts ("shop", "acct") each allow 20 requests per second over
// all their partitions, with 429s beyond (GCRA on the wall clock, one request more of burst
// than the account's budget gives, for the network's jitter). Live requests
// (no updated_since) get an empty page; backfill requests (an updated_since) get one item an
// hour later than the cursor and more to come.
type limitedAPI struct {
	mu   sync.Mutex
	tat  map[string]time.Time
	reqs []apiRequest
}

type apiRequest struct {
	account, partition string
	backfill           bool
	at                 time.Time
	status             int
}

const apiRate = 20

// bursts are the budgets' bursts per account.
var bursts = map[string]int{"shop": 4, "acct": 8}

func (a *limitedAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/") // account/partition/items
	if len(parts) != 3 {
		http.NotFound(w, r)
		return
	}
	since := r.URL.Query().Get("updated_since")
	req := apiRequest{account: parts[0], partition: parts[1], backfill: since != "", at: time.Now(), status: http.StatusOK}
	a.mu.Lock()
	interval := time.Second / apiRate
	tat := a.tat[req.account]
	if tat.Before(req.at) {
		tat = req.at
	}
	if tat.Add(interval).Sub(req.at) > time.Duration(bursts[req.account]+1)*interval {
		req.status = http.StatusTooManyRequests
	} else {
		a.tat[req.account] = tat.Add(interval)
	}
	a.reqs = append(a.reqs, req)
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if req.status != http.StatusOK {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(req.status)
		_, _ = io.WriteString(w, `{"error":"rate limited"}`)
		return
	}
	if !req.backfill {
		_, _ = io.WriteString(w, `{"data":[],"has_more":false}`)
		return
	}
	at, err := time.Parse(time.RFC3339, since)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	at = at.Add(time.Hour)
	_ = json.NewEncoder(w).Encode(map[string]any{"has_more": true, "data": []map[string]any{
		{"id": "b" + strconv.FormatInt(at.Unix(), 10), "updated_at": at.Format(time.RFC3339), "version": 1}}})
}

func (a *limitedAPI) requests() []apiRequest {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]apiRequest(nil), a.reqs...)
}

// tokenTake is one ask of a budget's token (a run of budget_take.lua) as the redis-server's
// MONITOR shows it: the request's lane by the reserve it leaves (0: live), its key when it may
// hold a token, the bucket's settings, the server time of the ask, and the bucket's new
// theoretical arrival time (TAT) when it gave a token (0 when it gave none at once).
type tokenTake struct {
	bucket, key    string
	reserve, burst int
	intervalUs     float64
	atUs, tatUs    float64
}

// wait is how long the take's request waited for its token, as the bucket computed it (GCRA:
// the slot is the new TAT less the tokens the lane may use, burst − reserve, intervals); -1
// when no token was given at once.
func (k tokenTake) wait() time.Duration {
	if k.tatUs == 0 {
		return -1
	}
	slot := k.tatUs - float64(k.burst-k.reserve)*k.intervalUs
	return time.Duration(max(0, slot-k.atUs) * float64(time.Microsecond))
}

// pause is a budget's pause (budget_pause.lua) after a 429: the bucket gives no token until.
type pause struct {
	bucket      string
	atUs, until float64
}

// tokenLog reads MONITOR on a redis-server and records every ask of a budget's token and
// every pause: the test's own record of each request's wait for its token, in the server's
// microseconds, with nothing rounded to a histogram's bucket.
type tokenLog struct {
	conn   net.Conn
	done   chan struct{}
	takes  []tokenTake // written by the reader until done
	pauses []pause
	err    error

	mu     sync.Mutex
	read   *sync.Cond // broadcast at each line read, and when the reader ends
	seenUs float64    // server time of the last line read
	ended  bool
}

// watchTokens starts MONITOR on the redis-server at url (unix://path).
func watchTokens(t *testing.T, url string) *tokenLog {
	t.Helper()
	src, err := luascripts.Source("budget_take")
	if err != nil {
		t.Fatal(err)
	}
	sha := redis.NewScript(src).Hash()
	conn, err := net.Dial("unix", strings.TrimPrefix(url, "unix://"))
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(conn, 1<<20)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		t.Fatalf("MONITOR: %q %v", line, err)
	}
	l := &tokenLog{conn: conn, done: make(chan struct{})}
	l.read = sync.NewCond(&l.mu)
	t.Cleanup(func() { l.stop() })
	go func() {
		defer close(l.done)
		defer func() {
			l.mu.Lock()
			l.ended = true
			l.read.Broadcast()
			l.mu.Unlock()
		}()
		var cur *tokenTake // the take whose script's commands follow
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					l.err = err
				}
				return
			}
			// +1700000000.123456 [0 unix:/path] "evalsha" "sha" "2" "bucket" … ("[0 lua]" for
			// the commands a script runs, after its own line)
			ts, rest, ok := strings.Cut(strings.TrimPrefix(strings.TrimRight(line, "\r\n"), "+"), " [")
			if !ok {
				continue
			}
			client, cmd, ok := strings.Cut(rest, "] ")
			if !ok {
				continue
			}
			sec, err := strconv.ParseFloat(ts, 64)
			if err != nil {
				continue
			}
			atUs := sec * 1e6
			l.mu.Lock()
			l.seenUs = atUs
			l.read.Broadcast()
			l.mu.Unlock()
			args := monitorArgs(cmd)
			if len(args) == 0 {
				continue
			}
			if !strings.HasSuffix(client, " lua") {
				cur = nil
				// evalsha sha 2 bucket held now interval burst reserve sitout hold key (or eval
				// with the source)
				if len(args) == 12 && (strings.EqualFold(args[0], "evalsha") && args[1] == sha || strings.EqualFold(args[0], "eval") && args[1] == src) {
					interval, _ := strconv.ParseFloat(args[6], 64)
					burst, _ := strconv.Atoi(args[7])
					reserve, _ := strconv.Atoi(args[8])
					l.takes = append(l.takes, tokenTake{bucket: args[3], key: args[11], reserve: reserve, burst: burst, intervalUs: interval, atUs: atUs})
					cur = &l.takes[len(l.takes)-1]
				}
				continue
			}
			switch {
			case cur != nil && args[0] == "TIME":
				cur.atUs = atUs // the script's clock (now_us), read now
			case cur != nil && len(args) >= 4 && args[0] == "HSET" && args[1] == cur.bucket && args[2] == "tat":
				cur.tatUs, _ = strconv.ParseFloat(args[3], 64)
			case len(args) >= 4 && args[0] == "HSET" && args[2] == "pausedUntil":
				until, _ := strconv.ParseFloat(args[3], 64)
				l.pauses = append(l.pauses, pause{bucket: args[1], atUs: atUs, until: until * 1000})
			}
		}
	}()
	return l
}

// readPast waits until the reader has read a line of server time after at, so that every take
// asked before it is complete (its script's commands read too); false if that took longer than
// timeout or the reader ended first.
func (l *tokenLog) readPast(at time.Time, timeout time.Duration) bool {
	atUs := float64(at.UnixMicro())
	expired := false
	timer := time.AfterFunc(timeout, func() {
		l.mu.Lock()
		expired = true
		l.read.Broadcast()
		l.mu.Unlock()
	})
	defer timer.Stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.seenUs <= atUs && !l.ended && !expired {
		l.read.Wait()
	}
	return l.seenUs > atUs
}

// stop ends MONITOR; the records are complete once it returns.
func (l *tokenLog) stop() {
	_ = l.conn.Close()
	<-l.done
}

// paused reports whether a pause of bucket was in force at atUs.
func (l *tokenLog) paused(bucket string, atUs float64) bool {
	return slices.ContainsFunc(l.pauses, func(p pause) bool { return p.bucket == bucket && p.atUs <= atUs && atUs < p.until })
}

// monitorArgs splits a MONITOR line's command into its arguments: each is quoted, with the
// escapes \\ \" \n \r \t \a \b and \xHH.
func monitorArgs(cmd string) []string {
	var args []string
	for i := 0; i < len(cmd); {
		if cmd[i] != '"' {
			i++
			continue
		}
		var b strings.Builder
		for i++; i < len(cmd) && cmd[i] != '"'; i++ {
			if cmd[i] != '\\' || i+1 >= len(cmd) {
				b.WriteByte(cmd[i])
				continue
			}
			i++
			switch c := cmd[i]; c {
			case 'n':
				b.WriteByte('\n')
			case 'r':
				b.WriteByte('\r')
			case 't':
				b.WriteByte('\t')
			case 'a':
				b.WriteByte('\a')
			case 'b':
				b.WriteByte('\b')
			case 'x':
				if i+2 < len(cmd) {
					if v, err := strconv.ParseUint(cmd[i+1:i+3], 16, 8); err == nil {
						b.WriteByte(byte(v))
						i += 2
						continue
					}
				}
				b.WriteByte(c)
			default:
				b.WriteByte(c)
			}
		}
		args = append(args, b.String())
		i++
	}
	return args
}

// Three worker processes share two 20 requests/s budgets through Redis. shop: 30 partitions
// polled every quarter second (more than 20 requests/s wanted): the API answers fewer than 1%
// of the requests with 429, the budget is used to at least 90%, and over a minute the least
// polled key gets at least half the polls of the most polled one. acct (burst 8): 5 partitions
// polled every second and a backfill of one of them, which takes what live leaves but half the
// burst: a live request of acct waits for its token only when other live requests just took
// the reserve (checkLiveWaits), by the bucket's own computation, which the test reads from
// Redis's MONITOR.
func TestSharedBudgetAcrossWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binaries")
	}
	bins := build(t)
	rb := redistest.Real(t)
	api := &limitedAPI{tat: map[string]time.Time{}}
	srv := httptest.NewServer(api)
	defer srv.Close()

	parts := func(n int) string {
		ps := make([]string, n)
		for i := range ps {
			ps[i] = fmt.Sprintf("p%02d", i)
		}
		return "[" + strings.Join(ps, ", ") + "]"
	}
	poller := func(name, account, partitions string, every time.Duration) string {
		return fmt.Sprintf(`  - name: %s
    partitions: %s
    budget: %s
    request: {url: "%s/%s/${partition}/items", timeout: 5s}
    items: data
    version: version
    cursor: {strategy: timestamp, field: updated_at, param: updated_since, limitParam: limit, limit: 1, hasMore: has_more}
    schedule: {min: %s, max: %s, jitter: 0}
    delivery: {stdout: {}}
`, name, partitions, account, srv.URL, account, every, every)
	}
	cfg := filepath.Join(t.TempDir(), "watukuy.yaml")
	// shop's keys ask for more than the budget: 30 every quarter second plus a cycle's
	// round trips and the scheduler's claim.
	yaml := fmt.Sprintf("redis: %s\nprefix: wk\nbudgets:\n  - {name: shop, rate: %d/s, burst: %d}\n  - {name: acct, rate: %d/s, burst: %d}\npollers:\n",
		rb.URL, apiRate, bursts["shop"], apiRate, bursts["acct"]) +
		poller("orders", "shop", parts(30), 250*time.Millisecond) + poller("ledger", "acct", parts(5), time.Second)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens := watchTokens(t, rb.URL)
	common := []string{"--config", cfg, "--log-format", "console", "--log-level", "warn", "--listen", "off"}
	start(t, filepath.Join(bins, "watukuy-scheduler"), common...)
	for range 3 {
		start(t, filepath.Join(bins, "watukuy-worker"), append(common, "--concurrency", "16")...)
	}
	// The backfill of ledger|p00 runs through a year of hourly items: more than the test lasts.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		out, err := runCmd(ctx, filepath.Join(bins, "watukuy"), "backfill", "--redis", rb.URL, "--prefix", "wk", "--poller", "ledger", "--partition", "p00",
			"--from", "2000-01-01T00:00:00Z", "--to", "2001-01-01T00:00:00Z")
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("backfill: %v\n%s", err, out)
		}
		time.Sleep(200 * time.Millisecond) // the workers register the keys when they start
	}

	const warmup, window = 5 * time.Second, 60 * time.Second
	from := time.Now().Add(warmup)
	time.Sleep(warmup + window) // the measured minute of real processes: nothing to wait on but time
	to := from.Add(window)

	shopPolls, limited, total, acctBackfill := map[string]int{}, 0, 0, 0
	var shopOK []time.Time
	for _, r := range api.requests() {
		if r.at.Before(from) || !r.at.Before(to) {
			continue
		}
		total++
		if r.status == http.StatusTooManyRequests {
			limited++
			continue
		}
		switch {
		case r.account == "shop":
			shopPolls[r.partition]++
			shopOK = append(shopOK, r.at)
		case r.backfill:
			acctBackfill++
		}
	}
	least, most := math.MaxInt, 0
	for i := range 30 {
		n := shopPolls[fmt.Sprintf("p%02d", i)]
		least, most = min(least, n), max(most, n)
	}
	rate := float64(len(shopOK)) / window.Seconds()
	t.Logf("shop: %.1f requests/s of %d (%.0f%%), polls per key over the minute %d to %d; 429s %d of %d requests; acct backfill %d requests",
		rate, apiRate, 100*rate/apiRate, least, most, limited, total, acctBackfill)
	if limited*100 >= total {
		t.Errorf("%d of %d requests were answered 429 (want fewer than 1%%)", limited, total)
	}
	if rate < 0.9*apiRate {
		t.Errorf("shop's requests came at %.1f/s, want at least 90%% of %d/s", rate, apiRate)
	}
	if least*2 < most {
		t.Errorf("over a minute the least polled shop key was polled %d times, the most polled %d: want at least half", least, most)
	}
	if acctBackfill == 0 {
		t.Error("the backfill of ledger|p00 sent no request: it never got a token")
	}

	// Each live request of acct waited for its token no longer than the live requests asked
	// just before it explain: the backfill leaves the live lane half the burst. The waits are
	// the bucket's own (from the test's MONITOR record), in server microseconds; read up to a
	// second past the window, so that the commands of every script begun in it are in.
	if !tokens.readPast(to.Add(time.Second), 30*time.Second) {
		t.Fatalf("MONITOR has not shown Redis's commands up to a second past %s", to.Format("15:04:05.000"))
	}
	tokens.stop()
	if tokens.err != nil {
		t.Fatalf("MONITOR: %v", tokens.err)
	}
	checkLiveWaits(t, tokens, "ledger", 5, bursts["acct"], apiRate, from, to)
}

// checkLiveWaits checks the wait of every live request of poller (its keys draw from one
// budget of burst tokens at rate a second) for its token, from the takes between from and to.
//
// Backfill requests leave half the burst (reserve = burst/2) in the bucket for the live lane:
// the backfill keeps at most burst − reserve intervals of the bucket's queue taken, plus the
// one of its next request (its slot may lie ahead), plus one more if it takes a slot between
// two live requests. A live request that finds m other live requests of the poller in the
// bucket (those of the last burst intervals) therefore waits at most
// max(0, m + 3 − reserve) intervals, and not at all while it comes alone: with a live lane
// that waits behind the backfill (no reserve) every lone live request waits an interval or
// two. Waits are exact to the microsecond; the tolerance (a hundredth of an interval) covers
// the bucket's rounding of its TAT up to a whole microsecond and the microseconds between the
// script's clock and MONITOR's.
func checkLiveWaits(t *testing.T, tokens *tokenLog, poller string, keys, burst, rate int, from, to time.Time) {
	t.Helper()
	interval := time.Second / time.Duration(rate)
	reserve := burst / 2
	tolerance := interval / 100
	fromUs, toUs, windowUs := float64(from.UnixMicro()), float64(to.UnixMicro()), float64((time.Duration(burst) * interval).Microseconds())
	var live []tokenTake
	for _, k := range tokens.takes {
		if k.reserve == 0 && strings.HasPrefix(k.key, poller+"|") && k.atUs >= fromUs-windowUs && k.atUs < toUs {
			live = append(live, k)
		}
	}
	asked, waited, refusedInPause := 0, 0, 0
	var worst time.Duration
	for i, k := range live {
		if k.atUs < fromUs {
			continue // only counted as an earlier request of the next ones
		}
		asked++
		w := k.wait()
		if w < 0 {
			// No token at once: only a pause (the API answered a request of the budget with a
			// 429 and Retry-After) may refuse a live request; its wait is the API's.
			if tokens.paused(k.bucket, k.atUs) {
				refusedInPause++
				continue
			}
			t.Errorf("live request of %s at %s got no token from bucket %s, which was not paused", k.key, time.UnixMicro(int64(k.atUs)).Format("15:04:05.000000"), k.bucket)
			continue
		}
		m := 0
		for _, o := range live[:i] {
			if o.bucket == k.bucket && o.tatUs != 0 && k.atUs-o.atUs < windowUs {
				m++
			}
		}
		bound := time.Duration(max(0, m+3-reserve))*interval + tolerance
		if w > 0 {
			waited++
		}
		worst = max(worst, w)
		if w > bound {
			t.Errorf("live request of %s at %s waited %v for its token, with %d other live requests in the bucket's last %d intervals: want at most %v",
				k.key, time.UnixMicro(int64(k.atUs)).Format("15:04:05.000000"), w, m, burst, bound)
		}
	}
	t.Logf("%s's live requests: %d asked for a token, %d of them waited (the longest %v), %d met a pause after a 429", poller, asked, waited, worst, refusedInPause)
	// One live request a second per key, less what the cycles take: a recorder that misses
	// the takes fails here rather than check nothing.
	if want := keys * int(to.Sub(from).Seconds()) / 2; asked < want {
		t.Errorf("MONITOR recorded %d live takes of %s between %s and %s, want at least %d", asked, poller, from.Format("15:04:05"), to.Format("15:04:05"), want)
	}
}

func runCmd(ctx context.Context, bin string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}
