package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

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

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// Three worker processes share two 20 requests/s budgets through Redis. shop: 30 partitions
// polled every quarter second (more than 20 requests/s wanted): the API answers fewer than 1%
// of the requests with 429, the budget is used to at least 90%, and over a minute the least
// polled key gets at least half the polls of the most polled one. acct (burst 8): 5 partitions polled every
// second and a backfill of one of them, which takes what live leaves but half the burst: no
// live request of acct waits longer than one token interval for its token.
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
	common := []string{"--config", cfg, "--log-format", "console", "--log-level", "warn"}
	start(t, filepath.Join(bins, "watukuy-scheduler"), append(common, "--listen", "off")...)
	var listens []string
	for range 3 {
		addr := freeAddr(t)
		listens = append(listens, addr)
		start(t, filepath.Join(bins, "watukuy-worker"), append(common, "--listen", addr, "--concurrency", "16")...)
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

	// The live lane of acct waited at most one token interval (50ms) for each of its tokens,
	// whatever the backfill took: the workers' own histogram says so.
	var live, liveFast float64
	for _, addr := range listens {
		body := scrape(t, "http://"+addr+"/metrics")
		live += sample(body, `watukuy_budget_wait_seconds_count{budget="acct",lane="live"}`)
		liveFast += sample(body, `watukuy_budget_wait_seconds_bucket{budget="acct",lane="live",le="0.05"}`)
	}
	t.Logf("acct live requests: %.0f, of which %.0f waited at most 50ms for their token", live, liveFast)
	if live == 0 || liveFast != live {
		t.Errorf("acct's live requests: %.0f asked, %.0f got their token within one interval (50ms); want all", live, liveFast)
	}
}

func runCmd(ctx context.Context, bin string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	return string(out), err
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sample is the value of the exposition line that starts with series ("0" when absent).
func sample(body, series string) float64 {
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}
