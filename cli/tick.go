package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/app"
)

func tickCmd() *cobra.Command {
	c := &common{}
	var maxDuration time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "tick",
		Short: "Claim and run due cycles in this process, then exit (cron, serverless)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withEnv(cmd, func(ctx context.Context, env *app.Env) error {
				return tick(ctx, cmd.OutOrStdout(), env, maxDuration, asJSON)
			})
		},
	}
	c.bind(cmd.Flags(), "json")
	cmd.Flags().BoolVar(&c.s.AllowEviction, "allow-eviction", false, "start even when Redis maxmemory-policy is not noeviction")
	cmd.Flags().DurationVar(&maxDuration, "max-duration", 50*time.Second, "bound the whole run: no claim after it, and running cycles stop at their next step, commit and hand their keys back")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().StringSliceVar(&c.s.Pollers, "poller", nil, "run only these pollers of the config (repeatable; default: all)")
	cmdLineOnly(cmd.Flags(), "poller")
	c.bindClaim(cmd.Flags())
	c.bindCycles(cmd.Flags())
	return cmd
}

// nextDue is the earliest due key, reported when a tick ran nothing.
type nextDue struct {
	Poller    string    `json:"poller"`
	Partition string    `json:"partition"`
	At        time.Time `json:"at"`
}

// tick claims and runs due cycles, then prints the report.
func tick(ctx context.Context, out io.Writer, env *app.Env, maxDuration time.Duration, asJSON bool) error {
	if len(env.Pollers) == 0 {
		return fmt.Errorf("no pollers: pass --config with at least one poller")
	}
	// A signal ends the tick like its deadline: cycles stop at their next step and hand their
	// keys back due at once, instead of leaving them leased until their leases lapse.
	stop := context.AfterFunc(ctx, func() { _ = env.Engine.Stop(true, 5*time.Second) })
	defer stop()
	rep, err := env.Engine.Tick(context.WithoutCancel(ctx), maxDuration)
	if err != nil {
		return err
	}
	// Nothing ran: say when the next key is due, so a key held by a claim (a cycle running
	// elsewhere, or one that died: its claim lapses with its lease) is not a silent "ran 0".
	var next *nextDue
	if rep.Ran == 0 {
		if k, at, err := env.Store.NextDue(ctx, env.PollerNames()); err == nil && k != (watukuy.Key{}) {
			next = &nextDue{Poller: k.Poller, Partition: k.Partition, At: at.UTC()}
		}
	}
	errs := make([]string, len(rep.Errors))
	for i, e := range rep.Errors {
		errs[i] = e.Error()
	}
	if asJSON {
		b, _ := json.Marshal(struct {
			watukuy.TickReport
			Errors []string `json:"errors"`
			Next   *nextDue `json:"nextDue,omitempty"`
		}{rep, errs, next})
		fmt.Fprintln(out, string(b))
	} else {
		fmt.Fprintf(out, "ran %d  skippedNotDue %d  skippedLeased %d  skippedPaused %d  events %d  delivered %d  errors %d\n",
			rep.Ran, rep.SkippedNotDue, rep.SkippedLeased, rep.SkippedPaused, rep.Events, rep.Delivered, len(rep.Errors))
		for _, e := range errs {
			fmt.Fprintln(out, "  error:", e)
		}
		if next != nil {
			fmt.Fprintf(out, "  nothing ran: the next key due is %s (partition %q) at %s, in %s (a claimed key is due when its claim lapses: its cycle's lease TTL + 2s after its last renewal)\n",
				next.Poller, next.Partition, next.At.Format(time.RFC3339), time.Until(next.At).Round(time.Second))
		}
	}
	if len(rep.Errors) > 0 {
		return fmt.Errorf("%d cycle(s) failed", len(rep.Errors))
	}
	return nil
}
