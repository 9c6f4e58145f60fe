package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/watukuy/watukuy/internal/app"
	"github.com/watukuy/watukuy/internal/chaos"
	"github.com/watukuy/watukuy/internal/chaos/procchaos"
	"github.com/watukuy/watukuy/internal/command"
)

func chaosCmd() *cobra.Command {
	c := &command.Flags{}
	var seed uint64
	var duration time.Duration
	var processes, verbose, asJSON, patch bool
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Put watukuy under fire (kills, pauses, 429s, 5xx, competing instances) and check every guarantee",
		Long: `chaos runs a seeded scenario and prints what it did and one line per guarantee with its
violations (all must be 0); it exits 1 when any guarantee was violated. In-process (the default)
engines run on --redis or an embedded miniredis, are killed at every kill point (K1-K7) and
frozen past their lease; with --processes it runs the real binaries against its own primary
redis-server and replica (SIGKILL, also of the worker whose request the API holds, with the
time to the key's next request; SIGSTOP/SIGCONT, kill -9 of Redis with AOF, a failover to the
replica that loses the last writes, a proxy that drops and stalls connections or holds Redis'
replies past the clients' read timeout). With --patch (in-process) the pollers keep change sets,
and every delivered patch must apply to a consumer's copy of its item (P1).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.Run(cmd, func(ctx context.Context, log zerolog.Logger) error {
				out := cmd.OutOrStdout()
				var progress io.Writer
				if verbose {
					progress = cmd.ErrOrStderr()
				}
				var rep chaos.Report
				var result any // what --json prints
				if processes && patch {
					return command.Usagef("--patch runs in-process only: drop --processes")
				}
				if processes {
					pr, err := procchaos.Run(ctx, procchaos.Options{Seed: seed, Duration: duration, Log: progress})
					if err != nil {
						return err
					}
					result, rep = pr, pr.Report
					if !asJSON {
						fmt.Fprintf(out, "process chaos, seed %d, %v: %d worker kills, %d stops past the lease, %d redis restarts, %d failovers (%d grants lost, %d token refusals), %d proxy faults, %d reply stalls (%d scripts re-sent, %d fenced), %d receiver outages, %d API changes\n",
							seed, duration, pr.Kills, pr.Stops, pr.RedisRestarts, pr.Failovers, pr.LostGrants, pr.TokenRefusals, pr.ProxyFaults, pr.ReplyStalls,
							pr.ResentScripts, pr.ResentFenced, pr.ReceiverOutages, pr.Changes)
						fmt.Fprintf(out, "recovery: %d of the kills hit the key's worker mid-fetch; its next request came after %s (goal %v)\n",
							pr.HolderKills, pr.RecoveryText(), procchaos.RecoveryGoal)
					}
				} else {
					redisURL := c.S.Redis
					if redisURL == "" {
						mr, err := miniredis.Run()
						if err != nil {
							return err
						}
						defer mr.Close()
						redisURL = "redis://" + mr.Addr()
					}
					rdb, err := app.Connect(ctx, redisURL)
					if err != nil {
						return err
					}
					defer rdb.Close()
					res, err := chaos.Run(ctx, chaos.Options{Seed: seed, Duration: duration, Redis: rdb, Log: progress, Patch: patch})
					if err != nil {
						return err
					}
					result, rep = res, res.Report
					if !asJSON {
						printRun(out, res)
					}
				}
				if asJSON {
					if err := writeJSON(out, struct {
						Mode   string   `json:"mode"`
						Seed   uint64   `json:"seed"`
						Failed bool     `json:"failed"`
						Lines  []string `json:"guarantees"`
						Result any      `json:"result"`
					}{map[bool]string{true: "processes", false: "in-process"}[processes], seed, rep.Failed(), rep.Lines(), result}); err != nil {
						return err
					}
				} else {
					fmt.Fprintf(out, "deliveries %d, unique events %d, duplicate ratio %.3f\n", rep.Deliveries, rep.UniqueEvents, rep.DuplicateRatio)
					if patch {
						fmt.Fprintf(out, "patches applied %d, previous items compared %d\n", rep.Patches, rep.Previous)
					}
					for _, l := range rep.Lines() {
						fmt.Fprintln(out, l)
					}
				}
				if rep.Failed() {
					return fmt.Errorf("guarantees violated (reproduce with --seed %d)", seed)
				}
				return nil
			})
		},
	}
	c.Bind(cmd.Flags(), "console")
	cmd.Flags().Uint64Var(&seed, "seed", 1, "seed of every random choice")
	cmd.Flags().DurationVar(&duration, "duration", 30*time.Second, "how long faults are injected")
	cmd.Flags().BoolVar(&processes, "processes", false, "run real processes against a private redis-server")
	cmd.Flags().BoolVar(&verbose, "verbose", false, "print every kill, pause and restart to stderr")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as one JSON document")
	cmd.Flags().BoolVar(&patch, "patch", false, "in-process: the pollers keep change sets, and every delivered patch is checked (P1)")
	return cmd
}

func printRun(w io.Writer, r chaos.Result) {
	fmt.Fprintf(w, "in-process chaos, seed %d: %d steps, %d cycles, %d pauses past the lease, %d API faults, %d API changes\n",
		r.Seed, r.Steps, r.Cycles, r.Pauses, r.Faults, r.Changes)
	kills := map[string]int{}
	for p, n := range r.Kills {
		kills[string(p)] = n
	}
	printCounts(w, "kills:", kills, "\n")
	printCounts(w, "pauses by point:", r.Frozen, "")
	fmt.Fprintf(w, "; scripts re-sent %d, late Begin replies %d, items deleted while a listing was paged %d, listing cuts %d, sink outages %d\n",
		r.Resends, r.Late, r.PagingDeletes, r.ListingCuts, r.SinkOutages)
	printCounts(w, "operator actions:", r.Ops, "\n")
}

// printCounts prints a label and name=count pairs in name order, then end.
func printCounts(w io.Writer, label string, counts map[string]int, end string) {
	fmt.Fprint(w, label)
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		fmt.Fprintf(w, " %s=%d", name, counts[name])
	}
	fmt.Fprint(w, end)
}
