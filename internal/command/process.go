package command

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/watukuy/watukuy/internal/app"
)

// Worker returns the watukuy-worker command.
func Worker() *cobra.Command {
	return WithHelp(WithVersion(WorkerCmd("watukuy-worker")), nil)
}

// Scheduler returns the watukuy-scheduler command.
func Scheduler() *cobra.Command {
	return WithHelp(WithVersion(SchedulerCmd("watukuy-scheduler")), nil)
}

// WorkerCmd runs cycles from the asynq queue; use is its name (watukuy-worker, or worker
// under the CLI).
func WorkerCmd(use string) *cobra.Command {
	return processCmd(use, "Run cycles from the asynq queue (scale by starting more)", "127.0.0.1:9090", true, false, app.RunWorker)
}

// SchedulerCmd moves due keys into asynq tasks; use is its name.
func SchedulerCmd(use string) *cobra.Command {
	return processCmd(use, "Move due keys into asynq tasks (several may run at once)", "127.0.0.1:9091", false, true, app.RunScheduler)
}

// RunCmd runs a scheduler and a worker in one process.
func RunCmd() *cobra.Command {
	return processCmd("run", "Run a scheduler and a worker in one process against a Redis URL", "127.0.0.1:9090", true, true, app.RunAll)
}

// processCmd is a long-lived process: it opens the environment and runs until a signal.
func processCmd(use, short, listen string, worker, claims bool, run func(context.Context, *app.Env, app.Settings) error) *cobra.Command {
	c := &Flags{}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.WithEnv(cmd, func(ctx context.Context, env *app.Env) error {
				defer ReloadOnHUP(ctx, env)() // SIGHUP re-reads --config
				return run(ctx, env, c.S)
			})
		},
	}
	c.Bind(cmd.Flags(), "json")
	c.BindProcess(cmd.Flags(), listen)
	if worker {
		c.BindWorker(cmd.Flags())
	}
	if claims {
		c.BindClaim(cmd.Flags())
	}
	return cmd
}
