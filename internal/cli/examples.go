package cli

// examples are the Examples sections of the CLI's own commands' --help, by command path
// after the root's name (docs/operations.md, one command each); the process commands have theirs
// in package command.
func examples() map[string]string {
	return map[string]string{
		"dev": `  watukuy dev                              # the demo: embedded Redis, a fake shop API, events as lines
  watukuy dev --config watukuy.yaml        # your pollers on an embedded Redis
  watukuy dev --redis redis://127.0.0.1:6379/0 --ui`,
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
	}
}
