package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/watukuy/watukuy/internal/diff"
	"github.com/watukuy/watukuy/internal/statehash"
	"github.com/watukuy/watukuy/watukuytype"
)

// replayBatch is how many logged events one fenced commit copies into the outbox.
const replayBatch = 500

// Replay copies the key's logged events observed in [from, to] back into the outbox, with
// their original ids, a fresh sequence and lane "replay", under the key's lease (waiting a few
// seconds for a running cycle). The next cycle delivers them. A poller without log.retention
// fails with *ReplayUnavailableError.
func (e *Engine) Replay(ctx context.Context, key watukuytype.Key, from, to time.Time) (int, error) {
	if e.Stopped() {
		return 0, watukuytype.ErrEngineStopped
	}
	t, err := e.resolve(ctx, key)
	if err != nil {
		return 0, err
	}
	if t.info.logRetention() <= 0 {
		return 0, &watukuytype.ReplayUnavailableError{Key: key}
	}
	if to.IsZero() {
		to = time.Now().Add(time.Hour) // everything logged so far
	}
	// Nothing was logged before 1970, and the log's stream ids are unix milliseconds: a
	// negative one is no id Redis takes.
	for _, t := range []*time.Time{&from, &to} {
		if t.Before(time.UnixMilli(0)) {
			*t = time.UnixMilli(0)
		}
	}
	if to.Before(from) {
		return 0, fmt.Errorf("watukuy: replay %s: --to %s is before --from %s", key.Describe(), to.Format(time.RFC3339), from.Format(time.RFC3339))
	}
	n := 0
	err = e.withOpLease(ctx, t, func(c *cycle) error {
		after := ""
		for {
			entries, err := e.store.ReadLog(ctx, key, from, to, after, replayBatch)
			if err != nil {
				return err
			}
			if len(entries) == 0 {
				return nil
			}
			var cm Commit
			for _, en := range entries {
				env, err := withLane(en.Envelope, watukuytype.LaneReplay)
				if err != nil {
					return fmt.Errorf("logged event %s (%s): %w", en.ID, en.StreamID, err)
				}
				cm.Events = append(cm.Events, OutboxEvent{ID: en.ID, OrderingKey: en.OrderingKey, Envelope: env})
			}
			if _, err := e.store.CommitPoll(ctx, c.lease, cm); err != nil {
				return err
			}
			n += len(entries)
			after = entries[len(entries)-1].StreamID
		}
	})
	if err != nil {
		return n, keyErr("watukuy: replay", key, err)
	}
	return n, e.dueNow(ctx, key, "replay")
}

// withLane rewrites an envelope's lane, keeping everything else byte for byte.
func withLane(env []byte, lane watukuytype.Lane) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(env, &m); err != nil {
		return nil, err
	}
	m["lane"], _ = json.Marshal(lane)
	delete(m, "seq")
	return json.Marshal(m)
}

// ResetCursor rewinds the live lane to cursor ("" is the very beginning) and makes the key
// due now. Without clearSnapshot only real differences are emitted as the lane passes items
// again; with it the stored snapshot is forgotten, so every item is emitted as created again:
// with the id of its last emission where its content did not change, with a new one where it
// did (each identity's count of changes goes on, G2); an item that is gone by the next listing
// is still deleted.
func (e *Engine) ResetCursor(ctx context.Context, key watukuytype.Key, cursor string, clearSnapshot bool) error {
	t, err := e.resolve(ctx, key)
	if err != nil {
		return err
	}
	err = e.withOpLease(ctx, t, func(c *cycle) error {
		if clearSnapshot {
			if err := c.forgetRows(ctx); err != nil {
				return err
			}
		}
		// The committed ETag goes too: it describes what the rows held before; and a listing
		// under way starts over.
		_, err := e.store.CommitPoll(ctx, c.lease, Commit{State: map[string]string{statehash.CursorLive: cursor, statehash.LiveTag: "",
			listingField(watukuytype.LaneLive): ""}, ListedLane: watukuytype.LaneLive, ClearListed: true})
		c.endDelete = append(c.endDelete, listingField(watukuytype.LaneLive))
		return err
	})
	if err != nil {
		return keyErr("watukuy: reset-cursor", key, err)
	}
	return e.dueNow(ctx, key, "reset-cursor")
}

// forgetRows marks every row forgotten (clear-snapshot): the next observation of an identity
// is created again, with the id of the change that made its content (G2: an item that did not
// change since comes out with the id it was emitted with, which a deduping consumer drops);
// and a listing that no longer shows it still deletes it (G3). Each batch is its own fenced commit; an operation cut short leaves some rows
// forgotten and the cursor where it was, and is simply run again.
func (c *cycle) forgetRows(ctx context.Context) error {
	ids, err := c.e.store.Identities(ctx, c.key)
	if err != nil {
		return err
	}
	for from := 0; from < len(ids); from += loadBatch {
		batch := ids[from:min(from+loadBatch, len(ids))]
		known, err := c.load(ctx, batch, false)
		if err != nil {
			return err
		}
		var w pageWrites
		for i, k := range known {
			if k.row != nil && !k.row.Forgotten {
				r := *k.row
				r.Forgotten = true
				w.steps = append(w.steps, step{identity: batch[i], row: diff.AppendRow(nil, r), event: -1})
			}
		}
		if _, err := c.commit(ctx, &w); err != nil {
			return err
		}
	}
	return nil
}

// AddPartition adds a partition to a poller at run time: it is registered and due now, and
// workers running the poller pick it up. A deleted partition comes back empty (its lives and
// outbox ids above the deleted ones'); an existing one is an error (resume brings back a
// removed one). It runs under the key's lease, so it never interleaves with a delete.
func (e *Engine) AddPartition(ctx context.Context, key watukuytype.Key) error {
	if err := CheckPartition(key.Partition); key.Partition == "" || err != nil {
		return &watukuytype.ConfigError{Poller: key.Poller, Field: "partitions", Msg: fmt.Sprintf("%q must match %s", key.Partition, PartitionPattern)}
	}
	t, err := e.resolve(ctx, key)
	if err == nil {
		ki, err := e.inspect(ctx, t)
		if err != nil {
			return err
		}
		if ki.Status != watukuytype.StatusDeleted {
			return addConflict(key, ki.Status)
		}
	} else if nf := (*watukuytype.NotFoundError)(nil); !errors.As(err, &nf) || !nf.PartitionMissing {
		return err
	}
	if t.info.SharedRequest {
		return &watukuytype.ConfigError{Poller: key.Poller, Field: "request",
			Msg: fmt.Sprintf("has no ${partition} in its URL, query or headers: partition %q would poll the same API as its other keys and emit the same events again; put ${partition} in the request where the API takes the partition, then add it", key.Partition)}
	}
	t.key = key
	err = e.opLease(ctx, t, BeginForAdd, func(c *cycle) error {
		existed, err := e.store.AddKey(ctx, c.lease, c.state.get(statehash.Deleted) == "1")
		if err == nil && existed {
			return addConflict(key, "added meanwhile")
		}
		return err
	})
	if err != nil {
		return keyErr("watukuy: partitions add", key, err)
	}
	return nil
}

// addConflict is partitions add of a key that exists.
func addConflict(key watukuytype.Key, status watukuytype.Status) error {
	return &watukuytype.ConflictError{Key: key, Msg: fmt.Sprintf("already exists (status %s); use resume to bring back a removed or paused one", status)}
}

// RemovePartition takes a partition out of service and keeps its state: it is paused and
// marked removed; Resume brings it back from its last cursor.
func (e *Engine) RemovePartition(ctx context.Context, key watukuytype.Key) error {
	t, err := e.resolve(ctx, key)
	if err != nil {
		return err
	}
	err = e.withOpLease(ctx, t, func(c *cycle) error {
		_, err := e.store.CommitPoll(ctx, c.lease, Commit{State: map[string]string{statehash.Paused: "1", statehash.Removed: "1"}})
		return err
	})
	if err != nil {
		return keyErr("watukuy: partitions remove", key, err)
	}
	return nil
}

// DeletePartition removes a partition with its state, snapshot, outbox, parked rows and log,
// under its lease. A partition still listed in a running config stays deleted (workers skip
// it) until AddPartition.
func (e *Engine) DeletePartition(ctx context.Context, key watukuytype.Key) error {
	t, err := e.resolve(ctx, key)
	if err != nil {
		return err
	}
	err = e.opLease(ctx, t, BeginForDelete, func(c *cycle) error { // a delete again finishes one cut short
		c.released = true
		return e.store.DeleteKey(ctx, c.lease)
	})
	if err != nil {
		return keyErr("watukuy: partitions delete", key, err)
	}
	return nil
}

// Trigger makes a key due now; an open circuit gets its probe. It is an operator's override:
// it also clears the key's Retry-After window (the cleared window is logged), so a bogus
// window need not be waited out. A window the API gives again is kept again.
func (e *Engine) Trigger(ctx context.Context, key watukuytype.Key) error {
	return e.keyOp(ctx, key, "trigger", func(ctx context.Context, key watukuytype.Key) error {
		until, err := e.store.ClearThrottle(ctx, key)
		if err != nil {
			return err
		}
		if !until.IsZero() {
			e.log.Warn().Str("poller", key.Poller).Str("partition", key.Partition).Time("throttledUntil", until.UTC()).
				Msg("trigger: cleared the key's Retry-After window (operator override)")
		}
		return e.store.Trigger(ctx, key)
	})
}

// Pause stops the key's cycles (no request, no delivery) until Resume.
func (e *Engine) Pause(ctx context.Context, key watukuytype.Key) error {
	return e.keyOp(ctx, key, "pause", e.store.Pause)
}

// Resume lifts a pause; the key is due at once.
func (e *Engine) Resume(ctx context.Context, key watukuytype.Key) error {
	return e.keyOp(ctx, key, "resume", e.store.Resume)
}

func (e *Engine) keyOp(ctx context.Context, key watukuytype.Key, name string, op func(context.Context, watukuytype.Key) error) error {
	if e.Stopped() {
		return watukuytype.ErrEngineStopped
	}
	if t, err := e.resolve(ctx, key); err != nil {
		return err
	} else if t.deleted {
		return deletedKey(key)
	}
	if snap, err := e.store.Inspect(ctx, key); err != nil {
		return keyErr("watukuy: "+name, key, err)
	} else if snap.State[statehash.Deleted] == "1" {
		return deletedKey(key) // a deleted config partition stays listed; a pause would outlive it
	}
	return writeErr(name, key, op(ctx, key))
}

// dueNow makes key due now after an operation (Store.Trigger); a partitions delete that
// completed since is a *NotFoundError (Deleted), and nothing is written.
func (e *Engine) dueNow(ctx context.Context, key watukuytype.Key, name string) error {
	return writeErr(name, key, e.store.Trigger(ctx, key))
}

// writeErr is the error of operation name's unleased write on key: ErrKeyDeleted (a
// partitions delete completed since the caller looked) is the deleted partition's.
func writeErr(name string, key watukuytype.Key, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrKeyDeleted):
		return deletedKey(key)
	}
	return keyErr("watukuy: "+name, key, err)
}

// opLeaseWait is how long an operation waits for another holder of the key's lease.
const opLeaseWait = 5 * time.Second

// deletedKey is the error of an operation on a deleted partition.
func deletedKey(key watukuytype.Key) error {
	return &watukuytype.NotFoundError{Poller: key.Poller, Partition: key.Partition, PartitionMissing: true, Deleted: true,
		Hint: "the partition is deleted: `partitions add` brings it back, empty"}
}

// withOpLease runs fn under the key's lease, waiting up to 5s for another holder to finish;
// a deleted key is a *NotFoundError (Deleted) and nothing is written.
// The cycle's poller is nil when this engine does not have the key's definition.
func (e *Engine) withOpLease(ctx context.Context, t target, fn func(c *cycle) error) error {
	if t.deleted {
		return deletedKey(t.key)
	}
	return e.opLease(ctx, t, BeginForOp, fn)
}

// opLease is withOpLease in a mode: BeginForDelete and BeginForAdd run fn on a deleted key,
// BeginForOp fails with deletedKey before it takes the lease.
func (e *Engine) opLease(ctx context.Context, t target, mode BeginMode, fn func(c *cycle) error) error {
	if e.Stopped() {
		return watukuytype.ErrEngineStopped
	}
	deadline := time.Now().Add(opLeaseWait)
	ttl := t.info.leaseTTL()
	if t.p != nil {
		ttl = t.p.LeaseTTL
	}
	for {
		sent := e.now()
		b, err := e.store.Begin(ctx, t.key, e.owner, ttl, mode)
		if err != nil {
			return err
		}
		if b.Status == BeginDeleted {
			// Deleted, perhaps by the partitions delete whose lease this waited for: Begin
			// took no lease and wrote nothing; writing would put data into the deletion
			// mark, which partitions add would bring back.
			return deletedKey(t.key)
		}
		if b.Status == BeginOK {
			c := newCycle(e, t.p, b, sent, e.now())
			ferr := fn(c)
			if c.released {
				return ferr
			}
			if err := e.store.End(ctx, c.lease, EndRequest{Delete: c.endDelete, NextDue: b.Now, Trigger: c.state.get(statehash.Trigger)}); err != nil && ferr == nil {
				ferr = err
			}
			return ferr
		}
		if time.Now().After(deadline) {
			return &watukuytype.KeyBusyError{Key: t.key, Waited: opLeaseWait}
		}
		wait := min(b.LeaseExpires.Sub(b.Now), 250*time.Millisecond)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(max(wait, 10*time.Millisecond)):
		}
	}
}
