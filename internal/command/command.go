// Package command is what every watukuy binary's command line shares: running a command
// (exit codes, usage errors), the flags every command takes and their environment
// variables, --help's sections, --version, and the long-running processes' commands
// (worker, scheduler, run). cmd/worker and cmd/scheduler are thin mains over it; the watukuy
// CLI (internal/cli) mounts the same commands beside its own, so a worker's or scheduler's
// binary links none of the CLI's demo, chaos or bench harness.
//
// Every setting flag can also be set in the environment as WATUKUY_<FLAG> (dashes become
// underscores); --redis also reads WATUKUY_REDIS_URL. A flag beats the environment, which
// beats the config file. The flags that say what an operator command acts on (--poller,
// --partition, --ids, --yes, --from, --to, ...) are read from the command line only: a
// forgotten WATUKUY_YES must never confirm a delete.
//
// Exit codes: 0 success, 1 the operation failed, 2 a usage error (a missing or invalid flag,
// an unknown command, an unknown poller or partition).
package command

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/watukuy/watukuy/watukuytype"
)

// Exit codes.
const (
	ExitOK     = 0
	ExitFailed = 1
	ExitUsage  = 2
)

// usageError marks a command-line mistake (exit code 2).
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// Usage marks err as a command-line mistake.
func Usage(err error) error { return usageError{err} }

// Usagef is a usage error with a message.
func Usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// flagError turns cobra's flag parsing errors into usage errors.
func flagError(_ *cobra.Command, err error) error { return usageError{err} }

// Execute runs cmd with the process arguments and exits with ExitCode. Errors go to stderr.
func Execute(cmd *cobra.Command) {
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	cmd.SetFlagErrorFunc(flagError)
	ran, err := cmd.ExecuteC()
	code := ExitCode(err)
	if err != nil {
		// Engine errors already start with "watukuy: ".
		fmt.Fprintln(os.Stderr, "watukuy:", strings.TrimPrefix(err.Error(), "watukuy: "))
	}
	if code == ExitUsage && !isNotFound(err) { // a not-found error already lists what exists
		fmt.Fprintf(os.Stderr, "Run '%s --help' for usage.\n", ran.CommandPath())
	}
	os.Exit(code)
}

// ExitCode maps a command's error to the process exit code: 0 on success, 2 for a usage
// error (flags, unknown command, unknown poller or partition), 1 for anything else.
func ExitCode(err error) int {
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
	var nf *watukuytype.NotFoundError
	return errors.As(err, &nf)
}

// NewRoot is a root command: bad flags of it and of its subcommands are usage errors.
func NewRoot(use, short string) *cobra.Command {
	root := &cobra.Command{Use: use, Short: short}
	root.SetFlagErrorFunc(flagError) // subcommands inherit it
	return root
}
