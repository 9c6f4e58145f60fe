package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/httppoll"
	"github.com/watukuy/watukuy/internal/app"
	"github.com/watukuy/watukuy/internal/command"
	"github.com/watukuy/watukuy/internal/config"
	"github.com/watukuy/watukuy/watukuytype"
)

// opsCmds returns the operator commands for Root. inspect, trigger, pause, resume, backfill,
// replay, reset-cursor, parked, partitions and migrate need only a Redis URL: pollers and
// partitions come from the registry the workers write. --config adds the poller definitions,
// which only retrying an invalid parked row needs. validate reads a config file and needs no
// Redis.
func opsCmds() []*cobra.Command {
	return []*cobra.Command{
		inspectCmd(),
		keyOpCmd("trigger", "Make keys due now (an open circuit gets its probe)", "triggered", "due now; a scheduler hands them to a worker at once",
			(*watukuy.Engine).Trigger),
		keyOpCmd("pause", "Stop keys' requests and deliveries until resume", "paused", "no request and no delivery until `watukuy resume`",
			(*watukuy.Engine).Pause),
		keyOpCmd("resume", "Lift a pause (or a partitions remove); the keys are due at once", "resumed", "due now, from their last cursor",
			(*watukuy.Engine).Resume),
		backfillCmd(), replayCmd(), resetCursorCmd(), parkedCmd(), partitionsCmd(), migrateCmd(), validateCmd(),
	}
}

// keyFlags says which of --poller and --partition an operator command takes.
type keyFlags int

const (
	noKeys     keyFlags = iota // migrate, validate
	anyKeys                    // inspect, parked ls: both optional; --partition needs --poller
	pollerKeys                 // --poller required; --partition optional (default: every partition)
	pollerOnly                 // --poller required; no --partition
	oneKey                     // --poller and --partition required
)

// op is what every operator command shares: the common flags, --json and the key it acts on.
type op struct {
	command.Flags
	asJSON         bool
	poller         string
	partition      string
	partitionGiven bool // --partition "" (or -) names the key of an unpartitioned poller
	cmd            *cobra.Command
	out, errOut    io.Writer
	// cfg is the config file when one was loaded: what the registry does not say about a
	// poller (its cursor strategy, its request) comes from there.
	cfg *config.Config
}

// opSpec describes one operator command.
type opSpec struct {
	use, short, long string
	keys             keyFlags
	// flags binds the command's own flags; they are read from the command line only.
	flags func(fs *pflag.FlagSet)
	// check validates the command's flags before anything is opened: a usage error needs no
	// Redis.
	check func(cmd *cobra.Command) error
	// anyLayout skips the data layout check (migrate).
	anyLayout bool
	run       func(ctx context.Context, eng *watukuy.Engine) error
}

// command builds the cobra command of an operator command. It opens the environment with
// eviction allowed: reading and steering keys is safe whatever the maxmemory-policy, and
// refusing would lock the operator out when it matters most (Open still warns).
func (o *op) command(s opSpec) *cobra.Command {
	o.S.AllowEviction = true
	cmd := &cobra.Command{
		Use:   s.use,
		Short: s.short,
		Long:  s.long,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.cmd = cmd
			if err := o.checkKeys(cmd, s.keys); err != nil {
				return err
			}
			if s.check != nil {
				if err := s.check(cmd); err != nil {
					return err
				}
			}
			o.out, o.errOut = cmd.OutOrStdout(), cmd.ErrOrStderr()
			return o.WithEnv(cmd, func(ctx context.Context, env *app.Env) error {
				o.cfg = env.Config
				if !s.anyLayout {
					if err := requireLayout(ctx, env.Engine); err != nil {
						return err
					}
				}
				return s.run(ctx, env.Engine)
			})
		},
	}
	fs := cmd.Flags()
	o.BindOperator(fs)
	o.bindJSON(fs)
	switch s.keys {
	case anyKeys:
		fs.StringVar(&o.poller, "poller", "", "one poller (default: every poller)")
		fs.StringVar(&o.partition, "partition", "", `one partition of --poller ("" or - for an unpartitioned poller; default: every partition)`)
	case pollerKeys:
		fs.StringVar(&o.poller, "poller", "", "poller to act on (required)")
		fs.StringVar(&o.partition, "partition", "", `one partition of --poller ("" or - for an unpartitioned poller; default: every partition)`)
	case pollerOnly:
		fs.StringVar(&o.poller, "poller", "", "poller (required)")
	case oneKey:
		fs.StringVar(&o.poller, "poller", "", "poller (required)")
		fs.StringVar(&o.partition, "partition", "", `partition (required; "" or - for an unpartitioned poller)`)
	}
	command.CmdLineOnly(fs, "poller", "partition")
	if s.flags != nil {
		own := pflag.NewFlagSet(s.use, pflag.ContinueOnError)
		s.flags(own)
		own.VisitAll(func(f *pflag.Flag) { command.CmdLineOnly(own, f.Name) })
		fs.AddFlagSet(own)
	}
	return cmd
}

func (o *op) bindJSON(fs *pflag.FlagSet) {
	fs.BoolVar(&o.asJSON, "json", false, "print machine-readable JSON instead of tables")
}

// checkKeys validates --poller and --partition for the command's keyFlags. --partition -
// names the unpartitioned key, as the tables show it.
func (o *op) checkKeys(cmd *cobra.Command, kf keyFlags) error {
	o.partitionGiven = cmd.Flags().Changed("partition")
	if o.partition == "-" {
		o.partition = ""
	}
	switch kf {
	case anyKeys:
		if o.partitionGiven && o.poller == "" {
			return command.Usagef("--partition needs --poller")
		}
	case pollerKeys, pollerOnly:
		if o.poller == "" {
			return command.Usagef("--poller is required: name the poller (`watukuy inspect` lists them)")
		}
	case oneKey:
		if o.poller == "" || !o.partitionGiven {
			return command.Usagef("--poller and --partition are required (`watukuy partitions ls --poller P` lists the partitions)")
		}
	}
	return nil
}

// keys resolves --poller and --partition into the keys to act on: the named key, or every
// known partition of the poller (of every poller when --poller is not given either) but the
// deleted ones, which a config keeps listing and which take no operation. A named key that
// does not exist, or is deleted, is reported by the operation itself
// (*watukuy.NotFoundError).
func (o *op) keys(ctx context.Context, eng *watukuy.Engine) ([]watukuytype.Key, error) {
	var keys []watukuytype.Key
	err := o.each(ctx, eng, func(k watukuytype.Key) error {
		keys = append(keys, k)
		return nil
	})
	return keys, err
}

// named is the partition the command names: --partition's, or nil for every partition.
func (o *op) named() []string {
	if o.partitionGiven {
		return []string{o.partition}
	}
	return nil
}

// errFirstKey stops a walk over the keys after the first.
var errFirstKey = errors.New("first key")

// each calls fn with each key the command acts on (Engine.Each): --partition's, or every
// partition of --poller that is not deleted. It stops at fn's first error, saying how many
// keys before it were done.
func (o *op) each(ctx context.Context, eng *watukuy.Engine, fn func(watukuytype.Key) error) error {
	n, err := eng.Each(ctx, o.poller, o.named(), fn)
	if err == nil && n == 0 && o.poller != "" {
		return fmt.Errorf("poller %q has no partitions (all were deleted): add one with `watukuy partitions add --poller %s --partition NAME`", o.poller, o.poller)
	}
	return err
}

// configPoller is --poller's entry in the loaded config file; nil without a config file or
// when the file has no such poller (a Go-defined one, another deployment's).
func (o *op) configPoller() *config.Poller {
	if o.cfg == nil {
		return nil
	}
	for i := range o.cfg.Pollers {
		if o.cfg.Pollers[i].Name == o.poller {
			return &o.cfg.Pollers[i]
		}
	}
	return nil
}

// keyName renders a key for messages: "orders" for an unpartitioned poller, "orders|eu"
// otherwise.
func keyName(poller, partition string) string {
	if partition == "" {
		return poller
	}
	return poller + "|" + partition
}

// nullCursor reads a cursor flag: "null" is the empty cursor (the very beginning).
func nullCursor(v string) string {
	if v == "null" {
		return ""
	}
	return v
}

// keyStatus is one affected key in --json output.
type keyStatus struct {
	Poller    string `json:"poller"`
	Partition string `json:"partition"`
	Status    string `json:"status"`
}

// statuses inspects keys after an operation, for its report.
func statuses(ctx context.Context, eng *watukuy.Engine, keys []watukuytype.Key) ([]keyStatus, error) {
	out := make([]keyStatus, 0, len(keys))
	for _, k := range keys {
		ki, err := eng.Inspect(ctx, k)
		if err != nil {
			return out, err
		}
		out = append(out, keyStatus{Poller: k.Poller, Partition: k.Partition, Status: string(ki.Status)})
	}
	return out, nil
}

// printStatuses reports keys and their status: a table, or the --json array.
func (o *op) printStatuses(sts []keyStatus, summary string) error {
	if o.asJSON {
		return writeJSON(o.out, sts)
	}
	t := newTable(o.out, "POLLER", "PARTITION", "STATUS")
	for _, s := range sts {
		t.row(s.Poller, s.Partition, s.Status)
	}
	if err := t.flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(o.out, summary)
	return err
}

// keyOpCmd is trigger, pause or resume: the operation on every named key, then their status.
func keyOpCmd(use, short, done, effect string, fn func(*watukuy.Engine, context.Context, watukuytype.Key) error) *cobra.Command {
	o := &op{}
	return o.command(opSpec{
		use:   use + " --poller P [--partition X]",
		short: short,
		long:  short + ". Without --partition it acts on every partition of the poller.",
		keys:  pollerKeys,
		run: func(ctx context.Context, eng *watukuy.Engine) error {
			var keys []watukuytype.Key
			if err := o.each(ctx, eng, func(k watukuytype.Key) error {
				keys = append(keys, k)
				return fn(eng, ctx, k)
			}); err != nil {
				return err
			}
			sts, err := statuses(ctx, eng, keys)
			if err != nil {
				return err
			}
			return o.printStatuses(sts, fmt.Sprintf("%s %d key(s) of %s: %s", done, len(keys), o.poller, effect))
		},
	})
}

// flagSet reports whether a flag of the running command was given on the command line.
func (o *op) flagSet(name string) bool { return o.cmd.Flags().Changed(name) }

// timeHelp says what parseTime accepts, for flag help and errors.
const timeHelp = "an RFC 3339 time (2026-01-02T15:04:05Z), a date (2026-01-02, UTC), unix milliseconds, now, today, yesterday (midnight UTC), or a time ago (2h or -2h, 30m, 7d)"

// parseTime reads a time flag: RFC 3339, unix milliseconds, or what operatorTime reads.
func parseTime(flag, v string, now time.Time) (time.Time, error) {
	if t, err := httppoll.ParseTime(v, []string{"rfc3339", "epoch_ms"}); err == nil {
		return t, nil
	}
	if t, ok := operatorTime(v, now); ok {
		return t, nil
	}
	return time.Time{}, command.Usagef("--%s %q: want %s", flag, v, timeHelp)
}

// operatorTime reads the times an operator types that no API writes: a date (midnight UTC),
// now, today and yesterday (midnight UTC)
// and a time ago ("2h" and "-2h" both mean two hours before now; d is 24h).
func operatorTime(v string, now time.Time) (time.Time, bool) {
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, true
	}
	day := now.UTC().Truncate(24 * time.Hour)
	switch strings.ToLower(v) {
	case "now":
		return now, true
	case "today":
		return day, true
	case "yesterday":
		return day.Add(-24 * time.Hour), true
	}
	ago := strings.TrimPrefix(v, "-")
	if ago == "" || ago[len(ago)-1] < 'a' { // a bare number is a cursor or epoch, not a duration
		return time.Time{}, false
	}
	if days, ok := strings.CutSuffix(ago, "d"); ok {
		n, err := strconv.ParseFloat(days, 64)
		if err != nil || n < 0 {
			return time.Time{}, false
		}
		return now.Add(-time.Duration(n * 24 * float64(time.Hour))), true
	}
	d, err := time.ParseDuration(ago)
	if err != nil || d < 0 {
		return time.Time{}, false
	}
	return now.Add(-d), true
}

// needSubcommand is the RunE of a command group: without a subcommand it is a usage error
// (and with an unknown one cobra's NoArgs says so).
func needSubcommand(cmd *cobra.Command, _ []string) error {
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	return command.Usagef("%s needs a subcommand: %s", cmd.CommandPath(), strings.Join(names, ", "))
}
