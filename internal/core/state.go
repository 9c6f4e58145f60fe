package core

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// state wraps a key's state hash with typed accessors.
type state map[string]string

func newState(m map[string]string) state {
	if m == nil {
		return state{}
	}
	return state(m)
}

func (s state) get(f string) string { return s[f] }

// int and time read a missing field (most of them, in an idle key's state) as zero without
// parsing it: a failed parse allocates its error.
func (s state) int(f string) int {
	v := s[f]
	if v == "" {
		return 0
	}
	n, _ := strconv.Atoi(v)
	return n
}
func (s state) paused() bool { return s[statehash.Paused] == "1" }
func (s state) duration(f string) time.Duration {
	return time.Duration(s.int(f)) * time.Millisecond
}
func (s state) time(f string) time.Time {
	v := s[f]
	if v == "" {
		return time.Time{}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(n).UTC()
}
func (s state) backfill() *watukuytype.BackfillProgress {
	v := s[statehash.Backfill]
	if v == "" {
		return nil
	}
	var bp watukuytype.BackfillProgress
	if json.Unmarshal([]byte(v), &bp) != nil {
		return nil
	}
	return &bp
}

// freshAt is when a cycle last found the key current: the last poll's time when that poll was
// fresh, else the freshAt field (zero when neither).
func (s state) freshAt() time.Time {
	if p, err := parsePoll(s[statehash.LastPoll]); err == nil && p.Fresh {
		if t, err := time.Parse(time.RFC3339Nano, p.At); err == nil {
			return t
		}
	}
	return s.time(statehash.FreshAt)
}
func (s state) circuit() watukuytype.CircuitState {
	if c := s[statehash.Circuit]; c != "" {
		return watukuytype.CircuitState(c)
	}
	return watukuytype.CircuitClosed
}

// Kinds of parked rows.
const (
	parkedInvalid = "invalid"
	parkedPoison  = "poison"
)
