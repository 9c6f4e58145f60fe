// Package chaos puts the engine under fire and checks the guarantees. A FaultyStore fails at
// the exact call of each kill point, after which its engine is dropped as a crashed process
// would be; a Recorder logs what every engine and the fake API did; Check compares that log
// with the fake API's ground truth and counts violations per guarantee; Run drives seeded,
// reproducible scenarios. All of it runs in one process (engines on a shared Redis, fake APIs
// on loopback HTTP), light enough for watukuytest to build on; the process-level harness,
// which runs the built binaries and kills them, is package procchaos.
package chaos

import (
	"sync"
	"time"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/watukuytype"
)

// Delivery is one successful handler call.
type Delivery struct {
	Instance string
	Event    watukuytype.Event
	// Start is when the call began (before any freeze inside it), At when it returned.
	Start time.Time
	At    time.Time
	// Believed is whether the engine held its lease for valid when the call began
	// (watukuytype.CheckLease on the handler's context).
	Believed bool
	// Early marks a deleted event delivered before the API had deleted the item at that
	// version (known only where the run owns the fake API).
	Early bool
	// N orders every record of a run (the recorder's logical clock); it is set on record.
	N int64
}

// Commit is one accepted CommitPoll: the events it wrote, with their sequence.
type Commit struct {
	Instance string
	Key      watukuytype.Key
	Epoch    int64
	Events   []watukuytype.Event
	// OrderingKeys holds each event's ordering key.
	OrderingKeys []string
	Start        time.Time
	At           time.Time
	N            int64
}

// Fetch is one request a lane sent for a key.
type Fetch struct {
	Instance string
	Key      watukuytype.Key
	At       time.Time
	N        int64
}

// Throttle is a Retry-After window for a key. In-process runs record the windows watukuy
// saved (a process that dies between a 429 and saving it takes the window with it); process
// runs record what the API answered.
type Throttle struct {
	Instance string
	Key      watukuytype.Key
	From, To time.Time
	N        int64
}

// Grant is a lease acquisition.
type Grant struct {
	Instance string
	Key      watukuytype.Key
	Epoch    int64
	Token    string
	At       time.Time
	// Expires is when the lease ends on the server unless renewed.
	Expires time.Time
	N       int64
}

// Write is a fenced write that the store accepted, with the epoch it carried and the time it
// was sent.
type Write struct {
	Instance string
	Op       string
	Key      watukuytype.Key
	Epoch    int64
	Token    string
	Start    time.Time
	// Expires is the lease's new expiry when the write renewed it (zero otherwise).
	Expires time.Time
	// N is the logical time at which the write was sent (take it with Next before the call).
	N int64
}

// Recovery is a worker SIGKILLed while its cycle's request was outstanding at the API, and
// the key's next request at the API (any instance): zero Next when none came within Waited.
type Recovery struct {
	Instance string // the killed worker
	Key      watukuytype.Key
	Killed   time.Time // when the SIGKILL was sent
	Next     time.Time
	Waited   time.Duration
	// Goal bounds Next - Killed (R1).
	Goal time.Duration
	N    int64
}

// Took is the recovery time, from the SIGKILL to the key's next request; false when none came.
func (r Recovery) Took() (time.Duration, bool) {
	if r.Next.IsZero() {
		return 0, false
	}
	return r.Next.Sub(r.Killed), true
}

// Take is a token a budget's bucket gave: the request may go from Slot on.
type Take struct {
	Instance string
	Key      watukuytype.Key // the key that took it
	Bucket   string
	Slot     time.Time // by the bucket's clock
	N        int64
}

// Recorder collects what happened, from every engine, safely for concurrent use. Any part may
// stay empty: the checks that need it then report "not measured".
type Recorder struct {
	mu         sync.Mutex
	deliveries []Delivery
	commits    []Commit
	fetches    []Fetch
	throttles  []Throttle
	takes      []Take
	budgets    map[string]watukuytype.Budget // bucket → its budget
	bucketOf   map[watukuytype.Key]string
	grants     []Grant
	writes     []Write
	parked     map[string]bool // event ids parked as poison or held behind one
	discarded  map[string]bool // parked event ids an operator discarded
	measured   map[string]bool
	n          int64
	acks       []Ack
	recoveries []Recovery
	outages    []Outage
}

// Outage is a key's sink down from Down to Up (0: until the end of the run): its delivery is
// blocked, so its cycles poll while its events wait.
type Outage struct {
	Key      watukuytype.Key
	Down, Up int64
}

// SinkDown records that key's sink fails every delivery from now on.
func (r *Recorder) SinkDown(key watukuytype.Key) {
	r.add("outages", func() {
		o := Outage{Key: key}
		r.stamp(&o.Down)
		r.outages = append(r.outages, o)
	})
}

// SinkUp records that key's sink takes deliveries again.
func (r *Recorder) SinkUp(key watukuytype.Key) {
	r.add("outages", func() {
		for i := len(r.outages) - 1; i >= 0; i-- {
			if r.outages[i].Key == key && r.outages[i].Up == 0 {
				r.stamp(&r.outages[i].Up)
				return
			}
		}
	})
}

// Ack is an event whose acknowledgement the store accepted.
type Ack struct {
	Instance string
	Key      watukuytype.Key
	EventID  string
	N        int64
}

// Acked records accepted acks of delivered events, in sequence order.
func (r *Recorder) Acked(instance string, key watukuytype.Key, acked []core.Entry) {
	r.add("acks", func() {
		for _, e := range acked {
			a := Ack{Instance: instance, Key: key, EventID: e.ID}
			r.stamp(&a.N)
			r.acks = append(r.acks, a)
		}
	})
}

// Next advances the logical clock and returns it: records made later order after it.
func (r *Recorder) Next() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n++
	return r.n
}

// stamp gives a record the next logical time unless it has one; r.mu is held.
func (r *Recorder) stamp(n *int64) {
	if *n == 0 {
		r.n++
		*n = r.n
	}
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder {
	return &Recorder{parked: map[string]bool{}, discarded: map[string]bool{}, measured: map[string]bool{}}
}

func (r *Recorder) add(kind string, f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.measured[kind] = true
	f()
}

// Delivered records a successful handler call.
func (r *Recorder) Delivered(d Delivery) {
	r.add("deliveries", func() { r.stamp(&d.N); r.deliveries = append(r.deliveries, d) })
}

// Committed records an accepted commit.
func (r *Recorder) Committed(c Commit) {
	r.add("commits", func() { r.stamp(&c.N); r.commits = append(r.commits, c) })
}

// Fetched records a request.
func (r *Recorder) Fetched(f Fetch) {
	r.add("fetches", func() { r.stamp(&f.N); r.fetches = append(r.fetches, f) })
}

// Took records a token a bucket gave.
func (r *Recorder) Took(t Take) {
	r.add("takes", func() { r.stamp(&t.N); r.takes = append(r.takes, t) })
}

// Budgeted records that the requests of keys draw from bucket of budget b.
func (r *Recorder) Budgeted(b watukuytype.Budget, bucket string, keys ...watukuytype.Key) {
	r.add("budgets", func() {
		if r.budgets == nil {
			r.budgets, r.bucketOf = map[string]watukuytype.Budget{}, map[watukuytype.Key]string{}
		}
		r.budgets[bucket] = b
		for _, k := range keys {
			r.bucketOf[k] = bucket
		}
	})
}

// Throttled records a Retry-After window.
func (r *Recorder) Throttled(t Throttle) {
	r.add("throttles", func() { r.stamp(&t.N); r.throttles = append(r.throttles, t) })
}

// Granted records a lease acquisition.
func (r *Recorder) Granted(g Grant) {
	r.add("grants", func() { r.stamp(&g.N); r.grants = append(r.grants, g) })
}

// Wrote records an accepted fenced write.
func (r *Recorder) Wrote(w Write) {
	r.add("writes", func() { r.stamp(&w.N); r.writes = append(r.writes, w) })
}

// Recovered records the recovery of a key whose cycle's worker was killed mid-request.
func (r *Recorder) Recovered(rc Recovery) {
	r.add("recoveries", func() { r.stamp(&rc.N); r.recoveries = append(r.recoveries, rc) })
}

// Parked records event ids parked as poison or held behind a poison event.
func (r *Recorder) Parked(ids ...string) {
	r.add("parked", func() {
		for _, id := range ids {
			r.parked[id] = true
		}
	})
}

// Discarded records parked events an operator discarded: they are never delivered, by
// decision.
func (r *Recorder) Discarded(ids ...string) {
	r.add("parked", func() {
		for _, id := range ids {
			r.discarded[id] = true
		}
	})
}

// MarkMeasured declares a part measured even if it stayed empty (e.g. no throttle happened).
func (r *Recorder) MarkMeasured(kinds ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, k := range kinds {
		r.measured[k] = true
	}
}

// Deliveries returns the deliveries so far.
func (r *Recorder) Deliveries() []Delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Delivery(nil), r.deliveries...)
}
