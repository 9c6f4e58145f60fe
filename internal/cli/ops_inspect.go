package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/budget"
	"github.com/watukuy/watukuy/internal/command"
	"github.com/watukuy/watukuy/internal/humantime"
	"github.com/watukuy/watukuy/watukuytype"
)

// maxPage is the most keys or parked rows one page of a listing holds (the engine's page).
const maxPage = 1000

// inspectCmd reports keys: a table of a page of keys (of every poller, or of one), or every
// field of one.
func inspectCmd() *cobra.Command {
	o := &op{}
	var limit int
	var after string
	return o.command(opSpec{
		use:   "inspect [--poller P [--partition X]] [--limit N] [--after CURSOR]",
		short: "Show keys: status, cursors, lease, schedule, lag, freshness, outbox, parked rows, last error",
		long: `inspect lists the known keys (or the keys of --poller) in a table, in poller then partition
order, a page of at most --limit keys (default and most 1000) at a time: when more follow, the
last line says how to get them (more: watukuy inspect --after CURSOR). With --partition it
shows every field of one key. Below the keys' table, the shared budgets their requests draw
from: each bucket's rate, burst, the tokens it holds now, a pause a 429 set, and its keys. It
needs only the Redis URL: pollers, partitions and budgets come from the registry that workers
write. --json prints an array of the page's keys (the more: line goes to stderr), or one
object with --partition.`,
		keys: anyKeys,
		flags: func(fs *pflag.FlagSet) {
			fs.IntVar(&limit, "limit", maxPage, "list at most N keys (1 to 1000)")
			fs.StringVar(&after, "after", "", "list the keys after this cursor, as the more: line of the page before gives it")
		},
		check: func(cmd *cobra.Command) error {
			if o.partitionGiven && (cmd.Flags().Changed("limit") || cmd.Flags().Changed("after")) {
				return command.Usagef("--limit and --after page the keys' table: not with --partition, which shows one key")
			}
			if limit < 1 || limit > maxPage {
				return command.Usagef("--limit %d: want 1 to %d", limit, maxPage)
			}
			if after == "" {
				return nil
			}
			k, err := watukuytype.ParseKey(after)
			switch {
			case err != nil:
				return command.Usagef("--after %q is not a cursor of inspect: pass the one its more: line gave", after)
			case o.poller != "" && k.Poller != o.poller:
				return command.Usagef("--after %q is a cursor of poller %q, not of --poller %s", after, k.Poller, o.poller)
			}
			return nil
		},
		run: func(ctx context.Context, eng *watukuy.Engine) error {
			if o.partitionGiven {
				ki, err := eng.Inspect(ctx, watukuytype.Key{Poller: o.poller, Partition: o.partition})
				if err != nil {
					return err
				}
				if o.asJSON {
					return writeJSON(o.out, ki)
				}
				return printKeyDetail(o.out, ki, time.Now())
			}
			kis, next, err := eng.InspectPage(ctx, o.poller, after, limit)
			if err != nil {
				return err
			}
			more := ""
			if next != "" {
				more = "more: " + moreCommand("inspect", next, [2]string{"poller", o.poller}, [2]string{"limit", limitFlag(limit, maxPage)})
			}
			if o.asJSON {
				if kis == nil {
					kis = []watukuytype.KeyInfo{}
				}
				if err := writeJSON(o.out, kis); err != nil || more == "" {
					return err
				}
				_, err := fmt.Fprintln(o.errOut, more)
				return err
			}
			if len(kis) == 0 {
				msg := "no keys: no poller is registered in this Redis (start a worker with the config, or check --redis and --prefix)"
				if after != "" {
					msg = fmt.Sprintf("no keys after %s", after)
				}
				_, err := fmt.Fprintln(o.out, msg)
				return err
			}
			if err := printKeyTable(o.out, kis, time.Now()); err != nil {
				return err
			}
			bs, err := eng.Budgets(ctx)
			if err != nil {
				return err
			}
			if len(bs) > 0 {
				fmt.Fprintln(o.out)
				if err := printBudgetTable(o.out, bs, o.poller, time.Now()); err != nil {
					return err
				}
			}
			if more != "" {
				_, err = fmt.Fprintf(o.out, "\n%s\n", more)
			}
			return err
		},
	})
}

// moreCommand is the command line of a listing's next page: cmd, each of flags (a name and
// a value) whose value is not "", and --after the cursor.
func moreCommand(cmd, after string, flags ...[2]string) string {
	line := "watukuy " + cmd
	for _, f := range flags {
		if f[1] != "" {
			line += " --" + f[0] + " " + shellQuote(f[1])
		}
	}
	return line + " --after " + shellQuote(after)
}

// limitFlag is --limit's value for a more: line, "" at its default.
func limitFlag(limit, def int) string {
	if limit == def {
		return ""
	}
	return strconv.Itoa(limit)
}

// shellQuote quotes s for a POSIX shell when it holds anything but plain characters.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.,:/@%+=") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// printBudgetTable shows the buckets that keys of poller (all when "") draw from.
func printBudgetTable(w io.Writer, bs []watukuytype.BudgetInfo, poller string, now time.Time) error {
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

func lastError(ki watukuytype.KeyInfo) (watukuytype.LastError, bool) {
	var le watukuytype.LastError
	return le, len(ki.LastError) > 0 && json.Unmarshal(ki.LastError, &le) == nil
}

// freshness renders the time since the key was last fresh ("" when it never was).
func freshness(ki watukuytype.KeyInfo) string {
	if ki.FreshAt == nil || ki.FreshnessMs < 0 {
		return ""
	}
	return humantime.Round(time.Duration(ki.FreshnessMs) * time.Millisecond).String()
}

func printKeyTable(w io.Writer, kis []watukuytype.KeyInfo, now time.Time) error {
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
func printKeyDetail(w io.Writer, ki watukuytype.KeyInfo, now time.Time) error {
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
	for _, l := range ki.Listings {
		t.row("listing."+string(l.Lane), fmt.Sprintf("under way: %s over %s since %s", plural(l.Pages, "page"), plural(l.Cycles, "cycle"), when(&l.Since, now)))
	}
	var lp watukuytype.PollSummary
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
	if b := ki.Blocked; b != nil {
		tries := "1 try"
		if b.Tries != 1 {
			tries = fmt.Sprintf("%d tries", b.Tries)
		}
		t.row("delivery", fmt.Sprintf("blocked since %s (%s): %s; %s, next %s", b.Since.UTC().Format(time.RFC3339), humantime.Round(now.Sub(b.Since)),
			b.Error, tries, when(&b.NextTry, now)))
	} else {
		t.row("delivery", "ok")
	}
	if ki.Retrying > 0 {
		t.row("retrying", fmt.Sprintf("%d ordering keys wait for a failed event's next try, the first %s", ki.Retrying, when(ki.NextRetryAt, now)))
	}
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

func backfillProgressText(bp *watukuytype.BackfillProgress) string {
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
