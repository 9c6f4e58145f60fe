package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/redisproc"
)

// The roles an idle cycle's Redis work is split into: the scheduler (claims and enqueues),
// asynq's server (dequeues, acks and its own upkeep) and the engine (the cycle).
var costRoles = []string{"scheduler", "asynq", "engine"}

// tripCounter is a go-redis hook that counts the round trips and commands of one client.
type tripCounter struct{ trips, cmds atomic.Int64 }

func (c *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.trips.Add(1)
		c.cmds.Add(1)
		return next(ctx, cmd)
	}
}

func (c *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.trips.Add(1)
		c.cmds.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// IdleCycleCosts measures what an idle cycle costs Redis, split into scheduler, asynq and
// engine: the same setup as NoopCycles (o.NoopKeys keys whose fetch returns an empty page,
// perTask keys a task), each role on a client of its own over TCP. After a round of first
// cycles, every key is made due once more and that round is counted: round trips (a command
// or a pipeline sent) from each client's hook, and the commands Redis ran, scripts' own
// included, from MONITOR (a script's commands follow its EVALSHA, so they count for the
// client that sent it) checked against the INFO commandstats delta. Figures are per cycle.
func IdleCycleCosts(ctx context.Context, o Options, perTask int) (Result, error) {
	n := o.NoopKeys
	r, t0 := start(fmt.Sprintf("idle-costs-%dperTask", perTask))
	r.Unit, r.BaselineOf = "roundtrips/cycle", "raw asynq round trips per no-op task (enqueue, dequeue, done and upkeep), same run"
	dir, err := os.MkdirTemp(o.Dir, "idle-costs-")
	if err != nil {
		return r, fmt.Errorf("bench idle-costs: %w", err)
	}
	port, err := redisproc.FreePort()
	if err != nil {
		return r, fmt.Errorf("bench idle-costs: %w", err)
	}
	srv, admin, err := redisproc.Unix(dir, append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1"}, slowlogArgs()...)...)
	if err != nil {
		return r, fmt.Errorf("bench idle-costs: %w", err)
	}
	defer srv.Kill()
	defer admin.Close()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	counters := map[string]*tripCounter{}
	clients := map[string]*redis.Client{}
	for _, role := range costRoles {
		c := redis.NewClient(&redis.Options{Addr: addr, ClientName: "wk-" + role, PoolSize: 128, ReadTimeout: benchTimeout, WriteTimeout: benchTimeout})
		defer c.Close()
		counters[role] = &tripCounter{}
		c.AddHook(counters[role])
		clients[role] = c
	}
	e := &env{rdb: admin, prefix: "wk", queue: "wkb-idle-costs", slow: o.slow, pids: []int{srv.Pid()}}
	if e.slow == nil {
		e.slow = &slowest{}
	}
	e.watchSlowlog() // until the counted round, whose commands are the cycles' alone
	engStore, err := e.storeOn(clients["engine"])
	if err != nil {
		return r, err
	}
	schedStore, err := e.storeOn(clients["scheduler"])
	if err != nil {
		return r, err
	}
	raw := redis.NewClient(&redis.Options{Addr: addr, ClientName: "wk-raw", PoolSize: 128, ReadTimeout: benchTimeout, WriteTimeout: benchTimeout})
	defer raw.Close()
	rawTrips := &tripCounter{}
	raw.AddHook(rawTrips)
	if _, _, err := rawAsynq(ctx, raw, e.queue+"-raw", n, o.Concurrency); err != nil {
		return r, err
	}
	rig, err := startNoopRig(ctx, o, perTask, e.queue, engStore, clients["asynq"], schedStore, clients["scheduler"])
	if err != nil {
		return r, err
	}
	defer rig.stop()
	if _, err := rig.round(ctx); err != nil { // the keys' first cycles
		return r, fmt.Errorf("first round: %w", err)
	}
	if err := makeAllDue(ctx, admin, engStore, rig.poller.Partitions); err != nil {
		return r, err
	}
	e.stopLog()
	before := map[string][2]int64{}
	for role, c := range counters {
		before[role] = [2]int64{c.trips.Load(), c.cmds.Load()}
	}
	statsBefore, err := commandCalls(ctx, admin)
	if err != nil {
		return r, err
	}
	mon, err := startMonitor(addr)
	if err != nil {
		return r, err
	}
	_, roundErr := rig.round(ctx)
	// The last acks and asynq's upkeep of the round: counted while MONITOR still reads.
	time.Sleep(100 * time.Millisecond) // no signal marks the end of asynq's bookkeeping
	names, err := clientNames(ctx, admin)
	byAddr := mon.stop()
	if err != nil {
		return r, err
	}
	if roundErr != nil {
		return r, fmt.Errorf("counted round: %w", roundErr)
	}
	statsAfter, err := commandCalls(ctx, admin)
	if err != nil {
		return r, err
	}
	// The admin client's own INFO, CLIENT LIST and MONITOR are not the cycles'.
	total := statsAfter - statsBefore - 3
	perRole := map[string]int64{}
	for a, calls := range byAddr {
		perRole[names[a]] += calls
	}
	r.Details = map[string]float64{"keys": float64(n), "perTask": float64(perTask)}
	var trips, cmds float64
	for _, role := range costRoles {
		c := counters[role]
		rt := float64(c.trips.Load()-before[role][0]) / float64(n)
		sent := float64(c.cmds.Load()-before[role][1]) / float64(n)
		ran := float64(perRole["wk-"+role]) / float64(n)
		r.Details["roundTrips:"+role], r.Details["sent:"+role], r.Details["commands:"+role] = rt, sent, ran
		trips += rt
		cmds += ran
	}
	r.Details["commands:monitor"] = cmds
	r.Details["commands:commandstats"] = float64(total) / float64(n)
	r.Value = trips
	r.Baseline = float64(rawTrips.trips.Load()) / float64(3*n) // rawAsynq runs three rounds

	r.Notes = fmt.Sprintf("%d keys made due at once after their first cycles, one round counted (%d keys a task, scheduler batches of 200, asynq concurrency %d); "+
		"per cycle: round trips scheduler %.2f, asynq %.2f, engine %.2f; commands Redis ran scheduler %.2f, asynq %.2f, engine %.2f (MONITOR), %.2f in all (commandstats); raw asynq %.2f round trips a task",
		n, perTask, o.Concurrency, r.Details["roundTrips:scheduler"], r.Details["roundTrips:asynq"], r.Details["roundTrips:engine"],
		r.Details["commands:scheduler"], r.Details["commands:asynq"], r.Details["commands:engine"], r.Details["commands:commandstats"], r.Baseline)
	r.Duration = time.Since(t0)
	return r, nil
}

// commandCalls is the sum of calls over INFO commandstats: every command the server ran,
// those of scripts included.
func commandCalls(ctx context.Context, c *redis.Client) (int64, error) {
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, fmt.Errorf("INFO commandstats: %w", err)
	}
	var sum int64
	for line := range strings.SplitSeq(info, "\n") {
		_, rest, ok := strings.Cut(line, "calls=")
		if !ok {
			continue
		}
		v, _, _ := strings.Cut(rest, ",")
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO commandstats: %q: %w", line, err)
		}
		sum += n
	}
	return sum, nil
}

// clientNames maps each connection's address to its client name (CLIENT LIST).
func clientNames(ctx context.Context, c *redis.Client) (map[string]string, error) {
	list, err := c.ClientList(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("CLIENT LIST: %w", err)
	}
	out := map[string]string{}
	for line := range strings.SplitSeq(list, "\n") {
		var addr, name string
		for f := range strings.FieldsSeq(line) {
			if v, ok := strings.CutPrefix(f, "addr="); ok {
				addr = v
			} else if v, ok := strings.CutPrefix(f, "name="); ok {
				name = v
			}
		}
		if addr != "" {
			out[addr] = name
		}
	}
	return out, nil
}

// commandMonitor counts the commands MONITOR shows per client address; a script's own
// commands ("[0 lua]") count for the client whose command precedes them.
type commandMonitor struct {
	conn   net.Conn
	done   chan struct{}
	mu     sync.Mutex
	counts map[string]int64
}

// startMonitor opens a connection of its own to addr and sends MONITOR.
func startMonitor(addr string) (*commandMonitor, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("MONITOR: %w", err)
	}
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("MONITOR: %w", err)
	}
	br := bufio.NewReaderSize(conn, 1<<20)
	if line, err := br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		_ = conn.Close()
		return nil, fmt.Errorf("MONITOR: %q %v", line, err)
	}
	m := &commandMonitor{conn: conn, done: make(chan struct{}), counts: map[string]int64{}}
	go func() {
		defer close(m.done)
		last := ""
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return // the connection closed by stop
			}
			// +1796404229.910685 [0 127.0.0.1:41868] "eval" ...
			_, rest, ok := strings.Cut(line, "[")
			if !ok {
				continue
			}
			src, _, _ := strings.Cut(rest, "]")
			_, who, _ := strings.Cut(src, " ")
			if who != "lua" {
				last = who
			}
			m.mu.Lock()
			m.counts[last]++
			m.mu.Unlock()
		}
	}()
	return m, nil
}

// stop ends the monitor and returns the counts by client address.
func (m *commandMonitor) stop() map[string]int64 {
	_ = m.conn.Close()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.counts
}
