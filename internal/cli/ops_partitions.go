package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/command"
	"github.com/watukuy/watukuy/watukuytype"
)

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
			kis, err := eng.InspectAll(ctx, o.poller)
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
		if ki, err := eng.Inspect(ctx, watukuytype.Key{Poller: o.poller, Partition: o.partition}); err == nil {
			status = string(ki.Status)
		} else if !errors.As(err, new(*watukuytype.NotFoundError)) { // a deleted partition has left the registry
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
		if o.partition == "" {
			return command.Usagef("--partition: name the new partition (- and \"\" are the key of an unpartitioned poller, which it has already)")
		}
		return eng.Partitions().Add(ctx, watukuytype.Key{Poller: o.poller, Partition: o.partition})
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
		return eng.Partitions().Remove(ctx, watukuytype.Key{Poller: o.poller, Partition: o.partition})
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
			ki, err := eng.Inspect(ctx, watukuytype.Key{Poller: o.poller, Partition: o.partition})
			if err != nil {
				return err
			}
			return command.Usagef("partitions delete removes partition %q of %s for good: its state (live cursor %q), %d known items, %d undelivered outbox events, %d parked rows and its replay log; pass --yes to delete it, or use `watukuy partitions remove` to pause it and keep its state",
				o.partition, o.poller, ki.Cursor, ki.Items, ki.OutboxPending, ki.Parked)
		}
		return eng.Partitions().Delete(ctx, watukuytype.Key{Poller: o.poller, Partition: o.partition})
	}, func(string) string {
		return fmt.Sprintf("deleted partition %q of %s with its state, snapshot, outbox, parked rows and replay log", o.partition, o.poller)
	})
}
