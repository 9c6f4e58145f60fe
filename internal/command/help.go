package command

import (
	"maps"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// processExamples are the Examples sections of the process commands' --help.
func processExamples() map[string]string {
	return map[string]string{
		"run": `  watukuy run --redis redis://127.0.0.1:6379/0 --config watukuy.yaml
  WATUKUY_REDIS_URL=redis://… watukuy run --poller orders --ui`,
		"worker": `  watukuy-worker --redis redis://127.0.0.1:6379/0 --config watukuy.yaml --concurrency 20
  kill -TERM <pid>                         # stops at the next step and hands its keys back`,
		"scheduler": `  watukuy-scheduler --redis redis://127.0.0.1:6379/0 --config watukuy.yaml`,
		"version": `  watukuy version
  watukuy version --json`,
	}
}

// WithHelp gives every command of the tree under root its Examples section (examples, by
// command path after the root's name, beside the process commands' own) and, for the
// commands with setting flags, an Environment section naming the variables they read.
func WithHelp(root *cobra.Command, examples map[string]string) *cobra.Command {
	ex := processExamples()
	maps.Copy(ex, examples)
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		path := strings.TrimPrefix(strings.TrimPrefix(c.CommandPath(), root.Name()), " ")
		if c == root {
			path = strings.TrimPrefix(root.Name(), "watukuy-") // the worker's and the scheduler's own binaries
		}
		if e, ok := ex[path]; ok {
			c.Example = e
		}
		if env := envOf(c); env != "" {
			long := c.Long
			if long == "" {
				long = c.Short + "."
			}
			c.Long = strings.TrimRight(long, "\n") + "\n\n" + env
		}
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
	return root
}

// envOf names the environment variables c's setting flags read (FromEnv), or "".
func envOf(c *cobra.Command) string {
	var names []string
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if IsCmdLineOnly(f) || f.Name == "help" {
			return
		}
		n := envNames(f)
		if len(n) > 1 {
			names = append(names, n[0]+" (or "+strings.Join(n[1:], ", ")+")")
		} else {
			names = append(names, n[0])
		}
	})
	if len(names) == 0 {
		return ""
	}
	return "Environment (a flag given beats it): " + strings.Join(names, ", ") + "."
}
