// Command watukuy is the operator's CLI (package cli): the operator commands, the demo,
// chaos and bench, and the worker and scheduler as subcommands.
package main

import (
	"github.com/watukuy/watukuy/internal/cli"
	"github.com/watukuy/watukuy/internal/command"
)

func main() { command.Execute(cli.Root()) }
