package command

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/watukuy/watukuy/internal/app"
)

const (
	envPrefix   = "WATUKUY_"
	defaultConf = "./watukuy.yaml"
)

// Flags holds the flags shared by every command: the process settings and --json.
type Flags struct {
	S app.Settings
	// JSON is --json of a long-running process: JSON logs (and, in dev, events as JSON lines).
	JSON bool
}

// Bind binds the flags every command takes; logFormat is the command's default log format:
// json for the processes a log collector reads, console for the commands people run.
func (c *Flags) Bind(fs *pflag.FlagSet, logFormat string) {
	fs.StringVar(&c.S.Redis, "redis", "", "Redis URL (redis://, rediss://, unix://, redis+cluster://); env WATUKUY_REDIS_URL")
	fs.StringVar(&c.S.Config, "config", defaultConf, "config file with the pollers")
	fs.StringVar(&c.S.Prefix, "prefix", "", "Redis key prefix (default wk, or prefix: in the config)")
	fs.StringVar(&c.S.LogFormat, "log-format", logFormat, "log format: json or console")
	fs.StringVar(&c.S.LogLevel, "log-level", "info", "least severe log level shown: debug (one line per HTTP request), info, warn or error")
}

// BindOperator binds the common flags of an operator command: it logs for people (console on
// stderr, never a JSON line above a table), and reads ./watukuy.yaml only for a Redis URL
// the flags and environment lack (app.Settings.ConfigOnDemand): pollers come from the
// registry, and the file may name variables only the workers have.
func (c *Flags) BindOperator(fs *pflag.FlagSet) {
	c.Bind(fs, "console")
	c.S.ConfigOnDemand = true
}

// BindProcess binds a long-running process's flags; listen is its default endpoint address.
func (c *Flags) BindProcess(fs *pflag.FlagSet, listen string) {
	fs.StringVar(&c.S.Listen, "listen", listen, "address of /healthz, /readyz, /metrics (and /monitoring with --ui); off disables")
	fs.BoolVar(&c.S.UI, "ui", false, "serve asynqmon at /monitoring")
	fs.BoolVar(&c.S.AllowEviction, "allow-eviction", false, "start even when Redis maxmemory-policy is not noeviction")
	fs.StringVar(&c.S.InstanceID, "instance-id", "", "name of this process in leases (default host-pid-random)")
	fs.BoolVar(&c.JSON, "json", false, "JSON logs (the same as --log-format json)")
}

// BindClaim is --claim-timeout, for the processes that claim keys (scheduler, run, tick).
func (c *Flags) BindClaim(fs *pflag.FlagSet) {
	fs.DurationVar(&c.S.ClaimTimeout, "claim-timeout", 0,
		"how long a claim holds a key until its cycle's lease keeper holds it on (0: the poller's lease TTL + 2s, so a key whose cycle died is claimed again once its lease lapses); a scheduler holds a key 1s until its task is enqueued, then this long")
}

// BindWorker binds a worker's flags: its concurrency, its drain and the cycles' own.
func (c *Flags) BindWorker(fs *pflag.FlagSet) {
	fs.IntVar(&c.S.Concurrency, "concurrency", 10, "cycles run at once")
	fs.DurationVar(&c.S.Drain, "drain-timeout", app.DefaultDrain, "on SIGTERM running cycles stop at their next step and hand their keys back; those still running after this long are cancelled")
	c.BindCycles(fs)
}

// BindCycles is what every process that runs cycles takes (worker, run, dev, tick).
func (c *Flags) BindCycles(fs *pflag.FlagSet) {
	fs.IntVar(&c.S.WaitReplicas, "wait-replicas", 0,
		"deliver events only once this many Redis replicas have their commit (WAIT): set it to 1 or more with replicas and failover, so a failover never loses a commit whose events were delivered")
}

// noEnvAnnotation marks a flag that fromEnv leaves alone.
const noEnvAnnotation = "watukuy_no_env"

// CmdLineOnly marks flags that name what a command acts on: they come from the command line
// only, never from the environment.
func CmdLineOnly(fs *pflag.FlagSet, names ...string) {
	for _, n := range names {
		_ = fs.SetAnnotation(n, noEnvAnnotation, []string{"true"})
	}
}

// IsCmdLineOnly reports whether f was marked by CmdLineOnly.
func IsCmdLineOnly(f *pflag.Flag) bool { return f.Annotations[noEnvAnnotation] != nil }

// envNames are the environment variables a setting flag reads, first match wins:
// WATUKUY_<FLAG>, and for --redis WATUKUY_REDIS_URL before it.
func envNames(f *pflag.Flag) []string {
	n := envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
	if f.Name == "redis" {
		return []string{envPrefix + "REDIS_URL", n}
	}
	return []string{n}
}

// FromEnv fills every setting flag not given on the command line from WATUKUY_<FLAG>.
func FromEnv(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Changed || err != nil || IsCmdLineOnly(f) {
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
func (c *Flags) prepare(cmd *cobra.Command) error {
	if err := FromEnv(cmd); err != nil {
		return err
	}
	if f := cmd.Flags().Lookup("config"); f != nil {
		c.S.ConfigGiven = f.Changed
	}
	if c.JSON {
		if f := cmd.Flags().Lookup("log-format"); f != nil && f.Changed && c.S.LogFormat != "json" {
			return Usagef("--json and --log-format %s contradict each other: drop one", c.S.LogFormat)
		}
		c.S.LogFormat = "json"
	}
	c.S.Out = cmd.OutOrStdout()     // the stdout sink writes where the command does
	c.S.Service = cmd.Root().Name() // the traces' service.name: watukuy, watukuy-worker, watukuy-scheduler
	return nil
}

// WithEnv runs fn with the environment opened (config, Redis, engine) and closes it afterwards.
func (c *Flags) WithEnv(cmd *cobra.Command, fn func(ctx context.Context, env *app.Env) error) error {
	return c.Run(cmd, func(ctx context.Context, log zerolog.Logger) error {
		env, err := app.Open(ctx, c.S, log)
		if err != nil {
			return err
		}
		defer env.Close()
		defer env.FlushTraces()
		return fn(ctx, env)
	})
}

// Run prepares the flags (environment, logger) and calls fn with a context that ends on
// SIGINT or SIGTERM.
func (c *Flags) Run(cmd *cobra.Command, fn func(ctx context.Context, log zerolog.Logger) error) error {
	if err := c.prepare(cmd); err != nil {
		return err
	}
	log, err := app.Logger(c.S.LogFormat, c.S.LogLevel, cmd.ErrOrStderr())
	if err != nil {
		return usageError{err}
	}
	app.RouteRedisLogs(log)
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return fn(ctx, log)
}
