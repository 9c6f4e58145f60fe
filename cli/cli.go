// Package cli is the watukuy command tree. cmd/watukuy, cmd/watukuy-worker and cmd/watukuy-scheduler are thin
// mains over it, and a program that embeds the engine can mount Root() in its own main.
//
// Every setting flag can also be set in the environment as WATUKUY_<FLAG> (dashes become
// underscores); --redis also reads WATUKUY_REDIS_URL. A flag beats the environment, which
// beats the config file. The flags that say what an operator command acts on (--poller,
// --partition, --ids, --yes, --from, --to, ...) are read from the command line only: a
// forgotten WATUKUY_YES must never confirm a delete.
//
// Exit codes: 0 success, 1 the operation failed, 2 a usage error (a missing or invalid flag,
// an unknown command, an unknown poller or partition).
//
// The operator commands share ops.go (their flags, the keys they act on, status output, and
// trigger, pause and resume); each other command group has its own file: ops_inspect.go,
// ops_backfill.go, ops_replay.go (replay, reset-cursor), ops_parked.go, ops_partitions.go,
// ops_layout.go (migrate and the layout check) and ops_validate.go.
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/app"
)

// Exit codes.
const (
	ExitOK      = 0
	ExitFailed  = 1
	ExitUsage   = 2
	envPrefix   = "WATUKUY_"
	defaultConf = "./watukuy.yaml"
)

// usageError marks a command-line mistake (exit code 2).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// usagef is a usage error with a message.
func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// flagError turns cobra's flag parsing errors into usage errors.
func flagError(_ *cobra.Command, err error) error { return usageError{err} }

// Execute runs cmd with the process arguments and exits with exitCode. Errors go to stderr.
func Execute(cmd *cobra.Command) {
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	cmd.SetFlagErrorFunc(flagError)
	ran, err := cmd.ExecuteC()
	code := exitCode(err)
	if err != nil {
		// Engine errors already start with "watukuy: ".
		fmt.Fprintln(os.Stderr, "watukuy:", strings.TrimPrefix(err.Error(), "watukuy: "))
	}
	if code == ExitUsage && !isNotFound(err) { // a not-found error already lists what exists
		fmt.Fprintf(os.Stderr, "Run '%s --help' for usage.\n", ran.CommandPath())
	}
	os.Exit(code)
}

// exitCode maps a command's error to the process exit code: 0 on success, 2 for a usage
// error (flags, unknown command, unknown poller or partition), 1 for anything else.
func exitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ue usageError
	if errors.As(err, &ue) || isNotFound(err) {
		return ExitUsage
	}
	// cobra's own mistakes that reach us without the flag error func
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "required flag", "flag needs an argument", "invalid argument"} {
		if strings.HasPrefix(err.Error(), p) {
			return ExitUsage
		}
	}
	return ExitFailed
}

func isNotFound(err error) bool {
	var nf *watukuy.NotFoundError
	return errors.As(err, &nf)
}

// common holds the flags shared by every command.
type common struct {
	s app.Settings
	// json is --json of a long-running process: JSON logs (and, in dev, events as JSON lines).
	json bool
}

// bind binds the flags every command takes; logFormat is the command's default log format:
// json for the processes a log collector reads, console for the commands people run.
func (c *common) bind(fs *pflag.FlagSet, logFormat string) {
	fs.StringVar(&c.s.Redis, "redis", "", "Redis URL (redis://, rediss://, unix://, redis+cluster://); env WATUKUY_REDIS_URL")
	fs.StringVar(&c.s.Config, "config", defaultConf, "config file with the pollers")
	fs.StringVar(&c.s.Prefix, "prefix", "", "Redis key prefix (default wk, or prefix: in the config)")
	fs.StringVar(&c.s.LogFormat, "log-format", logFormat, "log format: json or console")
	fs.StringVar(&c.s.LogLevel, "log-level", "info", "least severe log level shown: debug (one line per HTTP request), info, warn or error")
}

// bindOperator binds the common flags of an operator command: it logs for people (console on
// stderr, never a JSON line above a table), and reads ./watukuy.yaml only for a Redis URL
// the flags and environment lack (app.Settings.ConfigOnDemand): pollers come from the
// registry, and the file may name variables only the workers have.
func (c *common) bindOperator(fs *pflag.FlagSet) {
	c.bind(fs, "console")
	c.s.ConfigOnDemand = true
}

func (c *common) bindProcess(fs *pflag.FlagSet, listen string) {
	fs.StringVar(&c.s.Listen, "listen", listen, "address of /healthz, /readyz, /metrics (and /monitoring with --ui); off disables")
	fs.BoolVar(&c.s.UI, "ui", false, "serve asynqmon at /monitoring")
	fs.BoolVar(&c.s.AllowEviction, "allow-eviction", false, "start even when Redis maxmemory-policy is not noeviction")
	fs.StringVar(&c.s.InstanceID, "instance-id", "", "name of this process in leases (default host-pid-random)")
	fs.BoolVar(&c.json, "json", false, "JSON logs (the same as --log-format json)")
}

// bindClaim is --claim-timeout, for the processes that claim keys (scheduler, run, tick).
func (c *common) bindClaim(fs *pflag.FlagSet) {
	fs.DurationVar(&c.s.ClaimTimeout, "claim-timeout", 0,
		"how long a claim holds a key until its cycle's lease keeper holds it on (0: the poller's lease TTL + 2s, so a key whose cycle died is claimed again once its lease lapses); a scheduler holds a key 1s until its task is enqueued, then this long")
}

func (c *common) bindWorker(fs *pflag.FlagSet) {
	fs.IntVar(&c.s.Concurrency, "concurrency", 10, "cycles run at once")
	fs.DurationVar(&c.s.Drain, "drain-timeout", app.DefaultDrain, "on SIGTERM running cycles stop at their next step and hand their keys back; those still running after this long are cancelled")
	c.bindCycles(fs)
}

// bindCycles is what every process that runs cycles takes (worker, run, dev, tick).
func (c *common) bindCycles(fs *pflag.FlagSet) {
	fs.IntVar(&c.s.WaitReplicas, "wait-replicas", 0,
		"deliver events only once this many Redis replicas have their commit (WAIT): set it to 1 or more with replicas and failover, so a failover never loses a commit whose events were delivered")
}

// noEnvAnnotation marks a flag that fromEnv leaves alone.
const noEnvAnnotation = "watukuy_no_env"

// cmdLineOnly marks flags that name what a command acts on: they come from the command line
// only, never from the environment.
func cmdLineOnly(fs *pflag.FlagSet, names ...string) {
	for _, n := range names {
		_ = fs.SetAnnotation(n, noEnvAnnotation, []string{"true"})
	}
}

// envNames are the environment variables a setting flag reads, first match wins:
// WATUKUY_<FLAG>, and for --redis WATUKUY_REDIS_URL before it.
func envNames(f *pflag.Flag) []string {
	n := envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
	if f.Name == "redis" {
		return []string{envPrefix + "REDIS_URL", n}
	}
	return []string{n}
}

// fromEnv fills every setting flag not given on the command line from WATUKUY_<FLAG>.
func fromEnv(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed || err != nil || f.Annotations[noEnvAnnotation] != nil {
			return
		}
		for _, n := range envNames(f) {
			if v, ok := os.LookupEnv(n); ok {
				if e := f.Value.Set(v); e != nil {
					err = usageError{fmt.Errorf("%s=%q: %w", n, v, e)}
				}
				if f.Name == "config" {
					f.Changed = true
				}
				return
			}
		}
	})
	return err
}

// prepare runs before every command: environment, logger, and --config given or not.
func (c *common) prepare(cmd *cobra.Command) error {
	if err := fromEnv(cmd); err != nil {
		return err
	}
	if f := cmd.Flags().Lookup("config"); f != nil {
		c.s.ConfigGiven = f.Changed
	}
	if c.json {
		if f := cmd.Flags().Lookup("log-format"); f != nil && f.Changed && c.s.LogFormat != "json" {
			return usagef("--json and --log-format %s contradict each other: drop one", c.s.LogFormat)
		}
		c.s.LogFormat = "json"
	}
	c.s.Out = cmd.OutOrStdout()     // the stdout sink writes where the command does
	c.s.Service = cmd.Root().Name() // the traces' service.name: watukuy, watukuy-worker, watukuy-scheduler
	return nil
}

// Root returns the watukuy command.
func Root() *cobra.Command {
	root := &cobra.Command{
		Use:   "watukuy",
		Short: "Turn third-party HTTP APIs without webhooks into reliable change streams",
	}
	root.SetFlagErrorFunc(flagError) // subcommands inherit it: bad flags are usage errors
	root.AddCommand(devCmd(), runCmd(), tickCmd(), chaosCmd(), benchCmd(), workerCmd("worker"), schedulerCmd("scheduler"))
	root.AddCommand(opsCmds()...)
	root.AddCommand(versionCmd())
	return withHelp(withVersion(root))
}

// Worker returns the watukuy-worker command.
func Worker() *cobra.Command { return withHelp(withVersion(workerCmd("watukuy-worker"))) }

// Scheduler returns the watukuy-scheduler command.
func Scheduler() *cobra.Command { return withHelp(withVersion(schedulerCmd("watukuy-scheduler"))) }

func workerCmd(use string) *cobra.Command {
	return processCmd(use, "Run cycles from the asynq queue (scale by starting more)", "127.0.0.1:9090", true, false, app.RunWorker)
}

func schedulerCmd(use string) *cobra.Command {
	return processCmd(use, "Move due keys into asynq tasks (several may run at once)", "127.0.0.1:9091", false, true, app.RunScheduler)
}

func runCmd() *cobra.Command {
	return processCmd("run", "Run a scheduler and a worker in one process against a Redis URL", "127.0.0.1:9090", true, true, app.RunAll)
}

// processCmd is a long-lived process: it opens the environment and runs until a signal.
func processCmd(use, short, listen string, worker, claims bool, run func(context.Context, *app.Env, app.Settings) error) *cobra.Command {
	c := &common{}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withEnv(cmd, func(ctx context.Context, env *app.Env) error {
				defer reloadOnHUP(ctx, env)() // SIGHUP re-reads --config
				return run(ctx, env, c.s)
			})
		},
	}
	c.bind(cmd.Flags(), "json")
	c.bindProcess(cmd.Flags(), listen)
	if worker {
		c.bindWorker(cmd.Flags())
	}
	if claims {
		c.bindClaim(cmd.Flags())
	}
	return cmd
}

// withEnv is run with the environment opened (config, Redis, engine) and closed afterwards.
func (c *common) withEnv(cmd *cobra.Command, fn func(ctx context.Context, env *app.Env) error) error {
	return c.run(cmd, func(ctx context.Context, log zerolog.Logger) error {
		env, err := app.Open(ctx, c.s, log)
		if err != nil {
			return err
		}
		defer env.RDB.Close()
		defer env.FlushTraces()
		return fn(ctx, env)
	})
}

// run prepares the flags (environment, logger) and calls fn with a context that ends on
// SIGINT or SIGTERM.
func (c *common) run(cmd *cobra.Command, fn func(ctx context.Context, log zerolog.Logger) error) error {
	if err := c.prepare(cmd); err != nil {
		return err
	}
	log, err := app.Logger(c.s.LogFormat, c.s.LogLevel, cmd.ErrOrStderr())
	if err != nil {
		return usageError{err}
	}
	app.RouteRedisLogs(log)
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return fn(ctx, log)
}
