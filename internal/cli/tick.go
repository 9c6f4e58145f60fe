package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/watukuy/watukuy/internal/app"
	"github.com/watukuy/watukuy/internal/command"
	"github.com/watukuy/watukuy/watukuytype"
)

func tickCmd() *cobra.Command {
	c := &command.Flags{}
	var maxDuration time.Duration
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "tick",
		Short: "Claim and run due cycles in this process, then exit (cron, serverless)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.WithEnv(cmd, func(ctx context.Context, env *app.Env) error {
				return tick(ctx, cmd.OutOrStdout(), env, maxDuration, asJSON)
			})
		},
	}
	c.Bind(cmd.Flags(), "json")
	cmd.Flags().BoolVar(&c.S.AllowEviction, "allow-eviction", false, "start even when Redis maxmemory-policy is not noeviction")
	cmd.Flags().DurationVar(&maxDuration, "max-duration", 50*time.Second, "bound the whole run: no claim after it, and running cycles stop at their next step, commit and hand their keys back")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().StringSliceVar(&c.S.Pollers, "poller", nil, "run only these pollers of the config (repeatable; default: all)")
	command.CmdLineOnly(cmd.Flags(), "poller")
	c.BindClaim(cmd.Flags())
	c.BindCycles(cmd.Flags())
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
		if k, at, err := env.Store.NextDue(ctx, env.PollerNames()); err == nil && k != (watukuytype.Key{}) {
			next = &nextDue{Poller: k.Poller, Partition: k.Partition, At: at.UTC()}
		}
	}
	poller := "P"
	if names := env.PollerNames(); len(names) == 1 {
		poller = names[0]
	}
	parked, lost := parkedReport(rep, poller)
	errs := make([]string, len(rep.Errors))
	for i, e := range rep.Errors {
		errs[i] = e.Error()
	}
	if asJSON {
		b, _ := json.Marshal(struct {
			watukuytype.TickReport
			Errors []string `json:"errors"`
			Next   *nextDue `json:"nextDue,omitempty"`
		}{rep, errs, next})
		fmt.Fprintln(out, string(b))
	} else {
		fmt.Fprintf(out, "ran %d  skippedNotDue %d  skippedLeased %d  skippedPaused %d  items %d  events %d  delivered %d  parked %d  invalid %d  errors %d\n",
			rep.Ran, rep.SkippedNotDue, rep.SkippedLeased, rep.SkippedPaused, rep.Items, rep.Events, rep.Delivered, rep.Parked, rep.Invalid, len(rep.Errors))
		for _, e := range errs {
			fmt.Fprintln(out, "  error:", e)
		}
		for _, l := range parked {
			fmt.Fprintln(out, "  "+l)
		}
		if next != nil {
			fmt.Fprintf(out, "  nothing ran: the next key due is %s (partition %q) at %s, in %s (a claimed key is due when its claim lapses: its cycle's lease TTL + 2s after its last renewal)\n",
				next.Poller, next.Partition, next.At.Format(time.RFC3339), time.Until(next.At).Round(time.Second))
		}
	}
	if len(rep.Errors) > 0 {
		return fmt.Errorf("%d cycle(s) failed", len(rep.Errors))
	}
	if len(lost) > 0 {
		return errors.New(strings.Join(lost, "; "))
	}
	return nil
}

// parkedReport describes the rows a tick parked: a line per kind that says what to do, and
// what of it lost all the tick's work (every item read parked as invalid, or no event
// delivered and some parked as poison). Those cycles ran without an error, so without this a
// tick that parked everything would exit 0.
// The commands name poller, or P when the tick ran several.
func parkedReport(rep watukuytype.TickReport, poller string) (lines, lost []string) {
	if rep.Invalid > 0 {
		what := plural(rep.Invalid, "item") + " parked as invalid"
		if rep.Invalid == rep.Items {
			what = fmt.Sprintf("every item read (%d) was parked as invalid", rep.Items)
			lost = append(lost, what)
		}
		lines = append(lines, fmt.Sprintf("%s: the cursor moved past them without an event; `watukuy parked ls --poller %s --kind invalid` says why; fix the poller's identity, version or validation, then `watukuy parked retry --poller %[2]s --all --kind invalid`", what, poller))
	}
	if rep.Parked > 0 {
		what := plural(rep.Parked, "event") + " parked as poison"
		if rep.Delivered == 0 {
			what = "no event was delivered: " + what
			lost = append(lost, what)
		}
		lines = append(lines, fmt.Sprintf("%s (each holds its ordering key's later events): `watukuy parked ls --poller %s --kind poison` shows the errors; fix the handler or its sink, then `watukuy parked retry --poller %[2]s --all --kind poison`", what, poller))
	}
	return lines, lost
}
