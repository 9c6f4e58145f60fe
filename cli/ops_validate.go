package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/app"
	"github.com/watukuy/watukuy/internal/config"
)

// pollerSummary is one poller of a validated config.
type pollerSummary struct {
	Name         string   `json:"name"`
	Strategy     string   `json:"strategy"`
	Partitions   []string `json:"partitions"`
	Schedule     string   `json:"schedule"`
	Delivery     string   `json:"delivery"`
	Shadow       bool     `json:"shadow"`
	LogRetention string   `json:"logRetention,omitempty"`
}

func summarize(pc config.Poller) pollerSummary {
	ps := pollerSummary{Name: pc.Name, Strategy: pc.Cursor.Strategy, Partitions: pc.Partitions, Shadow: pc.Shadow}
	if ps.Partitions == nil {
		ps.Partitions = []string{}
	}
	d := func(x time.Duration) string {
		if x == 0 {
			return "default"
		}
		return x.String()
	}
	switch sc := pc.Schedule; {
	case sc.Adaptive != nil && !*sc.Adaptive:
		ps.Schedule = "fixed " + d(sc.Min)
	case sc.Min == 0 && sc.Max == 0:
		ps.Schedule = "default"
	default:
		ps.Schedule = d(sc.Min) + ".." + d(sc.Max)
	}
	switch dl := pc.Delivery; {
	case dl.Webhook != nil:
		ps.Delivery = "webhook " + dl.Webhook.URL
	case dl.Stream != nil:
		ps.Delivery = "stream " + dl.Stream.Key
	default:
		ps.Delivery = "stdout"
	}
	if pc.Delivery.Poison == config.PoisonHalt {
		ps.Delivery += " (poison: halt)"
	}
	if pc.Log != nil && pc.Log.Retention > 0 {
		ps.LogRetention = pc.Log.Retention.String()
	}
	return ps
}

// probeReport is one poller's probe in validate's output.
type probeReport struct {
	Poller    string               `json:"poller"`
	Partition string               `json:"partition"`
	Result    *watukuy.ProbeResult `json:"result,omitempty"`
	Error     string               `json:"error,omitempty"`
}

func validateCmd() *cobra.Command {
	o := &op{}
	var probe bool
	cmd := &cobra.Command{
		Use:   "validate [--config F] [--probe]",
		Short: "Check a config file; with --probe, fetch each poller's first page and show what the engine would see",
		Long: `validate loads the config file and builds every poller (errors name file:line and the field),
then lists the pollers. With --probe it fetches the first page of each poller's first partition
and prints every item's identity, version and fingerprint, or why it would be parked as invalid,
with the next cursor. It writes nothing and needs no Redis. It exits 1 when the config is
invalid or a probe request fails; invalid items are reported, not fatal.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.out = cmd.OutOrStdout()
			return o.run(cmd, func(ctx context.Context, log zerolog.Logger) error { return o.validate(ctx, log, probe) })
		},
	}
	o.bindOperator(cmd.Flags())
	o.bindJSON(cmd.Flags())
	cmd.Flags().BoolVar(&probe, "probe", false, "fetch the first page of every poller (writes nothing)")
	cmdLineOnly(cmd.Flags(), "probe")
	return cmd
}

func (o *op) validate(ctx context.Context, log zerolog.Logger, probe bool) error {
	cfg, err := config.Load(o.s.Config, nil)
	if err != nil {
		if !o.s.ConfigGiven {
			err = fmt.Errorf("%w (pass --config FILE)", err)
		}
		return err
	}
	// No Redis client: only the stream sink would use it, and only when delivering.
	pollers, err := app.Build(cfg, nil, io.Discard, log)
	if err != nil {
		return err
	}
	sums := make([]pollerSummary, len(cfg.Pollers))
	for i, pc := range cfg.Pollers {
		sums[i] = summarize(pc)
	}
	var probes []probeReport
	failed, invalid, items := 0, 0, 0
	if probe {
		for _, p := range pollers {
			part := ""
			if len(p.Partitions) > 0 {
				part = p.Partitions[0]
			}
			pr := probeReport{Poller: p.Name, Partition: part}
			res, err := watukuy.Probe(ctx, p, part)
			if err != nil {
				pr.Error = err.Error()
				failed++
			} else {
				pr.Result = &res
				invalid += res.Invalid
				items += len(res.Items)
			}
			probes = append(probes, pr)
		}
	}
	var result error
	if failed > 0 {
		result = fmt.Errorf("%d of %d probe(s) failed: check the URL, the credentials and that the API answers", failed, len(probes))
	}
	if o.asJSON {
		if err := writeJSON(o.out, struct {
			File    string          `json:"file"`
			OK      bool            `json:"ok"`
			Pollers []pollerSummary `json:"pollers"`
			Probes  []probeReport   `json:"probes,omitempty"`
		}{cfg.File, failed == 0, sums, probes}); err != nil {
			return err
		}
		return result
	}
	t := newTable(o.out, "NAME", "STRATEGY", "PARTITIONS", "SCHEDULE", "DELIVERY", "SHADOW", "LOG")
	for _, s := range sums {
		t.row(s.Name, s.Strategy, strings.Join(s.Partitions, ","), s.Schedule, s.Delivery, yesNo(s.Shadow), s.LogRetention)
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintf(o.out, "config OK: %d poller(s) in %s\n", len(sums), cfg.File)
	for _, pr := range probes {
		fmt.Fprintf(o.out, "\nprobe %s:", keyName(pr.Poller, pr.Partition))
		if pr.Error != "" {
			fmt.Fprintf(o.out, " FAILED: %s\n", strings.TrimPrefix(pr.Error, "watukuy: probe "+watukuy.Key{Poller: pr.Poller, Partition: pr.Partition}.Describe()+": ")) // the line names the key
			continue
		}
		res := pr.Result
		fmt.Fprintf(o.out, " %d items, %d invalid, next cursor %q, hasMore %s", len(res.Items), res.Invalid, res.Next, yesNo(res.HasMore))
		if res.NotModified {
			fmt.Fprint(o.out, ", not modified")
		}
		fmt.Fprintln(o.out)
		t := newTable(o.out, "IDENTITY", "VERSION", "FINGERPRINT", "ISSUE")
		for _, it := range res.Items {
			fp := clip(it.Fingerprint, 17)
			if it.Tombstone {
				fp = "(tombstone)"
			}
			t.row(it.Identity, it.Version, fp, it.Issue)
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	if probe {
		fmt.Fprintf(o.out, "\nprobed %d poller(s): %d items, %d invalid", len(probes), items, invalid)
		if invalid > 0 {
			fmt.Fprint(o.out, " (workers would park them as invalid: see ISSUE)")
		}
		fmt.Fprintf(o.out, ", %d failed\n", failed)
	}
	return result
}
