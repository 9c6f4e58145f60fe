package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/httppoll"
	"github.com/watukuy/watukuy/internal/app"
	"github.com/watukuy/watukuy/internal/command"
	"github.com/watukuy/watukuy/internal/config"
	"github.com/watukuy/watukuy/internal/sink"
	"github.com/watukuy/watukuy/watukuytype"
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
	ps.Delivery = pc.Delivery.Describe()
	if pc.Delivery.Poison == config.PoisonHalt {
		ps.Delivery += " (poison: halt)"
	}
	if pc.Log != nil && pc.Log.Retention > 0 {
		ps.LogRetention = pc.Log.Retention.String()
	}
	return ps
}

// probeReport is one poller's probe in validate's output. A probe fails with Error (the
// request failed) or Problem (the page came back, but the poller would lose or stall on it);
// Hint says what to do about either.
type probeReport struct {
	Poller    string                   `json:"poller"`
	Partition string                   `json:"partition"`
	Result    *watukuytype.ProbeResult `json:"result,omitempty"`
	// Listings estimates the pages and cycles of the poller's complete listings.
	Listings []watukuytype.ListingEstimate `json:"listings,omitempty"`
	Error    string                        `json:"error,omitempty"`
	Problem  string                        `json:"problem,omitempty"`
	Hint     string                        `json:"hint,omitempty"`
	// Budget names the budget whose tokens the probe's requests took, or, with Untaken, the
	// one they did not (no Redis to take them from).
	Budget  string `json:"budget,omitempty"`
	Untaken bool   `json:"untaken,omitempty"`
}

// sinkProbe is a broker sink's probe in validate's output: it connected and found its target
// (Result), or says why not (Error).
type sinkProbe struct {
	Sink   string `json:"sink"`
	Target string `json:"target"`
	Result string `json:"result,omitempty"`
	Error  string `json:"error,omitempty"`
}

// failed reports whether the probe failed.
func (pr probeReport) failed() bool { return pr.Error != "" || pr.Problem != "" }

// requestHint says what to do about a probe request that failed with err.
func requestHint(err error) string {
	var he *watukuytype.HTTPError
	var je *httppoll.JSONError
	var ce *watukuytype.ConfigError
	switch {
	case errors.As(err, &he) && he.StatusCode == http.StatusTooManyRequests:
		wait := he.RetryAfter
		if wait == 0 && he.RateLimit != nil {
			wait = he.RateLimit.Reset
		}
		if wait > 0 {
			return fmt.Sprintf("the API rate limited the probe (HTTP 429): retry after %s", wait.Round(time.Second))
		}
		return "the API rate limited the probe (HTTP 429): retry in a while"
	case errors.As(err, &he) && (he.StatusCode == http.StatusUnauthorized || he.StatusCode == http.StatusForbidden):
		return fmt.Sprintf("the API refused the request (HTTP %d): check the credentials in request.headers or request.query", he.StatusCode)
	case errors.As(err, &he) && he.StatusCode == http.StatusNotFound:
		return "the API has no such endpoint (HTTP 404): check request.url"
	case errors.As(err, &he) && he.StatusCode >= 500:
		return fmt.Sprintf("the API failed (HTTP %d): check that it is up, then probe again", he.StatusCode)
	case errors.As(err, &he):
		return fmt.Sprintf("the API refused the request (HTTP %d): check request.url and request.query", he.StatusCode)
	case errors.As(err, &je):
		return "the answer is not JSON: check request.url (a login or error page answers HTML)"
	case errors.As(err, &ce):
		return fmt.Sprintf("check %s in the config", ce.Field)
	}
	return "check request.url and that the API answers"
}

// pageProblem says why a probed page that came back would still fail the poller: every item
// would be parked as invalid (the cursor moves past them without an event), or the cursor
// stalls after it. pc is the poller's config, for the keys to name.
func pageProblem(res watukuytype.ProbeResult, pc config.Poller) (problem, hint string) {
	if res.Stall != "" {
		hint = "set a tie-breaker (cursor.tieBreaker: the API's query parameter for the last identity at a time, e.g. after_id) or a page larger than the items that can share one time"
		if pc.Cursor.Limit > 0 {
			hint += fmt.Sprintf(" (cursor.limit, now %d)", pc.Cursor.Limit)
		}
		return "the cursor stalls: " + res.Stall, hint
	}
	if res.Repeated {
		hint = "give the listing its paging: cursor.param and cursor.sizeParam as the API names them, or cursor.size equal to the API's page size so a shorter page ends it"
		return fmt.Sprintf("the next page repeats the first (%s): the API ignores the paging parameter, so every cycle would read it again up to maxPagesPerCycle", plural(len(res.Items), "item")), hint
	}
	if len(res.Items) == 0 || res.Invalid < len(res.Items) {
		return "", ""
	}
	identity := pc.Identity
	if identity == "" {
		identity = "id"
	}
	if !slices.ContainsFunc(res.Items, func(it watukuytype.ProbeItem) bool { return it.Identity != "" }) {
		hint = "set identity to the gjson path of the field that names an item"
		if len(res.Fields) > 0 {
			hint += fmt.Sprintf(" (the first item has: %s)", strings.Join(res.Fields, ", "))
		}
		return fmt.Sprintf("no item has an identity at %q: every item would be parked as invalid", identity), hint
	}
	return fmt.Sprintf("every item would be parked as invalid (first: %s)", res.Items[0].Issue),
		"fix version, fingerprint or validation (see ISSUE), or the data"
}

func validateCmd() *cobra.Command {
	o := &op{}
	var probe bool
	probePages := 20
	cmd := &cobra.Command{
		Use:   "validate [--config F] [--probe]",
		Short: "Check a config file; with --probe, fetch each poller's first page and show what the engine would see",
		Long: `validate loads the config file and builds every poller (errors name file:line and the field),
then lists the pollers. With --probe it fetches the first page of each poller's first partition
and prints every item's identity, version and fingerprint, or why it would be parked as invalid,
with the next cursor; when more pages follow it asks for the next one too, to see whether the
cursor stalls there (a full page of items that share one change time). It also connects to each
broker sink (NATS, AMQP, PostgreSQL) and says whether its stream, exchange or table exists. It
writes nothing and needs no Redis; with a Redis URL (--redis, WATUKUY_REDIS_URL) a poller's
probe requests take their tokens from its shared budget, as the workers' requests do (without
one they take none, and the probe says so). It exits 1 when the config is invalid, a probe
request fails, the cursor stalls, a broker sink cannot be reached or lacks its target, or
every item of a page would be parked as invalid (a wrong identity path); some invalid items
are reported, not fatal.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.out = cmd.OutOrStdout()
			return o.Run(cmd, func(ctx context.Context, log zerolog.Logger) error { return o.validate(ctx, log, probe, probePages) })
		},
	}
	o.BindOperator(cmd.Flags())
	o.bindJSON(cmd.Flags())
	cmd.Flags().BoolVar(&probe, "probe", false, "fetch the first page of every poller (writes nothing)")
	cmd.Flags().IntVar(&probePages, "probe-pages", probePages, "with --probe, the pages of a complete listing (snapshotDiff, reconcile) read to estimate its pages and cycles")
	command.CmdLineOnly(cmd.Flags(), "probe")
	return cmd
}

func (o *op) validate(ctx context.Context, log zerolog.Logger, probe bool, probePages int) error {
	cfg, err := config.Load(o.S.Config, nil)
	if err != nil {
		if !o.S.ConfigGiven {
			err = fmt.Errorf("%w (pass --config FILE)", err)
		}
		return err
	}
	// No Redis client: only the stream sink would use it, and only when delivering. The
	// broker sinks connect only for their probe.
	var brokers sink.Brokers
	defer brokers.Close()
	pollers, err := app.Build(cfg, nil, io.Discard, &brokers, log)
	if err != nil {
		return err
	}
	sums := make([]pollerSummary, len(cfg.Pollers))
	for i, pc := range cfg.Pollers {
		sums[i] = summarize(pc)
	}
	var probes []probeReport
	failed, invalid, items := 0, 0, 0
	// With a Redis URL the probe's requests take their tokens from the budgets the workers
	// share; without one they take none, and the report says so.
	probeOne, probeListing := watukuy.Probe, watukuy.ProbeListing
	if probe && o.S.Redis != "" {
		env, err := app.Open(ctx, o.S, log)
		if err != nil {
			return fmt.Errorf("connect to take the probe's budget tokens: %w", err)
		}
		defer env.Close()
		probeOne, probeListing = env.Engine.Probe, env.Engine.ProbeListing
	}
	if probe {
		for i, p := range pollers {
			part := ""
			if len(p.Partitions) > 0 {
				part = p.Partitions[0]
			}
			pr := probeReport{Poller: p.Name, Partition: part, Budget: p.Budget, Untaken: p.Budget != "" && o.S.Redis == ""}
			res, err := probeOne(ctx, p, part)
			if err != nil {
				pr.Error, pr.Hint = err.Error(), requestHint(err)
			} else {
				pr.Result = &res
				pr.Problem, pr.Hint = pageProblem(res, cfg.Pollers[i])
				invalid += res.Invalid
				items += len(res.Items)
				if pr.Problem == "" && probePages > 0 {
					if pr.Listings, err = probeListing(ctx, p, part, probePages); err != nil {
						pr.Error, pr.Hint = err.Error(), requestHint(err)
					}
				}
			}
			if pr.failed() {
				failed++
			}
			probes = append(probes, pr)
		}
	}
	var sinks []sinkProbe
	if probe {
		for _, b := range brokers.All() {
			sp := sinkProbe{Sink: b.Kind(), Target: b.Target()}
			if sp.Result, err = b.Probe(ctx); err != nil {
				sp.Error = err.Error()
				failed++
			}
			sinks = append(sinks, sp)
		}
	}
	var result error
	if failed > 0 {
		result = fmt.Errorf("%d of %d probe(s) failed: see each probe's hint", failed, len(probes)+len(sinks))
		if failed == 1 {
			for _, pr := range probes {
				if pr.failed() {
					result = fmt.Errorf("%d of %d probe(s) failed: %s", failed, len(probes)+len(sinks), pr.Hint)
				}
			}
			for _, sp := range sinks {
				if sp.Error != "" {
					result = fmt.Errorf("%d of %d probe(s) failed: %s", failed, len(probes)+len(sinks), sp.Error)
				}
			}
		}
	}
	if o.asJSON {
		if err := writeJSON(o.out, struct {
			File    string          `json:"file"`
			OK      bool            `json:"ok"`
			Pollers []pollerSummary `json:"pollers"`
			Probes  []probeReport   `json:"probes,omitempty"`
			Sinks   []sinkProbe     `json:"sinks,omitempty"`
		}{cfg.File, failed == 0, sums, probes, sinks}); err != nil {
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
			fmt.Fprintf(o.out, " FAILED: %s\n  hint: %s\n", strings.TrimPrefix(pr.Error, "watukuy: probe "+watukuytype.Key{Poller: pr.Poller, Partition: pr.Partition}.Describe()+": "), pr.Hint) // the line names the key
			continue
		}
		res := pr.Result
		fmt.Fprintf(o.out, " %s, %d invalid, next cursor %q, hasMore %s", plural(len(res.Items), "item"), res.Invalid, res.Next, yesNo(res.HasMore))
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
		for _, l := range pr.Listings {
			fmt.Fprintf(o.out, "%s listing: %s\n", l.Lane, listingEstimateText(l))
		}
		switch {
		case pr.Untaken:
			fmt.Fprintf(o.out, "note: its requests took no token of budget %q (no Redis URL): pass --redis or set WATUKUY_REDIS_URL to take them from the workers' shared budget\n", pr.Budget)
		case pr.Budget != "":
			fmt.Fprintf(o.out, "its requests took their tokens from budget %q, shared with the workers\n", pr.Budget)
		}
		if pr.Problem != "" {
			fmt.Fprintf(o.out, "FAILED: %s\n  hint: %s\n", pr.Problem, pr.Hint)
		}
		if pr.Error != "" {
			fmt.Fprintf(o.out, "FAILED: %s\n  hint: %s\n", pr.Error, pr.Hint)
		}
	}
	for _, sp := range sinks {
		if sp.Error != "" {
			fmt.Fprintf(o.out, "\nsink %s %s FAILED: %s\n", sp.Sink, sp.Target, sp.Error)
		} else {
			fmt.Fprintf(o.out, "\nsink %s %s: %s\n", sp.Sink, sp.Target, sp.Result)
		}
	}
	if probe {
		fmt.Fprintf(o.out, "\nprobed %d poller(s): %s, %d invalid", len(probes), plural(items, "item"), invalid)
		if invalid > 0 {
			fmt.Fprint(o.out, " (workers would park them as invalid: see ISSUE)")
		}
		if len(sinks) > 0 {
			fmt.Fprintf(o.out, ", %s", plural(len(sinks), "sink"))
		}
		fmt.Fprintf(o.out, ", %d failed\n", failed)
	}
	return result
}

// listingEstimateText says how long a probed listing takes.
func listingEstimateText(l watukuytype.ListingEstimate) string {
	if l.Complete {
		return fmt.Sprintf("%s, %s: %s at %d pages a cycle", plural(l.Pages, "page"), plural(l.Items, "item"), plural(l.Cycles, "cycle"), l.PagesPerCycle)
	}
	return fmt.Sprintf("more than %s (%s read): at least %s at %d pages a cycle (--probe-pages reads further)",
		plural(l.Pages, "page"), plural(l.Items, "item"), plural(l.Cycles, "cycle"), l.PagesPerCycle)
}
