// Command watukuy-scheduler is a thin main over package cli.
package main

import "github.com/watukuy/watukuy/cli"

func main() { cli.Execute(cli.Scheduler()) }
