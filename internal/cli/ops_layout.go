package cli

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/watukuy/watukuy"
)

// requireLayout refuses a database whose data layout is not this build's: a newer one may
// mean things this build would misread, an older one needs `watukuy migrate` first. An empty
// database is fine (there is simply nothing to show).
func requireLayout(ctx context.Context, eng *watukuy.Engine) error {
	l, err := eng.Layout(ctx)
	if err != nil {
		return fmt.Errorf("read the data layout: %w", err)
	}
	return l.Err()
}

func migrateCmd() *cobra.Command {
	o := &op{}
	return o.command(opSpec{
		use:   "migrate",
		short: "Upgrade the Redis data layout in place (idempotent)",
		long: `migrate upgrades the data layout of the Redis database to the one this build writes, in
place, and records it. Every step is idempotent: running it again, or after an interruption, is
safe. Workers of this build refuse an older layout until it has run.`,
		keys:      noKeys,
		anyLayout: true,
		run: func(ctx context.Context, eng *watukuy.Engine) error {
			m, err := eng.Migrate(ctx)
			if err != nil {
				return err
			}
			if o.asJSON {
				return writeJSON(o.out, m)
			}
			if m.From == m.To && len(m.Steps) == 0 {
				_, err := fmt.Fprintf(o.out, "already at layout %d: nothing to do\n", m.To)
				return err
			}
			from := strconv.Itoa(m.From)
			if m.From == 0 {
				from = "none (empty database)"
			}
			fmt.Fprintf(o.out, "migrated the data layout: %s → %d\n", from, m.To)
			for _, s := range m.Steps {
				fmt.Fprintf(o.out, "  %s\n", s)
			}
			return nil
		},
	})
}
