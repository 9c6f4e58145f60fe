// Command watukuy (the CLI) is a thin main over package cli.
package main

import "github.com/watukuy/watukuy/cli"

func main() { cli.Execute(cli.Root()) }
