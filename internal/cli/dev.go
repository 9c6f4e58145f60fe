package cli

import (
	"context"
	crand "crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/watukuy/watukuy/admintoken"
	"github.com/watukuy/watukuy/httppoll"
	"github.com/watukuy/watukuy/internal/app"
	"github.com/watukuy/watukuy/internal/buildinfo"
	"github.com/watukuy/watukuy/internal/command"
	"github.com/watukuy/watukuy/internal/fakeapi"
	"github.com/watukuy/watukuy/internal/health"
	"github.com/watukuy/watukuy/watukuytype"
)

func devCmd() *cobra.Command {
	c := &command.Flags{}
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Everything in one process: embedded Redis, a demo shop API, scheduler, worker, asynqmon, metrics",
		Long: `dev runs watukuy end to end in one process: an embedded miniredis (or --redis), a fake shop
API whose orders and customers change every few seconds, the scheduler, a worker, asynqmon at
/monitoring and the metrics. Events print as readable lines as they are detected. With --config
it runs your pollers instead of the demo.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.Run(cmd, func(ctx context.Context, log zerolog.Logger) error { return dev(ctx, c, cmd.OutOrStdout(), log) })
		},
	}
	c.Bind(cmd.Flags(), "console")
	c.BindProcess(cmd.Flags(), "127.0.0.1:9090")
	c.BindWorker(cmd.Flags())
	c.BindClaim(cmd.Flags())
	_ = cmd.Flags().Set("ui", "true")
	_ = cmd.Flags().Set("concurrency", "4")
	cmd.Flags().Lookup("json").Usage = "JSON logs, and events printed as JSON lines instead of readable lines"
	for _, n := range []string{"ui", "concurrency"} { // dev's own defaults, as --help shows them
		f := cmd.Flags().Lookup(n)
		f.Changed, f.DefValue = false, f.Value.String()
	}
	return cmd
}

// dev starts the embedded Redis (unless --redis), the demo shop (unless --config) and
// everything else in this process.
func dev(ctx context.Context, c *command.Flags, out io.Writer, log zerolog.Logger) error {
	if c.S.Redis == "" {
		mr, err := miniredis.Run()
		if err != nil {
			return fmt.Errorf("start the embedded miniredis: %w", err)
		}
		defer mr.Close()
		c.S.Redis = "redis://" + mr.Addr()
		c.S.AllowEviction = true // miniredis keeps everything in memory and has no eviction
	}
	if !c.S.ConfigGiven {
		c.S.Config = ""
	}
	env, err := app.Open(ctx, c.S, log)
	if err != nil {
		return err
	}
	defer env.Close()
	if env.Config != nil {
		defer command.ReloadOnHUP(ctx, env)() // SIGHUP re-reads --config; the demo has no file
	}
	type line struct{ field, label, value string }
	var banner []line
	if env.Config == nil {
		shop := startDemoShop(ctx)
		defer shop.srv.Close()
		if err := env.Engine.Replace([]watukuytype.Budget{demoBudget()}); err != nil { // the demo's budget, before the pollers that name it
			return err
		}
		if err := env.Register(shop.pollers(printEvents(out, c.JSON))...); err != nil {
			return err
		}
		banner = append(banner, line{"demoShop", "demo shop API", fmt.Sprintf("%s/items  %s/list", shop.srv.URL, shop.srv.URL)})
	}
	banner = append(banner, line{"redis", "redis", c.S.Redis}, line{"version", "version", buildinfo.Read().String()})
	auth := ""
	if c.S.Listen != health.Off {
		// The token is in place before the endpoints serve; it is shown only once they listen.
		if auth, err = devAdminToken(env); err != nil {
			return err
		}
	}
	// The endpoints listen before the banner says where they are: an address another process
	// holds fails here, with nothing printed for it (no URL, no token).
	defer env.FlushTraces() // the last cycles' spans
	ctx, stop := context.WithCancel(ctx)
	defer stop() // the endpoints end with the run
	st, err := app.StartAll(ctx, env, c.S)
	if err != nil {
		return err
	}
	if st.Addr != "" {
		banner = append(banner, line{"metrics", "metrics", fmt.Sprintf("http://%s/metrics  (health: /healthz, /readyz)", st.Addr)})
		if c.S.UI {
			banner = append(banner, line{"asynqmon", "asynqmon", fmt.Sprintf("http://%s/monitoring/", st.Addr)})
		}
		banner = append(banner, line{"status", "status page", fmt.Sprintf("http://%s/status", st.Addr)},
			line{"adminAPI", "admin API", fmt.Sprintf("http://%s/api/  (%s)", st.Addr, auth)})
	}
	if c.JSON {
		// stdout carries only events: the banner goes to the (JSON) log
		ev := log.Info()
		for _, b := range banner {
			ev = ev.Str(b.field, b.value)
		}
		ev.Msg("watukuy dev started")
	} else {
		for _, b := range banner {
			fmt.Fprintf(out, "%-15s %s\n", b.label, b.value)
		}
		fmt.Fprintln(out, "events (Ctrl-C stops):")
		if env.Config == nil { // the demo's readable lines (a config's stdout sink prints JSON)
			fmt.Fprintf(out, eventLine, "OBSERVED", "POLLER", "PARTITION", "LANE", "TYPE", "IDENTITY", "VER", " FIELDS", "ID")
		}
	}
	return st.Run(ctx)
}

// devAdminToken says, for the banner, which token dev's admin API takes: with none
// configured (WATUKUY_ADMIN_TOKEN, admin.tokens) a random one, shown; otherwise the
// configured ones, whose secrets it does not print.
func devAdminToken(env *app.Env) (string, error) {
	if env.Admin.Len() > 0 {
		return "tokens of " + app.AdminTokenEnv + " or admin.tokens", nil
	}
	b := make([]byte, 18)
	if _, err := crand.Read(b); err != nil {
		return "", fmt.Errorf("generate the admin token: %w", err)
	}
	secret := base64.RawURLEncoding.EncodeToString(b)
	return "Authorization: Bearer " + secret, env.AddAdminToken(admintoken.Token{ID: "dev", Secret: secret})
}

// eventLine is the layout of dev's readable event lines and of their header.
const eventLine = "%-8s  %-9s %-9s %-9s %-8s %-9s %-4s%s  %s\n"

// printEvents is the demo's handler: one readable line per event (time observed, poller,
// partition, lane, type, identity, version, a few fields, id), and under an updated event
// with a change set a line of its patch; or with asJSON the event envelope as one JSON line.
func printEvents(w io.Writer, asJSON bool) watukuytype.Handler {
	var mu sync.Mutex
	return func(ctx context.Context, ev watukuytype.Event) error {
		if asJSON {
			mu.Lock()
			defer mu.Unlock()
			return writeJSON(w, ev)
		}
		detail := ""
		var m map[string]any
		if json.Unmarshal(ev.Item, &m) == nil {
			for _, k := range []string{"status", "total", "name"} {
				if v, ok := m[k]; ok {
					detail += fmt.Sprintf(" %s=%v", k, v)
				}
			}
		}
		version := "-"
		if ev.Version != "" {
			version = "v" + ev.Version
		}
		// The lane and partition tell a replayed event (observed long ago) or a backfilled one
		// from what the live lane sees now.
		mu.Lock()
		defer mu.Unlock()
		if _, err := fmt.Fprintf(w, eventLine, ev.ObservedAt.Local().Format(time.TimeOnly),
			ev.Poller, cell(ev.Partition), ev.Lane, ev.Type, ev.Identity, version, detail, ev.ID); err != nil {
			return err
		}
		if ch := changesLine(ev); ch != "" {
			_, err := fmt.Fprintf(w, "%10s%s\n", "", ch)
			return err
		}
		return nil
	}
}

// changesLine is what an updated event's change set says, for the line under it: each
// operation of the patch as op, path and value ("replace /status \"paid\""), or why there is
// none. "" for an event without one.
func changesLine(ev watukuytype.Event) string {
	switch {
	case ev.ChangesOmitted != "":
		return "changes: none (" + ev.ChangesOmitted + ")"
	case len(ev.Changes) == 0:
		return ""
	}
	var ops []struct {
		Op, Path string
		Value    json.RawMessage
	}
	if err := json.Unmarshal(ev.Changes, &ops); err != nil {
		return "changes: " + string(ev.Changes)
	}
	if len(ops) == 0 {
		return "changes: none" // a forced backfill of an item as it was
	}
	parts := make([]string, len(ops))
	for i, o := range ops {
		parts[i] = o.Op + " " + o.Path
		if o.Value != nil {
			parts[i] += " " + clip(string(o.Value), 40)
		}
	}
	return "changes: " + strings.Join(parts, ", ")
}

// demoShop is a fake shop whose orders and customers change every few seconds.
type demoShop struct {
	api *fakeapi.API
	srv *fakeapi.Server
}

func startDemoShop(ctx context.Context) *demoShop {
	api := fakeapi.New()
	api.SetNow(time.Now().UTC())
	for i := 1; i <= 5; i++ {
		api.Put(fmt.Sprintf("ord-%04d", i), map[string]any{"status": "open", "total": 10 * i})
		api.Put(fmt.Sprintf("cus-%04d", i), map[string]any{"name": fmt.Sprintf("Customer %d", i), "kind": "customer"})
	}
	shop := &demoShop{api: api, srv: fakeapi.NewServer(api, fakeapi.ServerOptions{TieBreaker: true})}
	go shop.mutate(ctx)
	return shop
}

func (d *demoShop) mutate(ctx context.Context) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	n := 5
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.api.SetNow(time.Now().UTC())
		n++
		switch rand.IntN(4) {
		case 0:
			d.api.Put(fmt.Sprintf("ord-%04d", n), map[string]any{"status": "open", "total": n})
		case 1:
			d.api.Put(fmt.Sprintf("ord-%04d", 1+rand.IntN(n-1)), map[string]any{"status": "paid"})
		case 2:
			d.api.Put(fmt.Sprintf("cus-%04d", n), map[string]any{"name": fmt.Sprintf("Customer %d", n), "kind": "customer"})
		default:
			d.api.Delete(fmt.Sprintf("cus-%04d", 1+rand.IntN(n-1)))
		}
	}
}

// demoBudget is the demo shop's request budget, which both its pollers share (`inspect` shows
// it below the keys).
func demoBudget() watukuytype.Budget {
	return watukuytype.Budget{Name: "demo-shop", Rate: 10, Per: time.Second, Burst: 5}
}

// pollers are the demo's: orders through the timestamp feed, with a patch on every updated
// event, and customers through a snapshot listing (which also sees deletes), drawing from one
// budget.
func (d *demoShop) pollers(h watukuytype.Handler) []watukuytype.Poller {
	every := watukuytype.Schedule{Min: time.Second, Max: 5 * time.Second}
	orders := &httppoll.TimestampCursor{Source: httppoll.Source{URL: d.srv.URL + "/items", Items: "data"},
		Field: "updated_at", Param: "updated_since", LimitParam: "limit", Limit: 50, HasMore: "has_more", TieBreaker: "after_id"}
	customers := &httppoll.PageCursor{Source: httppoll.Source{URL: d.srv.URL + "/list", Items: "data"},
		Param: "page", SizeParam: "per_page", Size: 50, HasMore: "has_more", CollectionETag: true}
	isOrder := func(item json.RawMessage) bool { return json.Valid(item) && !isCustomer(item) }
	return []watukuytype.Poller{
		{Name: "orders", Fetch: filter(orders.Fetch, isOrder), Version: watukuytype.Field("version"), Handler: h, Schedule: every,
			CursorPosition: orders.Position, ItemPosition: orders.ItemPosition, LogRetention: time.Hour, Budget: demoBudget().Name, // try backfill --wait and replay on it
			Changes: watukuytype.Changes{Patch: true}}, // updated orders print their patch
		{Name: "customers", Strategy: watukuytype.SnapshotDiff, Fetch: filter(customers.Fetch, isCustomer), Version: watukuytype.Field("version"), Handler: h, Schedule: every,
			Budget: demoBudget().Name},
	}
}

func isCustomer(item json.RawMessage) bool {
	var m struct{ Kind string }
	return json.Unmarshal(item, &m) == nil && m.Kind == "customer"
}

// filter keeps the items of one kind: the demo's two collections share one fake API.
func filter(f watukuytype.FetchFunc, keep func(json.RawMessage) bool) watukuytype.FetchFunc {
	return func(ctx context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
		p, err := f(ctx, req)
		kept := p.Items[:0]
		for _, it := range p.Items {
			if keep(it) {
				kept = append(kept, it)
			}
		}
		p.Items = kept
		return p, err
	}
}
