// Package cli is the watukuy command tree: the operator commands, dev (the demo on an
// embedded Redis), run, tick, chaos and bench, beside the process commands of package command
// (worker, scheduler). cmd/cli is a thin main over it.
//
// The operator commands share ops.go (their flags, the keys they act on, status output, and
// trigger, pause and resume); each other command group has its own file: ops_inspect.go,
// ops_backfill.go, ops_replay.go (replay, reset-cursor), ops_parked.go, ops_partitions.go,
// ops_layout.go (migrate and the layout check) and ops_validate.go.
package cli

import (
	"github.com/spf13/cobra"

	"github.com/watukuy/watukuy/internal/command"
)

// Root returns the watukuy command.
func Root() *cobra.Command {
	root := command.NewRoot("watukuy", "Turn third-party HTTP APIs without webhooks into reliable change streams")
	root.AddCommand(devCmd(), command.RunCmd(), tickCmd(), chaosCmd(), benchCmd(), command.WorkerCmd("worker"), command.SchedulerCmd("scheduler"))
	root.AddCommand(opsCmds()...)
	root.AddCommand(command.VersionCmd())
	return command.WithHelp(command.WithVersion(root), examples())
}
