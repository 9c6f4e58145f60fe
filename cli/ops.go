package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/app"
	"github.com/watukuy/watukuy/internal/config"
)

// opsCmds returns the operator commands for Root. inspect, trigger, pause, resume, backfill,
// replay, reset-cursor, parked, partitions and migrate need only a Redis URL: pollers and
// partitions come from the registry the workers write. --config adds the poller definitions,
// which only retrying an invalid parked row needs. validate reads a config file and needs no
// Redis.
func opsCmds() []*cobra.Command {
	return []*cobra.Command{
		inspectCmd(),
		keyOpCmd("trigger", "Make keys due now (an open circuit gets its probe)", "triggered", "due now; a scheduler hands them to a worker at once",
			(*watukuy.Engine).Trigger),
		keyOpCmd("pause", "Stop keys' requests and deliveries until resume", "paused", "no request and no delivery until `watukuy resume`",
			(*watukuy.Engine).Pause),
		keyOpCmd("resume", "Lift a pause (or a partitions remove); the keys are due at once", "resumed", "due now, from their last cursor",
			(*watukuy.Engine).Resume),
		backfillCmd(), replayCmd(), resetCursorCmd(), parkedCmd(), partitionsCmd(), migrateCmd(), validateCmd(),
	}
}

// keyFlags says which of --poller and --partition an operator command takes.
type keyFlags int

const (
	noKeys     keyFlags = iota // migrate, validate
	anyKeys                    // inspect: both optional; --partition needs --poller
	pollerKeys                 // --poller required; --partition optional (default: every partition)
	pollerOnly                 // --poller required; no --partition
	oneKey                     // --poller and --partition required
)

// op is what every operator command shares: the common flags, --json and the key it acts on.
type op struct {
	common
	asJSON         bool
	poller         string
	partition      string
	partitionGiven bool // --partition "" names the key of an unpartitioned poller
	cmd            *cobra.Command
	out, errOut    io.Writer
}

// opSpec describes one operator command.
type opSpec struct {
	use, short, long string
	keys             keyFlags
	// flags binds the command's own flags; they are read from the command line only.
	flags func(fs *pflag.FlagSet)
	// check validates the command's flags before anything is opened: a usage error needs no
	// Redis.
	check func(cmd *cobra.Command) error
	// anyLayout skips the data layout check (migrate).
	anyLayout bool
	run       func(ctx context.Context, eng *watukuy.Engine) error
}

// command builds the cobra command of an operator command. It opens the environment with
// eviction allowed: reading and steering keys is safe whatever the maxmemory-policy, and
// refusing would lock the operator out when it matters most (Open still warns).
func (o *op) command(s opSpec) *cobra.Command {
	o.s.AllowEviction = true
	cmd := &cobra.Command{
		Use:   s.use,
		Short: s.short,
		Long:  s.long,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.cmd = cmd
			if err := o.checkKeys(cmd, s.keys); err != nil {
				return err
			}
			if s.check != nil {
				if err := s.check(cmd); err != nil {
					return err
				}
			}
			o.out, o.errOut = cmd.OutOrStdout(), cmd.ErrOrStderr()
			return o.withEnv(cmd, func(ctx context.Context, env *app.Env) error {
				if !s.anyLayout {
					if err := requireLayout(ctx, env.Engine); err != nil {
						return err
					}
				}
				return s.run(ctx, env.Engine)
			})
		},
	}
	fs := cmd.Flags()
	o.bind(fs)
	o.bindJSON(fs)
	switch s.keys {
	case anyKeys:
		fs.StringVar(&o.poller, "poller", "", "poller to inspect (default: every poller)")
		fs.StringVar(&o.partition, "partition", "", `one partition of --poller ("" for an unpartitioned poller; default: every partition)`)
	case pollerKeys:
		fs.StringVar(&o.poller, "poller", "", "poller to act on (required)")
		fs.StringVar(&o.partition, "partition", "", `one partition of --poller ("" for an unpartitioned poller; default: every partition)`)
	case pollerOnly:
		fs.StringVar(&o.poller, "poller", "", "poller (required)")
	case oneKey:
		fs.StringVar(&o.poller, "poller", "", "poller (required)")
		fs.StringVar(&o.partition, "partition", "", "partition (required)")
	}
	cmdLineOnly(fs, "poller", "partition")
	if s.flags != nil {
		own := pflag.NewFlagSet(s.use, pflag.ContinueOnError)
		s.flags(own)
		own.VisitAll(func(f *pflag.Flag) { cmdLineOnly(own, f.Name) })
		fs.AddFlagSet(own)
	}
	return cmd
}

func (o *op) bindJSON(fs *pflag.FlagSet) {
	fs.BoolVar(&o.asJSON, "json", false, "print machine-readable JSON instead of tables")
}

// checkKeys validates --poller and --partition for the command's keyFlags.
func (o *op) checkKeys(cmd *cobra.Command, kf keyFlags) error {
	o.partitionGiven = cmd.Flags().Changed("partition")
	switch kf {
	case anyKeys:
		if o.partitionGiven && o.poller == "" {
			return usagef("--partition needs --poller")
		}
	case pollerKeys, pollerOnly:
		if o.poller == "" {
			return usagef("--poller is required: name the poller (`watukuy inspect` lists them)")
		}
	case oneKey:
		if o.poller == "" || !o.partitionGiven {
			return usagef("--poller and --partition are required (`watukuy partitions ls --poller P` lists the partitions)")
		}
	}
	return nil
}

// keys resolves --poller and --partition into the keys to act on: the named key, or every
// known partition of the poller (of every poller when --poller is not given either). A named
// key that does not exist is reported by the operation itself (*watukuy.NotFoundError).
func (o *op) keys(ctx context.Context, eng *watukuy.Engine) ([]watukuy.Key, error) {
	if o.partitionGiven {
		return []watukuy.Key{{Poller: o.poller, Partition: o.partition}}, nil
	}
	keys, err := eng.Keys(ctx, o.poller)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 && o.poller != "" {
		return nil, fmt.Errorf("poller %q has no partitions (all were deleted): add one with `watukuy partitions add --poller %s --partition NAME`", o.poller, o.poller)
	}
	return keys, nil
}

// requireLayout refuses a database whose data layout is not this build's: a newer one may
// mean things this build would misread, an older one needs `watukuy migrate` first. An empty
// database is fine (there is simply nothing to show).
func requireLayout(ctx context.Context, eng *watukuy.Engine) error {
	l, err := eng.Layout(ctx)
	if err != nil {
		return fmt.Errorf("read the data layout: %w", err)
	}
	return l.Err()
}

// keyName renders a key for messages: "orders" for an unpartitioned poller, "orders|eu"
// otherwise.
func keyName(poller, partition string) string {
	if partition == "" {
		return poller
	}
	return poller + "|" + partition
}

// nullCursor reads a cursor flag: "null" is the empty cursor (the very beginning).
func nullCursor(v string) string {
	if v == "null" {
		return ""
	}
	return v
}

// keyStatus is one affected key in --json output.
type keyStatus struct {
	Poller    string `json:"poller"`
	Partition string `json:"partition"`
	Status    string `json:"status"`
}

// statuses inspects keys after an operation, for its report.
func statuses(ctx context.Context, eng *watukuy.Engine, keys []watukuy.Key) ([]keyStatus, error) {
	out := make([]keyStatus, 0, len(keys))
	for _, k := range keys {
		ki, err := eng.Inspect(ctx, k.Poller, k.Partition)
		if err != nil {
			return out, err
		}
		out = append(out, keyStatus{Poller: k.Poller, Partition: k.Partition, Status: string(ki.Status)})
	}
	return out, nil
}

// printStatuses reports keys and their status: a table, or the --json array.
func (o *op) printStatuses(sts []keyStatus, summary string) error {
	if o.asJSON {
		return writeJSON(o.out, sts)
	}
	t := newTable(o.out, "POLLER", "PARTITION", "STATUS")
	for _, s := range sts {
		t.row(s.Poller, s.Partition, s.Status)
	}
	if err := t.flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(o.out, summary)
	return err
}

// keyOpCmd is trigger, pause or resume: the operation on every named key, then their status.
func keyOpCmd(use, short, done, effect string, fn func(*watukuy.Engine, context.Context, string, string) error) *cobra.Command {
	o := &op{}
	return o.command(opSpec{
		use:   use + " --poller P [--partition X]",
		short: short,
		long:  short + ". Without --partition it acts on every partition of the poller.",
		keys:  pollerKeys,
		run: func(ctx context.Context, eng *watukuy.Engine) error {
			keys, err := o.keys(ctx, eng)
			if err != nil {
				return err
			}
			for i, k := range keys {
				if err := fn(eng, ctx, k.Poller, k.Partition); err != nil {
					if i > 0 {
						err = fmt.Errorf("%w (stopped there: %d key(s) before it were %s; running the command again is safe)", err, i, done)
					}
					return err
				}
			}
			sts, err := statuses(ctx, eng, keys)
			if err != nil {
				return err
			}
			return o.printStatuses(sts, fmt.Sprintf("%s %d key(s) of %s: %s", done, len(keys), o.poller, effect))
		},
	})
}

// inspectCmd reports keys: a table of every key (or of one poller's), or every field of one.
func inspectCmd() *cobra.Command {
	o := &op{}
	return o.command(opSpec{
		use:   "inspect [--poller P [--partition X]]",
		short: "Show keys: status, cursors, lease, schedule, lag, freshness, outbox, parked rows, last error",
		long: `inspect lists every known key (or the keys of --poller) in a table; with --partition it
shows every field of one key. It needs only the Redis URL: pollers and partitions come from the
registry that workers write. --json prints an array of keys, or one object with --partition.`,
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
			return printKeyTable(o.out, kis, time.Now())
		},
	})
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
	return roundDur(time.Duration(ki.FreshnessMs) * time.Millisecond).String()
}

func printKeyTable(w io.Writer, kis []watukuy.KeyInfo, now time.Time) error {
	t := newTable(w, "POLLER", "PARTITION", "STATUS", "CURSOR", "ITEMS", "OUTBOX", "PARKED", "LAG", "FRESH", "NEXT-DUE", "LAST-ERROR")
	for _, ki := range kis {
		next := ""
		if ki.NextDueAt != nil {
			next = relative(*ki.NextDueAt, now)
		}
		le, _ := lastError(ki)
		t.row(ki.Poller, ki.Partition, string(ki.Status), clip(ki.Cursor, 32), itoa(ki.Items), itoa(ki.OutboxPending), itoa(ki.Parked),
			roundDur(time.Duration(ki.LagMs)*time.Millisecond).String(), freshness(ki), next, string(le.Code))
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
		t.row("lastPoll", fmt.Sprintf("%s at %s in %dms: %d pages, %d items, %d events, %d delivered, %d parked, %d invalid%s",
			lp.Outcome, lp.At, lp.DurationMs, lp.Pages, lp.Items, lp.Events, lp.Delivered, lp.Parked, lp.Invalid, flags))
	} else {
		t.row("lastPoll", string(ki.LastPoll))
	}
	if le, ok := lastError(ki); ok {
		t.row("lastError", fmt.Sprintf("%s (%s) at %s: %s", le.Code, le.Phase, le.At, le.Message))
	} else {
		t.row("lastError", string(ki.LastError))
	}
	t.row("lag", roundDur(time.Duration(ki.LagMs)*time.Millisecond).String())
	t.row("freshAt", when(ki.FreshAt, now))
	t.row("freshness", freshness(ki))
	t.row("outboxPending", itoa(ki.OutboxPending))
	if ki.OutboxOldestAt != nil {
		t.row("outboxOldest", fmt.Sprintf("%s (%s old)", ki.OutboxOldestAt.UTC().Format(time.RFC3339), roundDur(time.Duration(ki.OutboxOldestAgeMs)*time.Millisecond)))
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
	s := fmt.Sprintf("%d pages, %d items, %d events", bp.Pages, bp.Items, bp.Events)
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

// keyBackfill is one key's backfill in the output; Event tags the lines of --wait --json
// (started, progress, done, replaced).
type keyBackfill struct {
	Event     string                    `json:"event,omitempty"`
	Poller    string                    `json:"poller"`
	Partition string                    `json:"partition"`
	Backfill  *watukuy.BackfillProgress `json:"backfill"`
	Note      string                    `json:"note,omitempty"`
}

func backfillCmd() *cobra.Command {
	o := &op{}
	var from, to string
	var force, wait bool
	var every time.Duration
	return o.command(opSpec{
		use:   "backfill --poller P [--partition X] --from <cursor|null> [--to <cursor|null>] [--force] [--wait]",
		short: "Run the live lane's logic again from an older cursor, in a lane of its own",
		long: `backfill starts (or restarts) a backfill lane: the poller's live logic from --from ("null":
the very beginning) up to --to (default: the live cursor at this moment; "null": until the API
has no more). Workers run it with the pages the live lane leaves, after the live lane has caught
up; events carry lane "backfill". Known items at the same version emit nothing, unless --force
re-emits them as updated. snapshotDiff pollers have no cursor to go back to and refuse.

--wait follows the progress until every backfill is done (a bar on stderr, or with --json one
JSON line per change). Ctrl-C stops the waiting, not the backfill.`,
		keys: pollerKeys,
		flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&from, "from", "", `cursor to start at ("null": the very beginning); required`)
			fs.StringVar(&to, "to", "", `cursor to stop at ("null": until the API has no more; default: the live cursor now)`)
			fs.BoolVar(&force, "force", false, "re-emit items already known at the same version, as updated")
			fs.BoolVar(&wait, "wait", false, "follow the progress until every backfill is done")
			fs.DurationVar(&every, "poll-interval", 500*time.Millisecond, "with --wait, how often the progress is read")
		},
		check: func(cmd *cobra.Command) error {
			if !cmd.Flags().Changed("from") {
				return usagef("--from is required: the cursor to start at, or null for the very beginning")
			}
			if every <= 0 {
				return usagef("--poll-interval %v must be positive", every)
			}
			return nil
		},
		run: func(ctx context.Context, eng *watukuy.Engine) error {
			keys, err := o.keys(ctx, eng)
			if err != nil {
				return err
			}
			req := watukuy.BackfillRequest{From: nullCursor(from), Force: force}
			if o.flagSet("to") {
				t := nullCursor(to)
				req.To = &t
			}
			started := make([]keyBackfill, 0, len(keys))
			for _, k := range keys {
				bp, err := eng.Backfill(ctx, k.Poller, k.Partition, req)
				if err != nil {
					if len(started) > 0 {
						_ = o.printStarted(started, wait)
						err = fmt.Errorf("%w (stopped there: the backfills above were started)", err)
					}
					return err
				}
				kb := keyBackfill{Event: "started", Poller: k.Poller, Partition: k.Partition, Backfill: &bp}
				if ki, err := eng.Inspect(ctx, k.Poller, k.Partition); err == nil && ki.Paused {
					kb.Note = "the key is " + string(ki.Status) + ": its backfill runs after `watukuy resume`"
				}
				started = append(started, kb)
			}
			if err := o.printStarted(started, wait); err != nil {
				return err
			}
			if !wait {
				return nil
			}
			return o.waitBackfills(ctx, eng, started, every)
		},
	})
}

// flagSet reports whether a flag of the running command was given on the command line.
func (o *op) flagSet(name string) bool { return o.cmd.Flags().Changed(name) }

// printStarted reports the backfills just started.
func (o *op) printStarted(started []keyBackfill, wait bool) error {
	if o.asJSON {
		if wait { // JSON lines: the started ones first, then every change
			for _, kb := range started {
				if err := writeJSON(o.out, kb); err != nil {
					return err
				}
			}
			return nil
		}
		plain := make([]keyBackfill, len(started))
		for i, kb := range started {
			kb.Event = ""
			plain[i] = kb
		}
		return writeJSON(o.out, plain)
	}
	t := newTable(o.out, "POLLER", "PARTITION", "FROM", "TO", "GENERATION", "FORCE", "NOTE")
	for _, kb := range started {
		bp := kb.Backfill
		to := bp.To
		if to == "" {
			to = "(until the API has no more)"
		}
		from := bp.From
		if from == "" {
			from = "(the beginning)"
		}
		t.row(kb.Poller, kb.Partition, from, to, itoa(bp.Generation), yesNo(bp.Force), kb.Note)
	}
	if err := t.flush(); err != nil {
		return err
	}
	msg := fmt.Sprintf("started %d backfill(s) of %s: workers run them after the live lane has caught up; follow with `watukuy inspect --poller %s`", len(started), o.poller, o.poller)
	if wait {
		msg = fmt.Sprintf("started %d backfill(s) of %s; waiting for them (Ctrl-C stops the waiting, not the backfills)", len(started), o.poller)
	}
	_, err := fmt.Fprintln(o.out, msg)
	return err
}

// waitBackfills follows the started backfills until each is done (or replaced by a newer
// one): a progress bar on stderr, or with --json one line per change and a last "finished"
// line. Ctrl-C ends the waiting with an error; the backfills go on in the workers.
func (o *op) waitBackfills(ctx context.Context, eng *watukuy.Engine, started []keyBackfill, every time.Duration) error {
	cur := slices.Clone(started)
	finished := make([]bool, len(cur))
	var bar *backfillBar
	if !o.asJSON {
		bar = newBackfillBar(o.errOut)
	}
	stopped := func() error {
		if bar != nil {
			bar.stop()
		}
		return fmt.Errorf("stopped waiting; the backfills go on in the workers: follow them with `watukuy inspect --poller %s`", o.poller)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		for i, kb := range cur {
			if finished[i] {
				continue
			}
			ki, err := eng.Inspect(ctx, kb.Poller, kb.Partition)
			if err != nil {
				if ctx.Err() != nil {
					return stopped()
				}
				return fmt.Errorf("follow the backfill of %s: %w", keyName(kb.Poller, kb.Partition), err)
			}
			bp := ki.Backfill
			if bp == nil {
				return fmt.Errorf("the backfill of %s is gone (was the partition deleted?)", keyName(kb.Poller, kb.Partition))
			}
			next := keyBackfill{Event: "progress", Poller: kb.Poller, Partition: kb.Partition, Backfill: bp}
			switch {
			case bp.Generation != started[i].Backfill.Generation:
				finished[i] = true
				next.Event, next.Note = "replaced", fmt.Sprintf("replaced by backfill generation %d, started by someone else", bp.Generation)
			case bp.Done:
				finished[i] = true
				next.Event = "done"
			case bp.Failed:
				finished[i] = true
				next.Event, next.Note = "failed", "failed: "+bp.LastError+"; start a new backfill with another --from"
			}
			changed := next.Event != "progress" || progressChanged(kb.Backfill, bp)
			cur[i] = next
			if o.asJSON && changed {
				if err := writeJSON(o.out, next); err != nil {
					return err
				}
			}
		}
		allDone := !slices.Contains(finished, false)
		if bar != nil {
			bar.update(cur, finished)
			if allDone {
				bar.finish()
			}
		}
		if allDone {
			break
		}
		select {
		case <-ctx.Done():
			return stopped()
		case <-tick.C:
		}
	}
	if o.asJSON {
		final := make([]keyBackfill, len(cur))
		for i, kb := range cur {
			kb.Event = ""
			final[i] = kb
		}
		if err := writeJSON(o.out, struct {
			Event     string        `json:"event"`
			Backfills []keyBackfill `json:"backfills"`
		}{"finished", final}); err != nil {
			return err
		}
		return failedBackfills(cur)
	}
	fmt.Fprintln(o.out)
	t := newTable(o.out, "POLLER", "PARTITION", "PAGES", "ITEMS", "EVENTS", "CURSOR", "RESULT")
	for _, kb := range cur {
		bp := kb.Backfill
		result := "done"
		if bp.DoneAt != nil {
			result = "done at " + bp.DoneAt.UTC().Format(time.RFC3339)
		}
		if kb.Note != "" {
			result = kb.Note
		}
		t.row(kb.Poller, kb.Partition, itoa(bp.Pages), itoa(bp.Items), itoa(bp.Events), clip(bp.Cursor, 32), result)
	}
	if err := t.flush(); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(o.out, "backfill of %s finished\n", o.poller); err != nil {
		return err
	}
	return failedBackfills(cur)
}

// failedBackfills makes a wait that ended in a failed backfill an operation failure (exit 1).
func failedBackfills(cur []keyBackfill) error {
	var failed []string
	for _, kb := range cur {
		if kb.Backfill.Failed {
			failed = append(failed, keyName(kb.Poller, kb.Partition))
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("the backfill of %s failed: see backfill.lastError in `watukuy inspect`; start a new one with another --from", strings.Join(failed, ", "))
}

// progressChanged reports whether a backfill moved since the last look.
func progressChanged(a, b *watukuy.BackfillProgress) bool {
	fa, fb := -1.0, -1.0
	if a.Fraction != nil {
		fa = *a.Fraction
	}
	if b.Fraction != nil {
		fb = *b.Fraction
	}
	return a.Pages != b.Pages || a.Items != b.Items || a.Events != b.Events || a.Cursor != b.Cursor || a.Done != b.Done || fa != fb
}

// backfillBar shows the backfills' progress on one line of w: a percentage bar when every
// key's position is known (the poller places cursors), a spinner otherwise, followed by pages,
// items, events and (for one key) the cursor.
type backfillBar struct {
	w     io.Writer
	bar   *progressbar.ProgressBar
	known bool
}

// barMax is the bar's resolution: per mille.
const barMax = 1000

func newBackfillBar(w io.Writer) *backfillBar {
	// No spinner goroutine (change interval 0): the bar is drawn only at each poll, so nothing
	// writes to w behind the command's back.
	bar := progressbar.NewOptions(-1, progressbar.OptionSetWriter(w), progressbar.OptionSetWidth(30),
		progressbar.OptionSpinnerType(14), progressbar.OptionSetSpinnerChangeInterval(0),
		progressbar.OptionSetElapsedTime(true), progressbar.OptionSetPredictTime(false), progressbar.OptionShowDescriptionAtLineEnd())
	return &backfillBar{w: w, bar: bar}
}

func (b *backfillBar) update(cur []keyBackfill, finished []bool) {
	var pages, items, events, done int
	frac, known := 0.0, true
	for i, kb := range cur {
		bp := kb.Backfill
		pages, items, events = pages+bp.Pages, items+bp.Items, events+bp.Events
		switch {
		case finished[i]:
			frac++
			done++
		case bp.Fraction != nil:
			frac += *bp.Fraction
		default:
			known = false
		}
	}
	desc := fmt.Sprintf("%d/%d done  pages %d  items %d  events %d", done, len(cur), pages, items, events)
	if len(cur) == 1 {
		kb := cur[0]
		desc = fmt.Sprintf("%s  pages %d  items %d  events %d  cursor %s", keyName(kb.Poller, kb.Partition), pages, items, events,
			cell(clip(kb.Backfill.Cursor, 40)))
	}
	b.bar.Describe(desc)
	if known != b.known {
		b.known = known
		if known {
			b.bar.ChangeMax(barMax)
		} else {
			b.bar.ChangeMax(-1)
		}
	}
	if known {
		_ = b.bar.Set(int(frac / float64(len(cur)) * barMax))
	} else {
		_ = b.bar.Add(1) // turn the spinner
	}
}

func (b *backfillBar) finish() {
	_ = b.bar.Finish()
	fmt.Fprintln(b.w)
}

func (b *backfillBar) stop() {
	_ = b.bar.Exit()
	fmt.Fprintln(b.w)
}

func replayCmd() *cobra.Command {
	o := &op{}
	var fromS, toS string
	var from, to time.Time
	return o.command(opSpec{
		use:   "replay --poller P [--partition X] --from <time> [--to <time>]",
		short: "Deliver logged events again: copy them back into the outbox with their original ids",
		long: `replay copies the events committed between --from and --to (default: now) from the key's
replay log back into its outbox, with their original ids and lane "replay"; the next cycle
delivers them. Times are RFC 3339 (2026-01-02T15:04:05Z) or unix milliseconds. The poller needs
log.retention in its config: without it there is no log and replay fails.`,
		keys: pollerKeys,
		flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&fromS, "from", "", "replay events committed from this time on (RFC 3339 or unix ms); required")
			fs.StringVar(&toS, "to", "", "replay events committed up to this time (default: now)")
		},
		check: func(cmd *cobra.Command) error {
			if fromS == "" {
				return usagef("--from is required: an RFC 3339 time (2026-01-02T15:04:05Z) or unix milliseconds")
			}
			var err error
			if from, err = parseTime("from", fromS); err != nil {
				return err
			}
			if toS != "" {
				if to, err = parseTime("to", toS); err != nil {
					return err
				}
			}
			return nil
		},
		run: func(ctx context.Context, eng *watukuy.Engine) error {
			keys, err := o.keys(ctx, eng)
			if err != nil {
				return err
			}
			type keyReplay struct {
				Poller    string `json:"poller"`
				Partition string `json:"partition"`
				Replayed  int    `json:"replayed"`
			}
			done := make([]keyReplay, 0, len(keys))
			total := 0
			for _, k := range keys {
				n, err := eng.Replay(ctx, k.Poller, k.Partition, from, to)
				total += n
				if err != nil {
					if len(done) > 0 || n > 0 {
						err = fmt.Errorf("%w (stopped there after replaying %d events)", err, total)
					}
					return err
				}
				done = append(done, keyReplay{k.Poller, k.Partition, n})
			}
			if o.asJSON {
				return writeJSON(o.out, struct {
					Replayed int         `json:"replayed"`
					Keys     []keyReplay `json:"keys"`
				}{total, done})
			}
			if len(done) == 1 {
				_, err := fmt.Fprintf(o.out, "replayed %d events of %s: back in the outbox with their original ids (lane replay); the next cycle delivers them\n",
					total, keyName(done[0].Poller, done[0].Partition))
				return err
			}
			t := newTable(o.out, "POLLER", "PARTITION", "REPLAYED")
			for _, d := range done {
				t.row(d.Poller, d.Partition, itoa(d.Replayed))
			}
			if err := t.flush(); err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.out, "replayed %d events of %s in %d keys: the next cycles deliver them\n", total, o.poller, len(done))
			return err
		},
	})
}

// parseTime reads a time flag: RFC 3339 or unix milliseconds.
func parseTime(flag, v string) (time.Time, error) {
	if t, err := watukuy.ParseTime(v, []string{"rfc3339", "epoch_ms"}); err == nil {
		return t, nil
	}
	return time.Time{}, usagef("--%s %q: want an RFC 3339 time (2026-01-02T15:04:05Z) or unix milliseconds", flag, v)
}

func resetCursorCmd() *cobra.Command {
	o := &op{}
	var to string
	var clearSnapshot bool
	return o.command(opSpec{
		use:   "reset-cursor --poller P [--partition X] --to <cursor|null> [--clear-snapshot]",
		short: "Rewind (or move) the live lane's cursor",
		long: `reset-cursor sets the live lane's cursor to --to ("null": the very beginning) and makes the
key due now. Items passed again emit only real differences; with --clear-snapshot the stored
snapshot is forgotten and every item is emitted again as created, with new ids (a consumer that
dedupes by id takes them); an item the API no longer lists is still deleted.`,
		keys: pollerKeys,
		flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&to, "to", "", `the new cursor ("null": the very beginning); required`)
			fs.BoolVar(&clearSnapshot, "clear-snapshot", false, "forget every known item: all are emitted again as created")
		},
		check: func(cmd *cobra.Command) error {
			if !cmd.Flags().Changed("to") {
				return usagef("--to is required: the new cursor, or null for the very beginning")
			}
			return nil
		},
		run: func(ctx context.Context, eng *watukuy.Engine) error {
			keys, err := o.keys(ctx, eng)
			if err != nil {
				return err
			}
			cursor := nullCursor(to)
			type keyReset struct {
				Poller        string `json:"poller"`
				Partition     string `json:"partition"`
				Cursor        string `json:"cursor"`
				ClearSnapshot bool   `json:"clearSnapshot"`
				Status        string `json:"status"`
			}
			rows := make([]keyReset, 0, len(keys))
			for i, k := range keys {
				if err := eng.ResetCursor(ctx, k.Poller, k.Partition, cursor, clearSnapshot); err != nil {
					if i > 0 {
						err = fmt.Errorf("%w (stopped there: %d key(s) before it were reset)", err, i)
					}
					return err
				}
				ki, err := eng.Inspect(ctx, k.Poller, k.Partition)
				if err != nil {
					return err
				}
				rows = append(rows, keyReset{k.Poller, k.Partition, ki.Cursor, clearSnapshot, string(ki.Status)})
			}
			if o.asJSON {
				return writeJSON(o.out, rows)
			}
			t := newTable(o.out, "POLLER", "PARTITION", "CURSOR", "SNAPSHOT", "STATUS")
			for _, r := range rows {
				t.row(r.Poller, r.Partition, clip(r.Cursor, 40), map[bool]string{true: "cleared", false: "kept"}[r.ClearSnapshot], r.Status)
			}
			if err := t.flush(); err != nil {
				return err
			}
			msg := "the live lane goes on from the new cursor at the next cycle (due now); known items emit only real differences"
			if clearSnapshot {
				msg = "the live lane goes on from the new cursor at the next cycle (due now); every item is emitted again as created, with a new id"
			}
			_, err = fmt.Fprintln(o.out, msg)
			return err
		},
	})
}

// needSubcommand is the RunE of a command group: without a subcommand it is a usage error
// (and with an unknown one cobra's NoArgs says so).
func needSubcommand(cmd *cobra.Command, _ []string) error {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	return usagef("%s needs a subcommand: %s", cmd.CommandPath(), strings.Join(names, ", "))
}

// parkedRow is a parked row with its key, for listings across partitions.
type parkedRow struct {
	Poller    string `json:"poller"`
	Partition string `json:"partition"`
	watukuy.ParkedInfo
}

func parkedCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "parked",
		Short: "List, retry and discard parked rows (poison events and invalid items)",
		Long: `A poison event is one its handler kept failing: it is parked and holds the later events of
its ordering key (G4) until it is retried or discarded. An invalid item failed identity,
fingerprint or validation and was parked with its raw JSON.`,
		Args: cobra.NoArgs,
		RunE: needSubcommand,
	}
	cmd.AddCommand(parkedLsCmd(),
		parkedReleaseCmd("retry", "Return parked rows to work: poison events to delivery (held events follow in order), invalid items to the checks",
			"retried", "back to delivery in their original order; the next cycle delivers them", watukuy.Parked.Retry),
		parkedReleaseCmd("discard", "Drop parked rows; the events a poison event held go back to delivery",
			"discarded", "gone; the events they held go back to delivery", watukuy.Parked.Discard))
	return cmd
}

func parkedLsCmd() *cobra.Command {
	o := &op{}
	var kind string
	var limit int
	return o.command(opSpec{
		use:   "ls --poller P [--partition X] [--kind poison|invalid] [--limit N]",
		short: "List parked rows: a table, then each row's error history, event or item, and held ordering key",
		keys:  pollerKeys,
		flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&kind, "kind", "", "only rows of this kind: poison or invalid")
			fs.IntVar(&limit, "limit", 0, "show at most N rows, oldest first (0: all)")
		},
		check: func(cmd *cobra.Command) error {
			if kind != "" && kind != "poison" && kind != "invalid" {
				return usagef("--kind %q: want poison or invalid", kind)
			}
			if limit < 0 {
				return usagef("--limit %d must not be negative", limit)
			}
			return nil
		},
		run: func(ctx context.Context, eng *watukuy.Engine) error {
			keys, err := o.keys(ctx, eng)
			if err != nil {
				return err
			}
			rows := []parkedRow{}
			for _, k := range keys {
				ps, err := eng.Parked().List(ctx, k.Poller, k.Partition, kind)
				if err != nil {
					return err
				}
				for _, p := range ps {
					rows = append(rows, parkedRow{k.Poller, k.Partition, p})
				}
			}
			sort.SliceStable(rows, func(i, j int) bool { return rows[i].ParkedAt.Before(rows[j].ParkedAt) })
			all := len(rows)
			if limit > 0 && len(rows) > limit {
				rows = rows[:limit]
			}
			if o.asJSON {
				return writeJSON(o.out, rows)
			}
			return o.printParked(rows, all)
		},
	})
}

// printParked prints the parked rows as a table, then one detail block per row.
func (o *op) printParked(rows []parkedRow, all int) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintf(o.out, "no parked rows in %s\n", o.poller)
		return err
	}
	t := newTable(o.out, "PARTITION", "ID", "KIND", "ATTEMPTS", "ORDERING-KEY", "IDENTITY", "PARKED-AT", "ERROR")
	for _, r := range rows {
		t.row(r.Partition, r.ID, r.Kind, itoa(r.Attempts), r.OrderingKey, r.Identity, r.ParkedAt.UTC().Format(time.RFC3339), clip(r.Error, 60))
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, r := range rows {
		fmt.Fprintf(o.out, "\n%s (%s, %s)\n", r.ID, r.Kind, keyName(r.Poller, r.Partition))
		errs := r.Errors
		if len(errs) == 0 && r.Error != "" {
			errs = []string{r.Error}
		}
		fmt.Fprintln(o.out, "  errors:")
		for i, e := range errs {
			fmt.Fprintf(o.out, "    %d. %s\n", i+1, strings.ReplaceAll(e, "\n", "\n       "))
		}
		if r.OrderingKey != "" {
			fmt.Fprintf(o.out, "  holds ordering key %q: its later events wait until this row is retried or discarded\n", r.OrderingKey)
		}
		if len(r.Event) > 0 {
			fmt.Fprintf(o.out, "  event: %s\n", indentJSON(r.Event))
		}
		if len(r.Item) > 0 {
			fmt.Fprintf(o.out, "  item: %s\n", indentJSON(r.Item))
		}
	}
	if all > len(rows) {
		fmt.Fprintf(o.out, "\nshowing %d of %d parked rows (--limit)\n", len(rows), all)
	}
	_, err := fmt.Fprintf(o.out, "\nretry: watukuy parked retry --poller %s --ids ID[,ID...]   discard: watukuy parked discard --poller %s --ids ID[,ID...]\n", o.poller, o.poller)
	return err
}

// indentJSON renders raw JSON indented under a detail block's label.
func indentJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "  ", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

// parkedReleaseCmd is parked retry or parked discard. Without --partition the ids are looked
// up in every partition of the poller, as `parked ls` lists them.
func parkedReleaseCmd(use, short, done, effect string,
	release func(watukuy.Parked, context.Context, string, string, ...string) (int, error)) *cobra.Command {
	o := &op{}
	var ids []string
	return o.command(opSpec{
		use:   use + " --poller P [--partition X] --ids ID[,ID...]",
		short: short,
		keys:  pollerKeys,
		flags: func(fs *pflag.FlagSet) {
			fs.StringSliceVar(&ids, "ids", nil, "ids of the parked rows (`watukuy parked ls` lists them); required")
		},
		check: func(cmd *cobra.Command) error {
			ids = slices.DeleteFunc(ids, func(id string) bool { return strings.TrimSpace(id) == "" })
			if len(ids) == 0 {
				return usagef("--ids is required: the ids of the parked rows (`watukuy parked ls --poller P` lists them)")
			}
			return nil
		},
		run: func(ctx context.Context, eng *watukuy.Engine) error {
			byKey, order, err := o.locateParked(ctx, eng, ids)
			if err != nil {
				return err
			}
			type keyRelease struct {
				Poller    string   `json:"poller"`
				Partition string   `json:"partition"`
				IDs       []string `json:"ids"`
				Released  int      `json:"released"`
			}
			var res []keyRelease
			total := 0
			for _, k := range order {
				n, err := release(eng.Parked(), ctx, k.Poller, k.Partition, byKey[k]...)
				total += n
				if err != nil {
					if total > 0 {
						err = fmt.Errorf("%w (%d row(s) were %s before it)", err, total, done)
					}
					return err
				}
				res = append(res, keyRelease{k.Poller, k.Partition, byKey[k], n})
			}
			if o.asJSON {
				return writeJSON(o.out, struct {
					Action   string       `json:"action"`
					Released int          `json:"released"`
					Keys     []keyRelease `json:"keys"`
				}{use, total, res})
			}
			for _, r := range res {
				fmt.Fprintf(o.out, "%s %d parked row(s) of %s: %s\n", done, r.Released, keyName(r.Poller, r.Partition), effect)
			}
			return nil
		},
	})
}

// locateParked finds the key of every id: the named key, or the partition of the poller
// whose parked rows hold it.
func (o *op) locateParked(ctx context.Context, eng *watukuy.Engine, ids []string) (map[watukuy.Key][]string, []watukuy.Key, error) {
	keys, err := o.keys(ctx, eng)
	if err != nil {
		return nil, nil, err
	}
	if len(keys) == 1 {
		return map[watukuy.Key][]string{keys[0]: ids}, keys, nil
	}
	where := map[string]watukuy.Key{}
	for _, k := range keys {
		rows, err := eng.Parked().List(ctx, k.Poller, k.Partition, "")
		if err != nil {
			return nil, nil, err
		}
		for _, r := range rows {
			where[r.ID] = k
		}
	}
	byKey := map[watukuy.Key][]string{}
	var order []watukuy.Key
	for _, id := range ids {
		k, ok := where[id]
		if !ok {
			return nil, nil, fmt.Errorf("no parked row %q in any partition of %s: `watukuy parked ls --poller %s` lists them", id, o.poller, o.poller)
		}
		if byKey[k] == nil {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], id)
	}
	return byKey, order, nil
}

func partitionsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "partitions",
		Short: "List, add, remove and delete a poller's partitions at run time",
		Args:  cobra.NoArgs,
		RunE:  needSubcommand,
	}
	cmd.AddCommand(partitionsLsCmd(), partitionsAddCmd(), partitionsRemoveCmd(), partitionsDeleteCmd())
	return cmd
}

func partitionsLsCmd() *cobra.Command {
	o := &op{}
	return o.command(opSpec{
		use:   "ls --poller P",
		short: "List a poller's partitions with where they come from (config or cli) and their state",
		keys:  pollerOnly,
		run: func(ctx context.Context, eng *watukuy.Engine) error {
			kis, err := eng.Partitions().List(ctx, o.poller)
			if err != nil {
				return err
			}
			if o.asJSON {
				return writeJSON(o.out, kis)
			}
			t := newTable(o.out, "PARTITION", "SOURCE", "STATUS", "CURSOR", "ITEMS", "OUTBOX", "PARKED")
			for _, ki := range kis {
				t.row(ki.Partition, ki.Source, string(ki.Status), clip(ki.Cursor, 40), itoa(ki.Items), itoa(ki.OutboxPending), itoa(ki.Parked))
			}
			return t.flush()
		},
	})
}

// partitionOp is partitions add, remove or delete: one key, then its status.
func partitionOp(o *op, s opSpec, fn func(ctx context.Context, eng *watukuy.Engine) error, msg func(status string) string) *cobra.Command {
	s.keys = oneKey
	s.run = func(ctx context.Context, eng *watukuy.Engine) error {
		if err := fn(ctx, eng); err != nil {
			return err
		}
		status := "deleted"
		if ki, err := eng.Inspect(ctx, o.poller, o.partition); err == nil {
			status = string(ki.Status)
		} else if !isNotFound(err) { // a deleted partition has left the registry
			return err
		}
		if o.asJSON {
			return writeJSON(o.out, keyStatus{o.poller, o.partition, status})
		}
		_, err := fmt.Fprintln(o.out, msg(status))
		return err
	}
	return o.command(s)
}

func partitionsAddCmd() *cobra.Command {
	o := &op{}
	return partitionOp(o, opSpec{
		use:   "add --poller P --partition X",
		short: "Add a partition; workers running the poller pick it up at once",
	}, func(ctx context.Context, eng *watukuy.Engine) error {
		return eng.Partitions().Add(ctx, o.poller, o.partition)
	}, func(status string) string {
		return fmt.Sprintf("added partition %q to %s (status %s, due now): workers running %s pick it up", o.partition, o.poller, status, o.poller)
	})
}

func partitionsRemoveCmd() *cobra.Command {
	o := &op{}
	return partitionOp(o, opSpec{
		use:   "remove --poller P --partition X",
		short: "Take a partition out of service: it is paused and keeps its state",
	}, func(ctx context.Context, eng *watukuy.Engine) error {
		return eng.Partitions().Remove(ctx, o.poller, o.partition)
	}, func(status string) string {
		return fmt.Sprintf("removed partition %q of %s (status %s): paused, state kept; `watukuy resume --poller %s --partition %s` brings it back from its last cursor",
			o.partition, o.poller, status, o.poller, o.partition)
	})
}

func partitionsDeleteCmd() *cobra.Command {
	o := &op{}
	var yes bool
	return partitionOp(o, opSpec{
		use:   "delete --poller P --partition X --yes",
		short: "Delete a partition with its state, snapshot, outbox, parked rows and replay log",
		long: `delete removes a partition for good: its cursor and state, the snapshot of known items, the
undelivered outbox, the parked rows and the replay log. It asks for --yes. To stop a partition
and keep its state, use partitions remove.`,
		flags: func(fs *pflag.FlagSet) {
			fs.BoolVar(&yes, "yes", false, "really delete")
		},
	}, func(ctx context.Context, eng *watukuy.Engine) error {
		if !yes {
			// Say what would go, so the operator decides knowing it.
			ki, err := eng.Inspect(ctx, o.poller, o.partition)
			if err != nil {
				return err
			}
			return usagef("partitions delete removes partition %q of %s for good: its state (live cursor %q), %d known items, %d undelivered outbox events, %d parked rows and its replay log; pass --yes to delete it, or use `watukuy partitions remove` to pause it and keep its state",
				o.partition, o.poller, ki.Cursor, ki.Items, ki.OutboxPending, ki.Parked)
		}
		return eng.Partitions().Delete(ctx, o.poller, o.partition)
	}, func(string) string {
		return fmt.Sprintf("deleted partition %q of %s with its state, snapshot, outbox, parked rows and replay log", o.partition, o.poller)
	})
}

func migrateCmd() *cobra.Command {
	o := &op{}
	return o.command(opSpec{
		use:   "migrate",
		short: "Upgrade the Redis data layout in place (idempotent)",
		long: `migrate upgrades the data layout of the Redis database to the one this build writes, in
place, and records it. Every step is idempotent: running it again, or after an interruption, is
safe. Workers of this build refuse an older layout until it has run.`,
		keys:      noKeys,
		anyLayout: true,
		run: func(ctx context.Context, eng *watukuy.Engine) error {
			m, err := eng.Migrate(ctx)
			if err != nil {
				return err
			}
			if o.asJSON {
				return writeJSON(o.out, m)
			}
			if m.From == m.To && len(m.Steps) == 0 {
				_, err := fmt.Fprintf(o.out, "already at layout %d: nothing to do\n", m.To)
				return err
			}
			from := strconv.Itoa(m.From)
			if m.From == 0 {
				from = "none (empty database)"
			}
			fmt.Fprintf(o.out, "migrated the data layout: %s → %d\n", from, m.To)
			for _, s := range m.Steps {
				fmt.Fprintf(o.out, "  %s\n", s)
			}
			return nil
		},
	})
}

// pollerSummary is one poller of a validated config.
type pollerSummary struct {
	Name         string   `json:"name"`
	Strategy     string   `json:"strategy"`
	Partitions   []string `json:"partitions"`
	Schedule     string   `json:"schedule"`
	Delivery     string   `json:"delivery"`
	Shadow       bool     `json:"shadow"`
	LogRetention string   `json:"logRetention,omitempty"`
}

func summarize(pc config.Poller) pollerSummary {
	ps := pollerSummary{Name: pc.Name, Strategy: pc.Cursor.Strategy, Partitions: pc.Partitions, Shadow: pc.Shadow}
	if ps.Partitions == nil {
		ps.Partitions = []string{}
	}
	d := func(x time.Duration) string {
		if x == 0 {
			return "default"
		}
		return x.String()
	}
	switch sc := pc.Schedule; {
	case sc.Adaptive != nil && !*sc.Adaptive:
		ps.Schedule = "fixed " + d(sc.Min)
	case sc.Min == 0 && sc.Max == 0:
		ps.Schedule = "default"
	default:
		ps.Schedule = d(sc.Min) + ".." + d(sc.Max)
	}
	switch dl := pc.Delivery; {
	case dl.Webhook != nil:
		ps.Delivery = "webhook " + dl.Webhook.URL
	case dl.Stream != nil:
		ps.Delivery = "stream " + dl.Stream.Key
	default:
		ps.Delivery = "stdout"
	}
	if pc.Delivery.Poison == config.PoisonHalt {
		ps.Delivery += " (poison: halt)"
	}
	if pc.Log != nil && pc.Log.Retention > 0 {
		ps.LogRetention = pc.Log.Retention.String()
	}
	return ps
}

// probeReport is one poller's probe in validate's output.
type probeReport struct {
	Poller    string               `json:"poller"`
	Partition string               `json:"partition"`
	Result    *watukuy.ProbeResult `json:"result,omitempty"`
	Error     string               `json:"error,omitempty"`
}

func validateCmd() *cobra.Command {
	o := &op{}
	var probe bool
	cmd := &cobra.Command{
		Use:   "validate [--config F] [--probe]",
		Short: "Check a config file; with --probe, fetch each poller's first page and show what the engine would see",
		Long: `validate loads the config file and builds every poller (errors name file:line and the field),
then lists the pollers. With --probe it fetches the first page of each poller's first partition
and prints every item's identity, version and fingerprint, or why it would be parked as invalid,
with the next cursor. It writes nothing and needs no Redis. It exits 1 when the config is
invalid or a probe request fails; invalid items are reported, not fatal.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.out = cmd.OutOrStdout()
			return o.run(cmd, func(ctx context.Context, log zerolog.Logger) error { return o.validate(ctx, log, probe) })
		},
	}
	o.bind(cmd.Flags())
	o.bindJSON(cmd.Flags())
	cmd.Flags().BoolVar(&probe, "probe", false, "fetch the first page of every poller (writes nothing)")
	cmdLineOnly(cmd.Flags(), "probe")
	return cmd
}

func (o *op) validate(ctx context.Context, log zerolog.Logger, probe bool) error {
	cfg, err := config.Load(o.s.Config, nil)
	if err != nil {
		if !o.s.ConfigGiven {
			err = fmt.Errorf("%w (pass --config FILE)", err)
		}
		return err
	}
	// No Redis client: only the stream sink would use it, and only when delivering.
	pollers, err := app.Build(cfg, nil, io.Discard, log)
	if err != nil {
		return err
	}
	sums := make([]pollerSummary, len(cfg.Pollers))
	for i, pc := range cfg.Pollers {
		sums[i] = summarize(pc)
	}
	var probes []probeReport
	failed, invalid, items := 0, 0, 0
	if probe {
		for _, p := range pollers {
			part := ""
			if len(p.Partitions) > 0 {
				part = p.Partitions[0]
			}
			pr := probeReport{Poller: p.Name, Partition: part}
			res, err := watukuy.Probe(ctx, p, part)
			if err != nil {
				pr.Error = err.Error()
				failed++
			} else {
				pr.Result = &res
				invalid += res.Invalid
				items += len(res.Items)
			}
			probes = append(probes, pr)
		}
	}
	var result error
	if failed > 0 {
		result = fmt.Errorf("%d of %d probe(s) failed: check the URL, the credentials and that the API answers", failed, len(probes))
	}
	if o.asJSON {
		if err := writeJSON(o.out, struct {
			File    string          `json:"file"`
			OK      bool            `json:"ok"`
			Pollers []pollerSummary `json:"pollers"`
			Probes  []probeReport   `json:"probes,omitempty"`
		}{cfg.File, failed == 0, sums, probes}); err != nil {
			return err
		}
		return result
	}
	t := newTable(o.out, "NAME", "STRATEGY", "PARTITIONS", "SCHEDULE", "DELIVERY", "SHADOW", "LOG")
	for _, s := range sums {
		t.row(s.Name, s.Strategy, strings.Join(s.Partitions, ","), s.Schedule, s.Delivery, yesNo(s.Shadow), s.LogRetention)
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintf(o.out, "config OK: %d poller(s) in %s\n", len(sums), cfg.File)
	for _, pr := range probes {
		fmt.Fprintf(o.out, "\nprobe %s:", keyName(pr.Poller, pr.Partition))
		if pr.Error != "" {
			fmt.Fprintf(o.out, " FAILED: %s\n", pr.Error)
			continue
		}
		res := pr.Result
		fmt.Fprintf(o.out, " %d items, %d invalid, next cursor %q, hasMore %s", len(res.Items), res.Invalid, res.Next, yesNo(res.HasMore))
		if res.NotModified {
			fmt.Fprint(o.out, ", not modified")
		}
		fmt.Fprintln(o.out)
		t := newTable(o.out, "IDENTITY", "VERSION", "FINGERPRINT", "ISSUE")
		for _, it := range res.Items {
			fp := clip(it.Fingerprint, 17)
			if it.Tombstone {
				fp = "(tombstone)"
			}
			t.row(it.Identity, it.Version, fp, it.Issue)
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if probe {
		fmt.Fprintf(o.out, "\nprobed %d poller(s): %d items, %d invalid", len(probes), items, invalid)
		if invalid > 0 {
			fmt.Fprint(o.out, " (workers would park them as invalid: see ISSUE)")
		}
		fmt.Fprintf(o.out, ", %d failed\n", failed)
	}
	return result
}
