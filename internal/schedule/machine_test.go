package schedule

import (
	"testing"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

func TestNextTransitions(t *testing.T) {
	p := Policy{Schedule: watukuytype.Schedule{Min: 10 * time.Second, Max: 80 * time.Second}, Failures: 3, ProbeEvery: 5 * time.Minute,
		Backoff: watukuytype.Backoff{Base: time.Second, Factor: 2, Max: time.Minute}}
	now := time.Unix(1_800_000_000, 0)
	at := func(d time.Duration) time.Time { return now.Add(d) }
	closed := State{Interval: 20 * time.Second, Circuit: watukuytype.CircuitClosed}
	tests := []struct {
		name string
		from State
		res  Result
		want State
	}{
		{"closed: change halves the interval", closed, Result{Kind: ResultChanged},
			State{Interval: 10 * time.Second, Circuit: watukuytype.CircuitClosed, NextDue: at(10 * time.Second)}},
		{"closed: idle stretches it by 1.5", closed, Result{Kind: ResultIdle},
			State{Interval: 30 * time.Second, Circuit: watukuytype.CircuitClosed, NextDue: at(30 * time.Second)}},
		{"first cycle starts at min", State{}, Result{Kind: ResultIdle},
			State{Interval: 15 * time.Second, Circuit: watukuytype.CircuitClosed, NextDue: at(15 * time.Second)}},
		{"closed: truncated is due at once", closed, Result{Kind: ResultTruncated},
			State{Interval: 20 * time.Second, Circuit: watukuytype.CircuitClosed, NextDue: now}},
		{"pacing stretches the wait", closed, Result{Kind: ResultChanged, Pace: time.Minute},
			State{Interval: 10 * time.Second, Circuit: watukuytype.CircuitClosed, NextDue: at(time.Minute)}},
		{"truncated is due from Begin, the pace from now", closed, Result{Kind: ResultTruncated, Began: at(-5 * time.Second), Pace: time.Second},
			State{Interval: 20 * time.Second, Circuit: watukuytype.CircuitClosed, NextDue: at(time.Second)}},
		{"truncated without a pace: due at Begin", closed, Result{Kind: ResultTruncated, Began: at(-5 * time.Second)},
			State{Interval: 20 * time.Second, Circuit: watukuytype.CircuitClosed, NextDue: at(-5 * time.Second)}},
		{"a failure waits for the pace too", closed, Result{Kind: ResultFailed, Pace: time.Minute},
			State{Interval: 20 * time.Second, Failures: 1, Circuit: watukuytype.CircuitClosed, NextDue: at(time.Minute)}},
		{"no answer: nothing changes, due at Begin", State{Interval: 20 * time.Second, Failures: 2, Circuit: watukuytype.CircuitClosed}, Result{Kind: ResultNoAnswer, Began: at(-5 * time.Second)},
			State{Interval: 20 * time.Second, Failures: 2, Circuit: watukuytype.CircuitClosed, NextDue: at(-5 * time.Second)}},
		{"no answer to a probe: the next probe", State{Interval: 20 * time.Second, Failures: 3, Circuit: watukuytype.CircuitOpen}, Result{Kind: ResultNoAnswer, Began: at(-5 * time.Second)},
			State{Interval: 20 * time.Second, Failures: 3, Circuit: watukuytype.CircuitOpen, NextDue: at(5 * time.Minute)}},
		{"no answer keeps a throttle window", State{Circuit: watukuytype.CircuitClosed, ThrottledUntil: at(time.Minute)}, Result{Kind: ResultNoAnswer},
			State{Circuit: watukuytype.CircuitClosed, NextDue: at(time.Minute), ThrottledUntil: at(time.Minute)}},
		{"closed: failure backs off (full jitter, r=.5)", closed, Result{Kind: ResultFailed},
			State{Interval: 20 * time.Second, Failures: 1, Circuit: watukuytype.CircuitClosed, NextDue: at(500 * time.Millisecond)}},
		{"backoff: failure grows the backoff", State{Interval: 20 * time.Second, Failures: 1, Circuit: watukuytype.CircuitClosed}, Result{Kind: ResultFailed},
			State{Interval: 20 * time.Second, Failures: 2, Circuit: watukuytype.CircuitClosed, NextDue: at(time.Second)}},
		{"backoff: success clears failures", State{Interval: 20 * time.Second, Failures: 2, Circuit: watukuytype.CircuitClosed}, Result{Kind: ResultIdle},
			State{Interval: 30 * time.Second, Circuit: watukuytype.CircuitClosed, NextDue: at(30 * time.Second)}},
		{"backoff: the Nth failure opens the circuit", State{Interval: 20 * time.Second, Failures: 2, Circuit: watukuytype.CircuitClosed}, Result{Kind: ResultFailed},
			State{Interval: 20 * time.Second, Failures: 3, Circuit: watukuytype.CircuitOpen, NextDue: at(5 * time.Minute)}},
		{"poison halt opens the circuit at once", closed, Result{Kind: ResultPoisonHalt},
			State{Interval: 20 * time.Second, Failures: 1, Circuit: watukuytype.CircuitOpen, NextDue: at(5 * time.Minute)}},
		{"half-open probe fails: open again", State{Interval: 20 * time.Second, Failures: 3, Circuit: watukuytype.CircuitOpen}, Result{Kind: ResultFailed},
			State{Interval: 20 * time.Second, Failures: 4, Circuit: watukuytype.CircuitOpen, NextDue: at(5 * time.Minute)}},
		{"half-open probe succeeds: closed", State{Interval: 20 * time.Second, Failures: 3, Circuit: watukuytype.CircuitOpen}, Result{Kind: ResultChanged},
			State{Interval: 10 * time.Second, Circuit: watukuytype.CircuitClosed, NextDue: at(10 * time.Second)}},
		{"429 throttles, not a failure", State{Interval: 20 * time.Second, Failures: 2, Circuit: watukuytype.CircuitClosed}, Result{Kind: ResultThrottled, RetryAfter: 90 * time.Second},
			State{Interval: 20 * time.Second, Failures: 2, Circuit: watukuytype.CircuitClosed, NextDue: at(90 * time.Second), ThrottledUntil: at(90 * time.Second)}},
		{"429 leaves an open circuit open", State{Interval: 20 * time.Second, Failures: 3, Circuit: watukuytype.CircuitOpen}, Result{Kind: ResultThrottled, RetryAfter: time.Second},
			State{Interval: 20 * time.Second, Failures: 3, Circuit: watukuytype.CircuitOpen, NextDue: at(time.Second), ThrottledUntil: at(time.Second)}},
		{"429 without Retry-After waits the interval", closed, Result{Kind: ResultThrottled},
			State{Interval: 20 * time.Second, Circuit: watukuytype.CircuitClosed, NextDue: at(20 * time.Second), ThrottledUntil: at(20 * time.Second)}},
		{"429 without Retry-After honours the pace", closed, Result{Kind: ResultThrottled, Pace: time.Minute},
			State{Interval: 20 * time.Second, Circuit: watukuytype.CircuitClosed, NextDue: at(time.Minute), ThrottledUntil: at(time.Minute)}},
		{"nothing runs inside a throttle window", State{Interval: 20 * time.Second, Circuit: watukuytype.CircuitClosed, ThrottledUntil: at(time.Hour)}, Result{Kind: ResultChanged},
			State{Interval: 10 * time.Second, Circuit: watukuytype.CircuitClosed, NextDue: at(time.Hour), ThrottledUntil: at(time.Hour)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Next(p, tc.from, tc.res, now, 0.5); got != tc.want {
				t.Fatalf("\n got  %+v\n want %+v", got, tc.want)
			}
		})
	}
}

func TestPace(t *testing.T) {
	for _, tc := range []struct {
		remaining int
		reset     time.Duration
		want      time.Duration
	}{{10, time.Minute, 6 * time.Second}, {0, time.Minute, time.Minute}, {100, 0, 0}, {-3, 10 * time.Second, 10 * time.Second}} {
		if got := Pace(tc.remaining, tc.reset); got != tc.want {
			t.Errorf("Pace(%d, %v) = %v, want %v", tc.remaining, tc.reset, got, tc.want)
		}
	}
}
