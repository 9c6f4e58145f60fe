package bench

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/luascripts"
)

// The servers a measurement starts log every command slower than slowlogThreshold (Redis 7
// logs the commands scripts call as well as the scripts), and its env reads and empties the
// log every slowlogEvery: one server logs at most twice slowlogEvery/slowlogThreshold entries
// between two reads (1,000), well under slowlogMaxLen, so none is lost and the log stays
// small (the memory figures count it).
const (
	slowlogThreshold = 500 * time.Microsecond
	slowlogMaxLen    = 4096
	slowlogEvery     = 250 * time.Millisecond
	// traceMaxLen is the slowlog length while traced logs every command.
	traceMaxLen = 65536
)

// slowlogArgs are the redis-server arguments that turn the slowlog on as above.
func slowlogArgs() []string {
	return []string{"--slowlog-log-slower-than", strconv.FormatInt(slowlogThreshold.Microseconds(), 10),
		"--slowlog-max-len", strconv.Itoa(slowlogMaxLen)}
}

// slowest is the longest script the servers of one measurement ran, as their slowlogs
// recorded it (EVALSHA and EVAL entries).
type slowest struct {
	mu      sync.Mutex
	watched bool // a server of the measurement's own was watched
	longest time.Duration
	script  string
}

// add takes a slowlog entry into account.
func (s *slowest) add(l redis.SlowLog) {
	name := scriptOf(l.Args)
	if name == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.Duration > s.longest {
		s.longest, s.script = l.Duration, name
	}
}

// note puts the longest script into every result of the measurement: Details
// ["longestScriptMs"] and LongestScript. Nothing on a shared server.
func (s *slowest) note(rs []Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.watched {
		return
	}
	for i := range rs {
		if rs[i].Details == nil {
			rs[i].Details = map[string]float64{}
		}
		rs[i].Details["longestScriptMs"] = millis(s.longest)
		rs[i].LongestScript = s.script
	}
}

// millis is d in milliseconds.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// scriptNames maps the SHA1 of every script of internal/luascripts (as EVALSHA names it) to
// the script's name.
var scriptNames = sync.OnceValue(func() map[string]string {
	m := map[string]string{}
	for _, name := range luascripts.Names() {
		src, err := luascripts.Source(name)
		if err != nil {
			continue
		}
		sum := sha1.Sum([]byte(src))
		m[hex.EncodeToString(sum[:])] = name
	}
	return m
})

// scriptOf names the script a slowlog entry ran: its name for an EVALSHA of a watukuy
// script, "eval" for a script sent whole (the log keeps only its start, the prelude every
// script shares), "" for a command that runs no script.
func scriptOf(args []string) string {
	if len(args) < 2 {
		return ""
	}
	switch strings.ToLower(args[0]) {
	case "evalsha", "evalsha_ro":
		if name, ok := scriptNames()[strings.ToLower(args[1])]; ok {
			return name
		}
		return "evalsha " + args[1][:min(len(args[1]), 8)]
	case "eval", "eval_ro":
		return "eval"
	}
	return ""
}

// loadScripts loads every script of internal/luascripts into each server of the env, so that
// the measurement's clients never send one whole: the slowlog shows only the start of an EVAL
// (the prelude every script shares), and names an EVALSHA's script by its SHA1.
func (e *env) loadScripts(ctx context.Context) error {
	return e.eachServer(ctx, func(ctx context.Context, c *redis.Client) error {
		for _, name := range luascripts.Names() {
			src, err := luascripts.Source(name)
			if err != nil {
				return err
			}
			if err := c.ScriptLoad(ctx, src).Err(); err != nil {
				return fmt.Errorf("load %s: %w", name, err)
			}
		}
		return nil
	})
}

// watchSlowlog reads the env's slowlogs every slowlogEvery into e.slow until close.
func (e *env) watchSlowlog() {
	e.slow.mu.Lock()
	e.slow.watched = true
	e.slow.mu.Unlock()
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(slowlogEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				e.logMu.Lock()
				_ = e.drainSlowlog(context.Background()) // the next read, or the last, takes what this one missed
				e.logMu.Unlock()
			}
		}
	}()
	e.stopLog = func() {
		close(done)
		<-stopped
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		e.logMu.Lock()
		_ = e.drainSlowlog(ctx)
		e.logMu.Unlock()
	}
}

// drainSlowlog reads and empties the slowlog of every server of the env (one transaction
// per server, so no entry comes between the read and the reset) into e.slow. The caller
// holds e.logMu.
func (e *env) drainSlowlog(ctx context.Context) error {
	return e.eachServer(ctx, func(ctx context.Context, c *redis.Client) error {
		var get *redis.SlowLogCmd
		if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
			get = p.SlowLogGet(ctx, -1)
			p.SlowLogReset(ctx)
			return nil
		}); err != nil {
			return fmt.Errorf("slowlog: %w", err)
		}
		for _, l := range get.Val() {
			e.slow.add(l)
		}
		return nil
	})
}

// eachServer calls fn with a client of each server of the env (each master of a cluster).
func (e *env) eachServer(ctx context.Context, fn func(context.Context, *redis.Client) error) error {
	if cc, ok := e.rdb.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, fn)
	}
	c, ok := e.rdb.(*redis.Client)
	if !ok {
		return fmt.Errorf("bench: a %T", e.rdb)
	}
	return fn(ctx, c)
}

// quiet runs fn with the env's slowlog reads held off, its slowlog emptied first when it is
// watched: while fn runs only fn talks to the server (byte counts), and no log entry is in
// its memory (memory readings).
func (e *env) quiet(ctx context.Context, fn func() error) error {
	e.logMu.Lock()
	defer e.logMu.Unlock()
	if e.stopLog != nil {
		if err := e.drainSlowlog(ctx); err != nil {
			return err
		}
	}
	return fn()
}

// trace is what the slowlog recorded while traced ran its function, every command logged.
type trace struct {
	scripts        map[string]time.Duration // each script's longest run
	commands       int                      // the commands clients sent
	calls          int                      // the commands scripts called (within their scripts' time)
	longestCommand time.Duration            // the longest command a client sent, script or not
	commandName    string                   // its name (a script's name for a script)
}

// scriptClient is the client address the slowlog gives a command a script called (Redis 7
// logs those too).
const scriptClient = "?:0"

// longest is the longest script of t: of the script only when only is not "".
func (t trace) longest(only string) (string, time.Duration) {
	var name string
	var d time.Duration
	for s, sd := range t.scripts {
		if (only == "" || s == only) && (sd > d || sd == d && s < name) {
			name, d = s, sd
		}
	}
	return name, d
}

// details are t's figures for a result's Details.
func (t trace) details(d map[string]float64) {
	d["commands"] = float64(t.commands)
	d["scriptCalls"] = float64(t.calls)
	d["longestCommandMs"] = millis(t.longestCommand)
	for s, sd := range t.scripts {
		d["scriptMs:"+s] = millis(sd)
	}
}

// traced runs fn with every command of the (single) server logged (slowlog-log-slower-than
// 0) and returns what the log recorded meanwhile. The slowlog settings are put back after;
// on a shared server only the entries logged after fn began are read, and the log is not
// emptied.
func (e *env) traced(ctx context.Context, fn func() error) (trace, error) {
	t := trace{scripts: map[string]time.Duration{}}
	c, ok := e.rdb.(*redis.Client)
	if !ok {
		return t, errors.New("bench: tracing scripts needs a single redis-server, not a cluster")
	}
	e.logMu.Lock()
	defer e.logMu.Unlock()
	own := e.stopLog != nil
	if own {
		if err := e.drainSlowlog(ctx); err != nil {
			return t, err
		}
	}
	cfg, err := c.ConfigGet(ctx, "slowlog-*").Result()
	if err != nil {
		return t, fmt.Errorf("slowlog settings: %w", err)
	}
	restore := func() error {
		for _, k := range []string{"slowlog-log-slower-than", "slowlog-max-len"} {
			if err := c.ConfigSet(ctx, k, cfg[k]).Err(); err != nil {
				return fmt.Errorf("put back %s %s: %w", k, cfg[k], err)
			}
		}
		return nil
	}
	if err := c.ConfigSet(ctx, "slowlog-max-len", strconv.Itoa(traceMaxLen)).Err(); err != nil {
		return t, fmt.Errorf("slowlog-max-len: %w", err)
	}
	last := int64(-1)
	if ls, err := c.SlowLogGet(ctx, 1).Result(); err != nil {
		_ = restore()
		return t, fmt.Errorf("slowlog: %w", err)
	} else if len(ls) > 0 {
		last = ls[0].ID
	}
	if err := c.ConfigSet(ctx, "slowlog-log-slower-than", "0").Err(); err != nil {
		_ = restore()
		return t, fmt.Errorf("slowlog-log-slower-than: %w", err)
	}
	ferr := fn()
	logs, err := c.SlowLogGet(ctx, -1).Result()
	if rerr := restore(); err == nil {
		err = rerr
	}
	if err == nil && own {
		err = c.SlowLogReset(ctx).Err()
	}
	if err != nil {
		return t, fmt.Errorf("slowlog: %w", err)
	}
	if len(logs) >= traceMaxLen {
		return t, fmt.Errorf("bench: the slowlog filled up (%d entries): the longest command may be lost", len(logs))
	}
	for _, l := range logs {
		if l.ID <= last || len(l.Args) == 0 {
			continue
		}
		cmd := strings.ToLower(l.Args[0])
		switch {
		case cmd == "slowlog" || cmd == "config":
			continue // the trace's own
		case l.ClientAddr == scriptClient:
			t.calls++
			continue
		}
		t.commands++
		name := scriptOf(l.Args)
		if name != "" {
			t.scripts[name] = max(t.scripts[name], l.Duration)
			e.slow.add(l)
		} else {
			name = cmd
		}
		if l.Duration > t.longestCommand {
			t.longestCommand, t.commandName = l.Duration, name
		}
	}
	return t, ferr
}
