package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/command"
	"github.com/watukuy/watukuy/watukuytype"
)

func replayCmd() *cobra.Command {
	o := &op{}
	var fromS, toS string
	var from, to time.Time
	return o.command(opSpec{
		use:   "replay --poller P [--partition X] --from <time> [--to <time>]",
		short: "Deliver logged events again: copy them back into the outbox with their original ids",
		long: `replay copies the events committed between --from and --to (default: now) from the key's
replay log back into its outbox, with their original ids and lane "replay"; the next cycle
delivers them. Times are ` + timeHelp + `. The poller needs log.retention in its config:
without it there is no log and replay fails.`,
		keys: pollerKeys,
		flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&fromS, "from", "", "replay events committed from this time on (RFC 3339, a date, unix ms or a time ago: 2h); required")
			fs.StringVar(&toS, "to", "", "replay events committed up to this time (default: now)")
		},
		check: func(cmd *cobra.Command) error {
			if fromS == "" {
				return command.Usagef("--from is required: %s", timeHelp)
			}
			now := time.Now()
			var err error
			if from, err = parseTime("from", fromS, now); err != nil {
				return err
			}
			if toS == "" {
				if from.After(now) {
					return command.Usagef("--from %s is in the future: nothing was logged after it yet", from.UTC().Format(time.RFC3339))
				}
				return nil
			}
			if to, err = parseTime("to", toS, now); err != nil {
				return err
			}
			if to.Before(from) {
				return command.Usagef("--to %s is before --from %s", to.UTC().Format(time.RFC3339), from.UTC().Format(time.RFC3339))
			}
			return nil
		},
		run: func(ctx context.Context, eng *watukuy.Engine) error {
			type keyReplay struct {
				Poller    string `json:"poller"`
				Partition string `json:"partition"`
				Replayed  int    `json:"replayed"`
			}
			done := []keyReplay{}
			total := 0
			if err := o.each(ctx, eng, func(k watukuytype.Key) error {
				n, err := eng.Replay(ctx, k, from, to)
				total += n
				done = append(done, keyReplay{k.Poller, k.Partition, n})
				return err
			}); err != nil {
				if total > 0 {
					err = fmt.Errorf("%w; %d events were replayed", err, total)
				}
				return err
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
			_, err := fmt.Fprintf(o.out, "replayed %d events of %s in %d keys: the next cycles deliver them\n", total, o.poller, len(done))
			return err
		},
	})
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
snapshot is forgotten and every item is emitted again as created, with the same id as when its
content was first emitted (a consumer that dedupes by id drops them: re-read them with a consumer
that does not); an item the API no longer lists is still deleted.`,
		keys: pollerKeys,
		flags: func(fs *pflag.FlagSet) {
			fs.StringVar(&to, "to", "", `the new cursor ("null": the very beginning); required`)
			fs.BoolVar(&clearSnapshot, "clear-snapshot", false, "forget every known item: all are emitted again as created")
		},
		check: func(cmd *cobra.Command) error {
			if !cmd.Flags().Changed("to") {
				return command.Usagef("--to is required: the new cursor, or null for the very beginning")
			}
			return nil
		},
		run: func(ctx context.Context, eng *watukuy.Engine) error {
			cursor := nullCursor(to)
			type keyReset struct {
				Poller        string `json:"poller"`
				Partition     string `json:"partition"`
				Cursor        string `json:"cursor"`
				ClearSnapshot bool   `json:"clearSnapshot"`
				Status        string `json:"status"`
			}
			rows := []keyReset{}
			if err := o.each(ctx, eng, func(k watukuytype.Key) error {
				if err := eng.ResetCursor(ctx, k, cursor, clearSnapshot); err != nil {
					return err
				}
				ki, err := eng.Inspect(ctx, k)
				if err != nil {
					return err
				}
				rows = append(rows, keyReset{k.Poller, k.Partition, ki.Cursor, clearSnapshot, string(ki.Status)})
				return nil
			}); err != nil {
				return err
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
				msg = "the live lane goes on from the new cursor at the next cycle (due now); every item is emitted again as created, with the id it was first emitted with"
			}
			_, err := fmt.Fprintln(o.out, msg)
			return err
		},
	})
}
