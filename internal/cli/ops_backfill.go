package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/httppoll"
	"github.com/watukuy/watukuy/internal/admin"
	"github.com/watukuy/watukuy/internal/command"
	"github.com/watukuy/watukuy/internal/config"
	"github.com/watukuy/watukuy/watukuytype"
)

// keyBackfill is one key's backfill in the output (the admin API's shape); Event tags the
// lines of --wait --json (started, progress, done, replaced).
type keyBackfill struct {
	Event string `json:"event,omitempty"`
	admin.KeyBackfill
}

func backfillCmd() *cobra.Command {
	o := &op{}
	var from, to string
	var force, wait bool
	var every time.Duration
	return o.command(opSpec{
		use:   "backfill --poller P [--partition X] --from <cursor|time|null> [--to <cursor|time|null>] [--force] [--wait]",
		short: "Run the live lane's logic again from an older cursor, in a lane of its own",
		long: `backfill starts (or restarts) a backfill lane: the poller's live logic from --from ("null":
the very beginning) up to --to (default: the live cursor at this moment; "null": until the API
has no more). Workers run it with the pages the live lane leaves, after the live lane has caught
up; events carry lane "backfill". Known items at the same version emit nothing, unless --force
re-emits them as updated. snapshotDiff pollers have no cursor to go back to and refuse.

A timestamp poller's cursor can be given as a time: RFC 3339, a date (2026-01-02, UTC), unix
time, or a time ago (2h or -2h, 30m, 7d); with the config (--config) it is written as the API
writes times (cursor.formats; without --config, the formats the workers recorded in the
registry), and a value that is no time is refused at once. Token and page cursors are taken as
typed. When this process has the poller's definition (--config), a cursor it cannot place, or
a --from after the target, is refused before anything is written; otherwise the workers check
the rest at the backfill's first request (--wait shows it).

--wait follows the progress until every backfill is done (a bar on a terminal's stderr, one
line per step otherwise, or with --json one JSON line per change). Ctrl-C stops the waiting,
not the backfill.`,
		keys: pollerKeys,
		flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&from, "from", "", `cursor (or, for a timestamp poller, time) to start at ("null": the very beginning); required`)
			fs.StringVar(&to, "to", "", `cursor or time to stop at ("null": until the API has no more; default: the live cursor now)`)
			fs.BoolVar(&force, "force", false, "re-emit items already known at the same version, as updated")
			fs.BoolVar(&wait, "wait", false, "follow the progress until every backfill is done")
			fs.DurationVar(&every, "poll-interval", 500*time.Millisecond, "with --wait, how often the progress is read")
		},
		check: func(cmd *cobra.Command) error {
			if !cmd.Flags().Changed("from") {
				return command.Usagef("--from is required: the cursor to start at, or null for the very beginning")
			}
			if every <= 0 {
				return command.Usagef("--poll-interval %v must be positive", every)
			}
			return nil
		},
		run: func(ctx context.Context, eng *watukuy.Engine) error {
			var reg []string // the registry's word on the cursor, for a process without the config
			if o.configPoller() == nil {
				_, _ = eng.Each(ctx, o.poller, o.named(), func(k watukuytype.Key) error {
					if ki, err := eng.Inspect(ctx, k); err == nil {
						reg = ki.CursorFormats
					}
					return errFirstKey // one key says it for the poller
				})
			}
			now := time.Now()
			fromCursor, err := o.backfillCursor("from", from, now, reg)
			if err != nil {
				return err
			}
			req := watukuytype.BackfillRequest{From: fromCursor, Force: force}
			if o.flagSet("to") {
				t, err := o.backfillCursor("to", to, now, reg)
				if err != nil {
					return err
				}
				req.To = &t
			}
			started := []keyBackfill{}
			if err := o.each(ctx, eng, func(k watukuytype.Key) error {
				bp, err := eng.Backfill(ctx, k, req)
				if ce := (*watukuytype.ConfigError)(nil); errors.As(err, &ce) && strings.HasPrefix(ce.Field, "--") {
					typed := map[string]string{"--from": from, "--to": to}[ce.Field]
					err = command.Usagef("%s %s (you typed %q; poller %s)", ce.Field, ce.Msg, typed, o.poller)
				}
				if err != nil {
					return err
				}
				kb := keyBackfill{Event: "started", KeyBackfill: admin.KeyBackfill{Poller: k.Poller, Partition: k.Partition, Backfill: &bp}}
				if ki, err := eng.Inspect(ctx, k); err == nil && ki.Paused {
					kb.Note = "the key is " + string(ki.Status) + ": its backfill runs after `watukuy resume`"
				}
				started = append(started, kb)
				return nil
			}); err != nil {
				if len(started) > 0 {
					_ = o.printStarted(started, wait)
				}
				return err
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

// backfillCursor reads --from or --to (flag names it). "null" is the empty cursor. A timestamp
// poller's cursor may be a time (RFC 3339, unix time, a date, now/today/yesterday, a time ago):
// it is written as the poller's API writes times, in the formats the config says or, without
// the config, the registry recorded (reg: KeyInfo.CursorFormats, nil when the cursor is no
// time or the registry does not say). Without the config a value that is no time is refused
// here; with it the engine checks the cursor against the definition. Token and page cursors,
// and cursors of pollers whose kind is unknown, are opaque: taken as typed (a date or a time
// ago, which no cursor looks like, becomes RFC 3339; a bare word gets a warning).
func (o *op) backfillCursor(flag, v string, now time.Time, reg []string) (string, error) {
	if v == "null" {
		return "", nil
	}
	formats := reg
	if pc := o.configPoller(); pc != nil {
		if pc.Cursor.Strategy != config.StrategyTimestamp {
			return v, nil
		}
		formats = pc.Cursor.Formats
	} else if reg == nil {
		if t, ok := operatorTime(v, now); ok {
			return t.UTC().Format(time.RFC3339), nil
		}
		if isWord(v) {
			fmt.Fprintf(o.errOut, "warning: %q is no time this command reads (RFC 3339, a date such as 2026-11-30, unix time, now/today/yesterday or a time ago such as -24h): it goes to the poller as an opaque cursor; add --config to have it checked now\n", v)
		}
		return v, nil
	}
	if _, err := httppoll.ParseTime(v, formats); err == nil || strings.HasPrefix(v, "{") {
		return v, nil // as the API writes it, or a committed cursor copied from inspect
	}
	t, ok := operatorTime(v, now)
	if !ok {
		var err error
		if t, err = httppoll.ParseTime(v, []string{"rfc3339", "epoch"}); err != nil {
			if o.configPoller() != nil {
				return v, nil // the engine says why it is no cursor
			}
			return "", command.Usagef("--%s %q is no time the cursor of poller %s takes (it is written as %s): want %s", flag, v, o.poller, strings.Join(formats, ", "), timeHelp)
		}
	}
	return writeTime(t, formats), nil
}

// writeTime writes t in the first of a timestamp poller's formats (RFC 3339 without any).
func writeTime(t time.Time, formats []string) string {
	t = t.UTC()
	f := "rfc3339"
	if len(formats) > 0 {
		f = formats[0]
	}
	switch f {
	case "rfc3339":
		return t.Format(time.RFC3339)
	case "epoch_s", "epoch":
		return strconv.FormatInt(t.Unix(), 10)
	case "epoch_ms":
		return strconv.FormatInt(t.UnixMilli(), 10)
	default:
		return t.Format(f)
	}
}

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
		bar = newBackfillBar(o.errOut, isTerminal(o.errOut))
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
			ki, err := eng.Inspect(ctx, watukuytype.Key{Poller: kb.Poller, Partition: kb.Partition})
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
			next := keyBackfill{Event: "progress", KeyBackfill: admin.KeyBackfill{Poller: kb.Poller, Partition: kb.Partition, Backfill: bp}}
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
func progressChanged(a, b *watukuytype.BackfillProgress) bool {
	fa, fb := -1.0, -1.0
	if a.Fraction != nil {
		fa = *a.Fraction
	}
	if b.Fraction != nil {
		fb = *b.Fraction
	}
	return a.Pages != b.Pages || a.Items != b.Items || a.Events != b.Events || a.Cursor != b.Cursor || a.Done != b.Done || fa != fb
}

// backfillBar shows the backfills' progress on stderr: on a terminal one line redrawn in
// place, a percentage bar when every key's position is known (the poller places cursors) and
// a spinner otherwise; elsewhere (a log file, CI) a plain line per step. Both carry pages,
// items, events and (for one key) the cursor.
type backfillBar struct {
	w     io.Writer
	bar   *progressbar.ProgressBar // nil: plain lines
	known bool
	last  string // the last plain line, so that a poll without progress prints nothing
}

// barMax is the bar's resolution: per mille.
const barMax = 1000

// newBackfillBar draws on w: the bar when w is a terminal, plain lines otherwise.
func newBackfillBar(w io.Writer, terminal bool) *backfillBar {
	if !terminal {
		return &backfillBar{w: w}
	}
	// No spinner goroutine (change interval 0): the bar is drawn only at each poll, so nothing
	// writes to w behind the command's back.
	bar := progressbar.NewOptions(-1, progressbar.OptionSetWriter(w), progressbar.OptionSetWidth(30),
		progressbar.OptionSpinnerType(14), progressbar.OptionSetSpinnerChangeInterval(0),
		progressbar.OptionSetElapsedTime(true), progressbar.OptionSetPredictTime(false), progressbar.OptionShowDescriptionAtLineEnd())
	return &backfillBar{w: w, bar: bar}
}

// isTerminal reports whether w is a terminal (a character device), where \r redraws a line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
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
	permille := int(frac / float64(len(cur)) * barMax)
	if b.bar == nil {
		line := desc
		if known {
			line = fmt.Sprintf("%3d%%  %s", permille/10, desc)
		}
		if line != b.last {
			b.last = line
			fmt.Fprintln(b.w, line)
		}
		return
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
		_ = b.bar.Set(permille)
	} else {
		_ = b.bar.Add(1) // turn the spinner
	}
}

// finish ends the bar's line; plain lines are complete already.
func (b *backfillBar) finish() {
	if b.bar == nil {
		return
	}
	_ = b.bar.Finish()
	fmt.Fprintln(b.w)
}

func (b *backfillBar) stop() {
	if b.bar == nil {
		return
	}
	_ = b.bar.Exit()
	fmt.Fprintln(b.w)
}

// isWord reports a value made of letters only: no cursor format looks like it (a typo of a
// time, or a word meant as one).
func isWord(v string) bool {
	for _, r := range v {
		if !unicode.IsLetter(r) {
			return false
		}
	}
	return v != ""
}
