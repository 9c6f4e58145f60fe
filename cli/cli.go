// Package cli is the watukuy command tree. cmd/cli, cmd/worker and cmd/scheduler are thin
// mains over it, and a program that embeds the engine can mount Root() in its own main.
//
// Every flag can also be set in the environment as WATUKUY_<FLAG> (dashes become
// underscores); --redis also reads WATUKUY_REDIS_URL. A flag beats the environment, which
// beats the config file.
package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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

// Execute runs cmd with the process arguments and exits: 0 on success, 1 when the operation
// failed, 2 on a usage error. Errors go to stderr.
func Execute(cmd *cobra.Command) {
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usageError{err} })
	err := cmd.Execute()
	if err == nil {
		os.Exit(ExitOK)
	}
	fmt.Fprintln(os.Stderr, "watukuy:", err)
	var ue usageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") || strings.HasPrefix(err.Error(), "unknown flag") {
		fmt.Fprintf(os.Stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
		os.Exit(ExitUsage)
	}
	os.Exit(ExitFailed)
}

// common holds the flags shared by every command.
type common struct {
	s app.Settings
}

func (c *common) bind(fs *pflag.FlagSet) {
	fs.StringVar(&c.s.Redis, "redis", "", "Redis URL (redis://, rediss://, unix://, redis+cluster://); env WATUKUY_REDIS_URL")
	fs.StringVar(&c.s.Config, "config", defaultConf, "config file with the pollers")
	fs.StringVar(&c.s.Prefix, "prefix", "", "Redis key prefix (default wk, or prefix: in the config)")
	fs.StringVar(&c.s.LogFormat, "log-format", "json", "log format: json or console")
}

func (c *common) bindProcess(fs *pflag.FlagSet, listen string) {
	fs.StringVar(&c.s.Listen, "listen", listen, "address of /healthz, /readyz, /metrics (and /monitoring with --ui); off disables")
	fs.BoolVar(&c.s.UI, "ui", false, "serve asynqmon at /monitoring")
	fs.BoolVar(&c.s.AllowEviction, "allow-eviction", false, "start even when Redis maxmemory-policy is not noeviction")
	fs.StringVar(&c.s.InstanceID, "instance-id", "", "name of this process in leases (default host-pid-random)")
}

func (c *common) bindWorker(fs *pflag.FlagSet) {
	fs.IntVar(&c.s.Concurrency, "concurrency", 10, "cycles run at once")
	fs.DurationVar(&c.s.Drain, "drain-timeout", 30*time.Second, "on SIGTERM, how long running cycles may finish before they are cancelled")
}

// fromEnv fills every flag not given on the command line from WATUKUY_<FLAG>.
func fromEnv(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed || err != nil {
			return
		}
		names := []string{envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))}
		if f.Name == "redis" {
			names = append([]string{envPrefix + "REDIS_URL"}, names...)
		}
		for _, n := range names {
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
	c.s.Out = cmd.OutOrStdout() // the stdout sink writes where the command does
	return nil
}

// Root returns the watukuy command.
func Root() *cobra.Command {
	root := &cobra.Command{
		Use:   "watukuy",
		Short: "Turn third-party HTTP APIs without webhooks into reliable change streams",
	}
	root.AddCommand(devCmd(), runCmd(), tickCmd(), chaosCmd(), workerCmd("worker"), schedulerCmd("scheduler"))
	return root
}

// Worker returns the watukuy-worker command.
func Worker() *cobra.Command { return workerCmd("watukuy-worker") }

// Scheduler returns the watukuy-scheduler command.
func Scheduler() *cobra.Command { return schedulerCmd("watukuy-scheduler") }

func workerCmd(use string) *cobra.Command {
	return processCmd(use, "Run cycles from the asynq queue (scale by starting more)", "127.0.0.1:9090", true, app.RunWorker)
}

func schedulerCmd(use string) *cobra.Command {
	return processCmd(use, "Move due keys into asynq tasks (several may run at once)", "127.0.0.1:9091", false, app.RunScheduler)
}

func runCmd() *cobra.Command {
	return processCmd("run", "Run a scheduler and a worker in one process against a Redis URL", "127.0.0.1:9090", true, app.RunAll)
}

// processCmd is a long-lived process: it opens the environment and runs until a signal.
func processCmd(use, short, listen string, worker bool, run func(context.Context, *app.Env, app.Settings) error) *cobra.Command {
	c := &common{}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withEnv(cmd, func(ctx context.Context, env *app.Env) error { return run(ctx, env, c.s) })
		},
	}
	c.bind(cmd.Flags())
	c.bindProcess(cmd.Flags(), listen)
	if worker {
		c.bindWorker(cmd.Flags())
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
		return fn(ctx, env)
	})
}

// run prepares the flags (environment, logger) and calls fn with a context that ends on
// SIGINT or SIGTERM.
func (c *common) run(cmd *cobra.Command, fn func(ctx context.Context, log zerolog.Logger) error) error {
	if err := c.prepare(cmd); err != nil {
		return err
	}
	log, err := app.Logger(c.s.LogFormat, cmd.ErrOrStderr())
	if err != nil {
		return usageError{err}
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return fn(ctx, log)
}
