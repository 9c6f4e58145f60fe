package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/budget"
	"github.com/watukuy/watukuy/internal/humantime"
)

// inspectCmd reports keys: a table of every key (or of one poller's), or every field of one.
func inspectCmd() *cobra.Command {
	o := &op{}
	return o.command(opSpec{
		use:   "inspect [--poller P [--partition X]]",
		short: "Show keys: status, cursors, lease, schedule, lag, freshness, outbox, parked rows, last error",
		long: `inspect lists every known key (or the keys of --poller) in a table; with --partition it
shows every field of one key. Below the keys' table, the shared budgets their requests draw
from: each bucket's rate, burst, the tokens it holds now, a pause a 429 set, and its keys. It
needs only the Redis URL: pollers, partitions and budgets come from the registry that workers
write. --json prints an array of keys, or one object with --partition.`,
		keys: anyKeys,
		run: func(ctx context.Context, eng *watukuy.Engine) error {
			if o.partitionGiven {
				ki, err := eng.Inspect(ctx, o.poller, o.partition)
				if err != nil {
					return err
				}
				if o.asJSON {
					return writeJSON(o.out, ki)
				}
				return printKeyDetail(o.out, ki, time.Now())
			}
			kis, err := eng.InspectAll(ctx, o.poller)
			if err != nil {
				return err
			}
			if o.asJSON {
				return writeJSON(o.out, kis)
			}
			if len(kis) == 0 {
				_, err := fmt.Fprintln(o.out, "no keys: no poller is registered in this Redis (start a worker with the config, or check --redis and --prefix)")
				return err
			}
			if err := printKeyTable(o.out, kis, time.Now()); err != nil {
				return err
			}
			bs, err := eng.Budgets(ctx)
			if err != nil || len(bs) == 0 {
				return err
			}
			fmt.Fprintln(o.out)
			return printBudgetTable(o.out, bs, o.poller, time.Now())
		},
	})
}

// printBudgetTable shows the buckets that keys of poller (all when "") draw from.
func printBudgetTable(w io.Writer, bs []watukuy.BudgetInfo, poller string, now time.Time) error {
	t := newTable(w, "BUDGET", "BUCKET", "RATE", "BURST", "TOKENS", "PAUSED-UNTIL", "KEYS")
	for _, b := range bs {
		keys := 0
		for _, k := range b.Keys {
			if poller == "" || k.Poller == poller {
				keys++
			}
		}
		if keys == 0 {
			continue
		}
		paused := ""
		if !b.PausedUntil.IsZero() {
			paused = humantime.Relative(b.PausedUntil, now)
		}
		t.row(b.Budget.Name, b.Bucket, budget.FormatRate(b.Budget.Rate, b.Budget.Per), itoa(b.Budget.Burst),
			strconv.FormatFloat(b.Tokens, 'f', 1, 64), paused, itoa(keys))
	}
	return t.flush()
}

func lastError(ki watukuy.KeyInfo) (watukuy.LastError, bool) {
	var le watukuy.LastError
	return le, len(ki.LastError) > 0 && json.Unmarshal(ki.LastError, &le) == nil
}

// freshness renders the time since the key was last fresh ("" when it never was).
func freshness(ki watukuy.KeyInfo) string {
	if ki.FreshAt == nil || ki.FreshnessMs < 0 {
		return ""
	}
	return humantime.Round(time.Duration(ki.FreshnessMs) * time.Millisecond).String()
}

func printKeyTable(w io.Writer, kis []watukuy.KeyInfo, now time.Time) error {
	t := newTable(w, "POLLER", "PARTITION", "STATUS", "CURSOR", "ITEMS", "OUTBOX", "PARKED", "LAG", "FRESH", "NEXT-DUE", "LAST-ERROR")
	for _, ki := range kis {
		next := ""
		if ki.NextDueAt != nil {
			next = humantime.Relative(*ki.NextDueAt, now)
		}
		le, _ := lastError(ki)
		t.row(ki.Poller, ki.Partition, string(ki.Status), clip(ki.Cursor, 32), itoa(ki.Items), itoa(ki.OutboxPending), itoa(ki.Parked),
			humantime.Round(time.Duration(ki.LagMs)*time.Millisecond).String(), freshness(ki), next, string(le.Code))
	}
	return t.flush()
}

// printKeyDetail prints every field of one key, named as in the --json output.
func printKeyDetail(w io.Writer, ki watukuy.KeyInfo, now time.Time) error {
	t := newTable(w)
	t.row("poller", ki.Poller)
	t.row("partition", ki.Partition)
	t.row("status", string(ki.Status))
	t.row("paused", yesNo(ki.Paused))
	t.row("source", ki.Source)
	lanes := make([]string, 0, len(ki.Cursors))
	for l := range ki.Cursors {
		lanes = append(lanes, l)
	}
	sort.Strings(lanes)
	for _, l := range lanes {
		t.row("cursors."+l, ki.Cursors[l])
	}
	t.row("lease.owner", ki.LeaseOwner)
	t.row("lease.epoch", itoa(ki.LeaseEpoch))
	t.row("lease.expiresAt", when(ki.LeaseExpires, now))
	t.row("nextDueAt", when(ki.NextDueAt, now))
	t.row("interval", ki.Interval.String())
	t.row("circuit", string(ki.Circuit))
	t.row("consecutiveFailures", itoa(ki.Failures))
	t.row("throttledUntil", when(ki.ThrottledUntil, now))
	t.row("rateLimit", string(ki.RateLimit))
	t.row("reconcileDueAt", when(ki.ReconcileDue, now))
	var lp watukuy.PollSummary
	if len(ki.LastPoll) > 0 && json.Unmarshal(ki.LastPoll, &lp) == nil {
		flags := ""
		for _, f := range []struct {
			on   bool
			name string
		}{{lp.Truncated, "truncated"}, {lp.NotModified, "not modified"}, {lp.Reconciled, "reconciled"}, {lp.BackfillPending, "backfill pending"}} {
			if f.on {
				flags += ", " + f.name
			}
		}
		t.row("lastPoll", fmt.Sprintf("%s at %s in %dms: %s, %s, %s, %d delivered, %d parked, %d invalid%s",
			lp.Outcome, lp.At, lp.DurationMs, plural(lp.Pages, "page"), plural(lp.Items, "item"), plural(lp.Events, "event"), lp.Delivered, lp.Parked, lp.Invalid, flags))
	} else {
		t.row("lastPoll", string(ki.LastPoll))
	}
	if le, ok := lastError(ki); ok {
		t.row("lastError", fmt.Sprintf("%s (%s) at %s: %s", le.Code, le.Phase, le.At, le.Message))
	} else {
		t.row("lastError", string(ki.LastError))
	}
	t.row("lag", humantime.Round(time.Duration(ki.LagMs)*time.Millisecond).String())
	t.row("freshAt", when(ki.FreshAt, now))
	t.row("freshness", freshness(ki))
	t.row("outboxPending", itoa(ki.OutboxPending))
	if ki.OutboxOldestAt != nil {
		t.row("outboxOldest", fmt.Sprintf("%s (%s old)", ki.OutboxOldestAt.UTC().Format(time.RFC3339), humantime.Round(time.Duration(ki.OutboxOldestAgeMs)*time.Millisecond)))
	} else {
		t.row("outboxOldest", "")
	}
	t.row("parked", fmt.Sprintf("%d (poison %d, invalid %d)", ki.Parked, ki.ParkedPoison, ki.ParkedInvalid))
	t.row("held", itoa(ki.Held))
	t.row("items", itoa(ki.Items))
	t.row("schemaVersion", itoa(ki.SchemaVersion))
	t.row("shadow", yesNo(ki.Shadow))
	if ki.Shadow || len(ki.ShadowEvents) > 0 {
		t.row("shadowEvents", fmt.Sprintf("created %d, updated %d, deleted %d (would have been delivered)",
			ki.ShadowEvents["created"], ki.ShadowEvents["updated"], ki.ShadowEvents["deleted"]))
	}
	if ki.LogRetention > 0 {
		t.row("logRetention", ki.LogRetention.String())
	} else {
		t.row("logRetention", "none (no replay)")
	}
	if bp := ki.Backfill; bp != nil {
		t.row("backfill.generation", itoa(bp.Generation))
		t.row("backfill.from", bp.From)
		t.row("backfill.to", bp.To)
		t.row("backfill.cursor", bp.Cursor)
		t.row("backfill.force", yesNo(bp.Force))
		t.row("backfill.progress", backfillProgressText(bp))
		t.row("backfill.startedAt", when(&bp.StartedAt, now))
		t.row("backfill.updatedAt", when(&bp.UpdatedAt, now))
		t.row("backfill.doneAt", when(bp.DoneAt, now))
		t.row("backfill.lastError", bp.LastError)
	} else {
		t.row("backfill", "none")
	}
	return t.flush()
}

func backfillProgressText(bp *watukuy.BackfillProgress) string {
	s := fmt.Sprintf("%s, %s, %s", plural(bp.Pages, "page"), plural(bp.Items, "item"), plural(bp.Events, "event"))
	if bp.Fraction != nil {
		s += fmt.Sprintf(", %.0f%%", *bp.Fraction*100)
	}
	switch {
	case bp.Done:
		return s + ", done"
	case bp.Failed:
		return s + ", failed"
	case bp.LastError != "":
		return s + ", running (last request failed; retried at the next cycle)"
	}
	return s + ", running"
}
