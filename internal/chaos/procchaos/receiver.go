//go:build unix

package procchaos

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/watukuy/watukuy/internal/chaos"
	"github.com/watukuy/watukuy/internal/jcs"
	"github.com/watukuy/watukuy/watukuytype"
	"github.com/watukuy/watukuy/webhook"
)

// verifiedEvent reads a webhook delivery, checks its signature and decodes its event; on
// failure it has answered the request (a bad signature counted in badSig and, with logf,
// logged) and ok is false.
func verifiedEvent(w http.ResponseWriter, req *http.Request, badSig *atomic.Int64, logf func(string, ...any)) (ev watukuytype.Event, ok bool) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return ev, false
	}
	if err := verify([]string{processSecret}, req.Header, body); err != nil {
		badSig.Add(1)
		if logf != nil {
			logf("G2: bad signature on webhook %s: %v", req.Header.Get(webhook.HeaderID), err)
		}
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return ev, false
	}
	if err := json.Unmarshal(body, &ev); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return ev, false
	}
	return ev, true
}

// receive is the webhook endpoint: verify, record, 204.
func (r *processRun) receive(w http.ResponseWriter, req *http.Request) {
	if r.recv.down.Load() {
		http.Error(w, "receiver down", http.StatusServiceUnavailable)
		return
	}
	ev, ok := verifiedEvent(w, req, &r.recv.badSig, r.logf)
	if !ok {
		return
	}
	if r.refusePoison(ev) {
		http.Error(w, "poison: the consumer rejects this event", http.StatusInternalServerError)
		return
	}
	now := time.Now()
	if r.staleRedelivery(ev, req.Header.Get(webhook.HeaderTimestamp), now) {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	r.rec.Delivered(chaos.Delivery{Instance: "webhook", Event: ev, At: now})
	w.WriteHeader(http.StatusNoContent)
}

// staleLate is how long after its signature a delivery must arrive to come from a frozen
// sender: a webhook is signed right before it is sent, and a stop lasts 5 s.
const staleLate = 2 * time.Second

// staleRedelivery reports (and counts) a delivery the receiver drops as docs/operations.md tells
// consumers to: a handler call that a frozen instance finishes after losing its lease still
// arrives ("no one can unsend it"), and consumers that need strict order drop a redelivery
// older than what they already applied. Dropped is only a delivery that is all of: late (signed
// at least staleLate before it arrived: its sender was frozen), a duplicate (its id was
// delivered before, with the same change), and stale (its seq is older than the newest one
// delivered for its identity). Anything else is recorded, so a first delivery out of order
// still counts against G4, and an old event sent again without a freeze against G3.
func (r *processRun) staleRedelivery(ev watukuytype.Event, signed string, now time.Time) bool {
	what := ev.Poller + "|" + ev.Partition + "|" + string(ev.Type) + "|" + ev.Identity + "|" + ev.Version + "|"
	if c, err := jcs.Append(nil, ev.Item); err == nil {
		h := sha256.Sum256(c)
		what += hex.EncodeToString(h[:8])
	} else {
		what += string(ev.Item)
	}
	r.recv.mu.Lock()
	defer r.recv.mu.Unlock()
	if r.recv.whatOf == nil {
		r.recv.whatOf, r.recv.newest = map[string]string{}, map[string]string{}
	}
	secs, err := strconv.ParseInt(signed, 10, 64)
	late := err == nil && now.Sub(time.Unix(secs, 0)) >= staleLate+time.Second // the header has whole seconds
	newest, seen := r.recv.newest[ev.Identity], r.recv.whatOf[ev.ID]
	if late && seen == what && newest != "" && chaos.SeqLess(ev.Seq, newest) {
		r.recv.stale++
		r.logf("stale redelivery dropped: %s (%s %s v%s, seq %s) signed %s ago, after seq %s of its identity was delivered",
			ev.ID, ev.Type, ev.Identity, ev.Version, ev.Seq, now.Sub(time.Unix(secs, 0)).Round(time.Second), newest)
		return true
	}
	if seen == "" {
		r.recv.whatOf[ev.ID] = what
	}
	if newest == "" || chaos.SeqLess(newest, ev.Seq) {
		r.recv.newest[ev.Identity] = ev.Seq
	}
	return false
}

// verify checks a received webhook's signature with package webhook, as a receiver does.
func verify(secrets []string, header http.Header, body []byte) error {
	v, err := webhook.NewVerifier(secrets, webhook.Options{})
	if err != nil {
		return err
	}
	return v.Verify(header, body)
}
