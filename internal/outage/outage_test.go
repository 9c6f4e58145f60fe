package outage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
)

// Many failures, from several components and goroutines, make one error line; the first
// success after them one info line with the duration; a second outage two more lines.
func TestTrackerLogsOncePerOutage(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(1_800_000_000, 0)
	var downs, ups int
	var upFor time.Duration
	tr := New(zerolog.New(&buf), Options{Now: func() time.Time { return now },
		OnDown: func() { downs++ }, OnUp: func(d time.Duration) { ups++; upFor = d }})
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}

	tr.OK() // no outage: nothing to end
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() { defer wg.Done(); tr.Fail(fmt.Sprint("c", i%3), refused) }()
	}
	wg.Wait()
	if !tr.Down() {
		t.Fatal("not down after failures")
	}
	now = now.Add(20 * time.Second)
	tr.OK()
	tr.OK()
	tr.Fail("scheduler", refused)
	tr.OK()

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines, want 4 (two outages, each begun and ended once):\n%s", len(lines), buf.String())
	}
	for i, want := range []string{"Redis is unreachable", "Redis answers again", "Redis is unreachable", "Redis answers again"} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d = %s, want %q", i, lines[i], want)
		}
	}
	if !strings.Contains(lines[1], `"downFor":"20s"`) || !strings.Contains(lines[1], `"failedCalls":50`) {
		t.Errorf("the recovery line lacks the duration or the count: %s", lines[1])
	}
	if downs != 2 || ups != 2 || upFor != 0 {
		t.Errorf("OnDown %d, OnUp %d (last %s), want 2, 2, 0s", downs, ups, upFor)
	}
	var nilTracker *Tracker
	nilTracker.Fail("x", refused)
	nilTracker.OK()
	if nilTracker.Down() {
		t.Error("a nil tracker is down")
	}
}

func TestUnreachable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{context.Canceled, false},
		{redis.Nil, false},
		{errors.New("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{errors.New("ERR Error running script: LEASE_LOST"), false},
		{fmt.Errorf("claim: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}), true},
		{fmt.Errorf("claim: %w", io.EOF), true},
		{fmt.Errorf("claim: %w", context.DeadlineExceeded), true},
		{errors.Join(errors.New("enqueue a"), fmt.Errorf("x: %w", syscall.ECONNRESET)), true},
		{errors.New("LOADING Redis is loading the dataset in memory"), true},
		{errors.New("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), true},
		{errors.New("redis: connection pool: failed to dial after 5 attempts: dial tcp 127.0.0.1:1: connect: connection refused"), true},
	} {
		if got := Unreachable(c.err); got != c.want {
			t.Errorf("Unreachable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
