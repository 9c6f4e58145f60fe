package cli

import (
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// examples are the Examples sections of the commands' --help, by command path after the
// root's name (the README's runbook, one command each).
func examples() map[string]string {
	return map[string]string{
		"dev": `  watukuy dev                              # the demo: embedded Redis, a fake shop API, events as lines
  watukuy dev --config watukuy.yaml        # your pollers on an embedded Redis
  watukuy dev --redis redis://127.0.0.1:6379/0 --ui`,
		"run": `  watukuy run --redis redis://127.0.0.1:6379/0 --config watukuy.yaml
  WATUKUY_REDIS_URL=redis://… watukuy run --poller orders --ui`,
		"worker": `  watukuy-worker --redis redis://127.0.0.1:6379/0 --config watukuy.yaml --concurrency 20
  kill -TERM <pid>                         # stops at the next step and hands its keys back`,
		"scheduler": `  watukuy-scheduler --redis redis://127.0.0.1:6379/0 --config watukuy.yaml`,
		"tick": `  watukuy tick --redis redis://127.0.0.1:6379/0 --config watukuy.yaml --max-duration 50s
  watukuy tick --poller orders --json      # for cron and serverless: exit 1 when a cycle failed`,
		"chaos": `  watukuy chaos --seed 1 --duration 30s                # in-process, embedded miniredis
  watukuy chaos --seed 1 --duration 30s --processes    # real processes and a real redis-server`,
		"validate": `  watukuy validate --config watukuy.yaml
  watukuy validate --config watukuy.yaml --probe       # fetch each poller's first page: identities, fingerprints, cursor`,
		"inspect": `  watukuy inspect --redis redis://127.0.0.1:6379/0
  watukuy inspect --poller orders --partition acme
  watukuy inspect --poller orders --json | jq '.[].lastError'
  watukuy inspect --poller orders --limit 100 --after 'orders|acme'`,
		"trigger": `  watukuy trigger --poller orders --partition acme
  watukuy trigger --poller orders                      # every partition of orders`,
		"pause":  `  watukuy pause --poller orders --partition acme`,
		"resume": `  watukuy resume --poller orders --partition acme`,
		"backfill": `  watukuy backfill --poller orders --partition acme --from 2026-11-01 --wait
  watukuy backfill --poller orders --from -24h --config watukuy.yaml   # a time ago; --config checks the cursor at once
  watukuy backfill --poller orders --from null --to null --force       # everything again, known items re-emitted`,
		"replay": `  watukuy replay --poller orders --partition acme --from 2026-11-28T00:00:00Z --to 2026-11-29T06:00:00Z
  watukuy replay --poller orders --partition acme --from 2h`,
		"reset-cursor": `  watukuy reset-cursor --poller orders --partition acme --cursor 2026-11-30T00:00:00Z
  watukuy reset-cursor --poller orders --partition acme --cursor null --clear-snapshot --yes`,
		"parked": `  watukuy parked ls --poller orders --kind poison`,
		"parked ls": `  watukuy parked ls --poller orders --kind poison --limit 20
  watukuy parked ls --poller orders --partition acme --json
  watukuy parked ls --poller orders --partition acme --limit 50 --after ev_0123abcd`,
		"parked retry": `  watukuy parked retry --poller orders --partition acme --ids ev_3f2a…,ev_9c1d…
  watukuy parked retry --poller orders --all --kind invalid --config watukuy.yaml`,
		"parked discard": `  watukuy parked discard --poller orders --partition acme --ids inv_51aa…
  watukuy parked discard --poller orders --all --kind poison`,
		"partitions":        `  watukuy partitions ls --poller tenants`,
		"partitions ls":     `  watukuy partitions ls --poller tenants`,
		"partitions add":    `  watukuy partitions add --poller tenants --partition acme --config watukuy.yaml`,
		"partitions remove": `  watukuy partitions remove --poller tenants --partition acme    # paused, state kept; resume brings it back`,
		"partitions delete": `  watukuy partitions delete --poller tenants --partition acme --yes`,
		"migrate":           `  watukuy migrate --redis redis://127.0.0.1:6379/0`,
		"version": `  watukuy version
  watukuy version --json`,
	}
}

// withHelp gives every command of the tree under root its Examples section and, for the
// commands with setting flags, an Environment section naming the variables they read.
func withHelp(root *cobra.Command) *cobra.Command {
	ex := examples()
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

// envOf names the environment variables c's setting flags read (fromEnv), or "".
func envOf(c *cobra.Command) string {
	var names []string
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Annotations[noEnvAnnotation] != nil || f.Name == "help" {
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
