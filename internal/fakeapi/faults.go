package fakeapi

import (
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// Fault is one scripted misbehaviour. Faults wait in a queue (Inject); each request takes the
// first queued fault whose Path matches, and a fault leaves the queue after Times requests.
// Several effects of one Fault combine (e.g. Delay then Status 503 with a Header).
type Fault struct {
	// Path is the endpoint the fault applies to ("/items", "/sync", "/list", or "/items/{id}"
	// for every detail request); a detail path with a real id ("/items/" + the unescaped id)
	// targets that item's detail only; "" = any request. "/items" is the timestamp feed alone.
	Path string
	// Status answers with this status and a JSON error body instead of the page (0 = no
	// override).
	Status int
	// RetryAfter is the raw Retry-After header value ("2", or an HTTP-date) to send.
	RetryAfter string
	// Times is how many requests the fault applies to; 0 means 1. More than 1 is a burst.
	Times int
	// Delay holds the answer this long; the client going away (its timeout) or Close ends the
	// wait, and then nothing is answered.
	Delay time.Duration
	// Malformed answers 200 with the page's JSON body cut in half.
	Malformed bool
	// NoIdentity answers 200 with the normal page but its first item lacking "id" (an empty
	// page gets one item {"version":1}).
	NoIdentity bool
	// Header is added to the response (replacing headers of the same name, e.g. RateLimit
	// headers of the server's own limiter).
	Header http.Header
}

// Inject appends faults to the queue, in order.
func (s *Server) Inject(f ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range f {
		if f.Times <= 0 {
			f.Times = 1
		}
		f.Header = f.Header.Clone()
		s.faults = append(s.faults, f)
	}
}

// ClearFaults drops every queued fault: the API behaves again.
func (s *Server) ClearFaults() {
	s.mu.Lock()
	s.faults = nil
	s.mu.Unlock()
}

// PendingFaults returns how many requests the queued faults still apply to (the sum of their
// remaining Times).
func (s *Server) PendingFaults() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, f := range s.faults {
		n += f.Times
	}
	return n
}

// takeFault consumes one use of the first queued fault matching the request's endpoint or its
// path.
func (s *Server) takeFault(endpoint, path string) (Fault, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.faults {
		f := &s.faults[i]
		if f.Path != "" && f.Path != endpoint && f.Path != path {
			continue
		}
		out := *f
		f.Times--
		if f.Times == 0 {
			s.faults = append(s.faults[:i], s.faults[i+1:]...)
		}
		return out, true
	}
	return Fault{}, false
}

// rateLimiter is a fixed-window quota on the API clock.
type rateLimiter struct {
	limit  int
	window time.Duration
	start  time.Time // start of the current window
	used   int
}

// SetRateLimit enforces a fixed-window quota of limit requests per window, measured on the API
// clock (it restarts when Advance or SetNow moves the clock past the window's end, never by
// wall time). The first window starts now. Every request consumes one unit, whatever it is
// answered; once the quota is used up the server answers 429 with Retry-After = seconds to
// the window's end. Every response carries
//
//	RateLimit-Limit: <limit>
//	RateLimit-Remaining: <remaining>
//	RateLimit-Reset: <seconds to the window's end, rounded up>
//	RateLimit: "default";r=<remaining>;t=<seconds>
//	RateLimit-Policy: "default";q=<limit>;w=<window seconds>
//
// limit 0 disables the limiter; a window <= 0 means one minute.
func (s *Server) SetRateLimit(limit int, window time.Duration) {
	if window <= 0 {
		window = time.Minute
	}
	now := s.api.Now()
	s.mu.Lock()
	s.rl = rateLimiter{limit: limit, window: window, start: now}
	s.mu.Unlock()
}

// consumeQuota takes one unit of the quota and sets the RateLimit headers; it reports whether
// the quota was already used up, and the Retry-After value for that case.
func (s *Server) consumeQuota(h http.Header) (exhausted bool, retryAfter string) {
	now := s.api.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	rl := &s.rl
	if rl.limit <= 0 {
		return false, ""
	}
	switch {
	case now.Before(rl.start): // the clock was set back: start over
		rl.start, rl.used = now, 0
	case !now.Before(rl.start.Add(rl.window)):
		rl.start = rl.start.Add(now.Sub(rl.start).Truncate(rl.window))
		rl.used = 0
	}
	rl.used++
	exhausted = rl.used > rl.limit
	remaining := max(rl.limit-rl.used, 0)
	reset := ceilSeconds(rl.start.Add(rl.window).Sub(now))
	secs := strconv.Itoa(reset)
	h.Set("RateLimit-Limit", strconv.Itoa(rl.limit))
	h.Set("RateLimit-Remaining", strconv.Itoa(remaining))
	h.Set("RateLimit-Reset", secs)
	h.Set("RateLimit", fmt.Sprintf(`"default";r=%d;t=%d`, remaining, reset))
	h.Set("RateLimit-Policy", fmt.Sprintf(`"default";q=%d;w=%d`, rl.limit, ceilSeconds(rl.window)))
	return exhausted, secs
}

func ceilSeconds(d time.Duration) int {
	return int((d + time.Second - 1) / time.Second)
}
