// Package fakeclock is the clock tests move by hand: engines, stores and miniredis read it
// instead of the wall clock, so leases, due times and throttle windows advance only when a
// test says so.
package fakeclock

import (
	"sync"
	"time"
)

// Clock is a time that moves only by Advance; safe for concurrent use.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// New returns a clock at t.
func New(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}
