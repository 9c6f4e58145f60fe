package cli

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/watukuy/watukuy/internal/app"
	"github.com/watukuy/watukuy/internal/bench"
	"github.com/watukuy/watukuy/internal/command"
)

// benchCmd is `watukuy bench`: the benchmark measurements, a table on stdout and JSON in a file.
func benchCmd() *cobra.Command {
	o := bench.Defaults()
	var jsonFile, logLevel string
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure memory per key, claim rate, lateness, no-op cycles, scale-out and the layout's costs on private redis-servers",
		Long: `bench runs the benchmark measurements, each on redis-server processes it starts
itself (a 3-master Redis Cluster for the cluster scale-out) unless --redis names a server, with the
worker and scheduler processes the lateness, scale-out and two-scheduler runs need (this binary,
re-executed as 'watukuy bench child'). It prints a table with each figure next to its baseline from
the same run (or a design baseline) and the longest Lua script the run's own servers logged
(SLOWLOG), and writes the whole run as JSON with --json. registry-costs, longest-script and churn
measure what the data layout keeps independent of the deployment's size: an operator's look at a
key and a partitions add next to the poller's partition count, the longest script of operations on
large states, and the keys partitions that came and went leave behind.

Measurements (--only): ` + fmt.Sprint(bench.Names()) + `.`,
		Example: `  watukuy bench --json docs/bench.json
  watukuy bench --only idle-bytes --keys 1000000
  watukuy bench --only lateness,two-schedulers --due-keys 100000 --lateness-for 2m
  watukuy bench --only registry-costs,longest-script,churn`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := command.FromEnv(cmd); err != nil {
				return err
			}
			log, err := app.Logger("console", logLevel, cmd.ErrOrStderr())
			if err != nil {
				return command.Usage(err)
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("bench: the worker processes need this binary: %w", err)
			}
			o.Child = func(args ...string) *exec.Cmd {
				return exec.Command(exe, append([]string{"bench", "child"}, args...)...)
			}
			o.Log = log
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rep, runErr := bench.Run(ctx, o)
			if rep != nil {
				if err := bench.PrintTable(cmd.OutOrStdout(), rep); err != nil {
					return err
				}
				if jsonFile != "" {
					if err := writeBenchJSON(jsonFile, rep); err != nil {
						return err
					}
				}
			}
			return runErr
		},
	}
	fs := cmd.Flags()
	fs.StringSliceVar(&o.Only, "only", nil, "run only these measurements (comma-separated)")
	fs.IntVar(&o.Keys, "keys", o.Keys, "idle keys of the large memory run (the small one has --small-keys)")
	fs.IntVar(&o.SmallKeys, "small-keys", o.SmallKeys, "idle keys of the small memory run")
	fs.IntVar(&o.Items, "items", o.Items, "tracked items of the bytes-per-item run")
	fs.IntVar(&o.DueKeys, "due-keys", o.DueKeys, "keys of the claim-rate and lateness runs")
	fs.DurationVar(&o.Interval, "interval", o.Interval, "how often each key of the lateness run is due")
	fs.DurationVar(&o.LatenessFor, "lateness-for", o.LatenessFor, "how long the lateness run lasts")
	fs.IntVar(&o.NoopKeys, "noop-keys", o.NoopKeys, "keys of the no-op, idle-costs and scale-out runs")
	fs.IntSliceVar(&o.Workers, "workers", o.Workers, "worker process counts of the scale-out run")
	fs.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "asynq concurrency of each worker")
	fs.IntVar(&o.FailoverKeys, "failover-keys", o.FailoverKeys, "keys of the two-scheduler run")
	fs.DurationVar(&o.FailoverFor, "failover-for", o.FailoverFor, "how long the two-scheduler run lasts (the first scheduler is killed at a third)")
	fs.IntVar(&o.RegistryKeys, "registry-keys", o.RegistryKeys, "partitions of the registry-costs run (compared with 10)")
	fs.IntVar(&o.ParkedOutbox, "parked-outbox", o.ParkedOutbox, "longest-script: pending events beside the retried poison event")
	fs.IntVar(&o.HeldEvents, "held-events", o.HeldEvents, "longest-script: events held behind the retried poison event")
	fs.IntVar(&o.ClaimKeys, "claim-keys", o.ClaimKeys, "longest-script: keys in the claimed due set")
	fs.IntVar(&o.DeleteItems, "delete-items", o.DeleteItems, "longest-script: tracked items of the deleted partition")
	fs.IntVar(&o.Tombstones, "tombstones", o.Tombstones, "longest-script: tombstones expiring together")
	fs.IntVar(&o.ChurnKeys, "churn-keys", o.ChurnKeys, "partitions the churn run adds, polls and deletes")
	fs.StringVar(&o.RedisURL, "redis", "", "use this Redis instead of starting redis-server (memory figures then include anything else on it)")
	fs.StringVar(&jsonFile, "json", "", "write the run as JSON to this file")
	fs.StringVar(&logLevel, "log-level", "info", "progress log level (stderr)")
	// A deployment's WATUKUY_REDIS_URL must never make the bench write into its Redis.
	command.CmdLineOnly(fs, "redis", "json", "only")
	cmd.AddCommand(benchChildCmd())
	return cmd
}

// benchChildCmd is the hidden worker or scheduler process of a measurement.
func benchChildCmd() *cobra.Command {
	return &cobra.Command{
		Use:                "child",
		Short:              "Run one worker or scheduler process of a measurement (internal)",
		Example:            "  watukuy bench child --role worker --redis unix:///tmp/redis.sock --prefix wkb1 --queue q --keys 100 --counter c",
		Hidden:             true,
		DisableFlagParsing: true, // bench.Child parses its own flags
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return bench.Child(ctx, args, cmd.ErrOrStderr())
		},
	}
}

func writeBenchJSON(path string, rep *bench.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	if err := bench.WriteJSON(f, rep); err != nil {
		_ = f.Close()
		return fmt.Errorf("bench: write %s: %w", path, err)
	}
	return f.Close()
}
