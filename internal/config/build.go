package config

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/tidwall/gjson"

	"github.com/watukuy/watukuy/httppoll"
	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/jcs"
	"github.com/watukuy/watukuy/internal/sink"
	"github.com/watukuy/watukuy/watukuytype"
)

// Build turns the file's pollers into engine pollers, each by the build steps of the schema's
// fields in order. rdb is for the stream sink (nil when nothing is delivered), out for the
// stdout sink, brokers keeps the broker sinks the pollers share (nil: Build's own, which
// connect nothing until a delivery). The engine fills the defaults of what is left at zero and checks the result
// when the poller is registered. Decoding has checked what it can; what only building finds
// (a schema file changed since Load) is reported for every poller at once, in the decoder's
// style.
func Build(cfg *Config, rdb redis.UniversalClient, out io.Writer, brokers *sink.Brokers, log zerolog.Logger) ([]watukuytype.Poller, error) {
	var ps []watukuytype.Poller
	var errs []*Error
	if brokers == nil {
		brokers = &sink.Brokers{}
	}
	for i := range cfg.Pollers {
		b := &builder{cfg: cfg, i: i, pc: &cfg.Pollers[i], p: &watukuytype.Poller{}, rdb: rdb, out: out, brokers: brokers}
		built := len(errs)
		b.log = log // the client's request lines name their key (poller, partition) themselves
		for _, f := range schema {
			if f.build == nil {
				continue
			}
			if err := f.build(b); err != nil {
				fp := join(index("pollers", i), f.path)
				errs = append(errs, &Error{File: cfg.File, Line: b.pc.Line, Field: fp, Msg: cfg.red.redact(fp, err.Error()), Err: err})
			}
		}
		if len(errs) == built { // the engine's own checks, on a poller that built
			if err := core.Check(*b.p); err != nil {
				if le, ok := cfg.Locate(err).(*Error); ok {
					errs = append(errs, le)
				} else {
					errs = append(errs, &Error{File: cfg.File, Line: b.pc.Line, Field: index("pollers", i), Msg: cfg.red.redact(index("pollers", i), err.Error()), Err: err})
				}
			}
		}
		ps = append(ps, *b.p)
	}
	if err := joinErrors(errs); err != nil {
		return nil, err
	}
	return ps, nil
}

// builder is one poller being built.
type builder struct {
	cfg     *Config
	i       int                 // its index in cfg.Pollers
	pc      *Poller             // as decoded
	p       *watukuytype.Poller // as built
	rdb     redis.UniversalClient
	out     io.Writer
	brokers *sink.Brokers
	log     zerolog.Logger

	client *httppoll.Client // set by the request: every request of the poller goes through it
	src    httppoll.Source  // the listing's source, set by the request
}

func buildRequest(b *builder) error {
	r := b.pc.Request
	b.p.SharedRequest = r.URL != "" && !r.usesPartition()
	b.client = &httppoll.Client{Timeout: r.Timeout, MaxBody: r.MaxBodyBytes, Logger: b.log}
	b.src = httppoll.Source{Client: b.client, URL: r.URL, Query: url.Values{}, Header: http.Header{}, Items: b.pc.Items}
	for k, v := range r.Query {
		b.src.Query.Set(k, v)
	}
	for k, v := range r.Headers {
		b.src.Header.Set(k, v)
	}
	return nil
}

func buildIdentity(b *builder) error {
	id := b.pc.Identity
	if id == "" { // a Poller made in Go, not decoded
		id = "id"
	}
	b.p.Identity = watukuytype.Field(id)
	return nil
}

func buildVersion(b *builder) error {
	if b.pc.Version != "" {
		b.p.Version = watukuytype.Field(b.pc.Version)
	}
	return nil
}

func buildFingerprint(b *builder) error {
	if len(b.pc.Fingerprint) > 0 {
		b.p.Fingerprint = fieldsFingerprint(b.pc.Fingerprint)
	}
	return nil
}

// revision is a digest of what a poller's listings are made of, its request, items, cursor
// and reconcile settings (Poller.Revision): a listing under way that began under another one
// starts over.
func revision(pc *Poller) string {
	js, _ := json.Marshal(struct {
		R Request
		I string
		C Cursor
		N *Reconcile
	}{pc.Request, pc.Items, pc.Cursor, pc.Reconcile})
	sum := sha256.Sum256(js)
	return hex.EncodeToString(sum[:8])
}

// buildCursor makes the strategy's Fetch from the cursor keys.
func buildCursor(b *builder) error {
	c, src := b.pc.Cursor, b.src
	b.p.Revision = revision(b.pc)
	switch c.Strategy {
	case StrategyTimestamp:
		ts := &httppoll.TimestampCursor{Source: src, Field: c.Field, Formats: c.Formats, Param: c.Param, LimitParam: c.LimitParam,
			Limit: c.Limit, HasMore: c.HasMore, TieBreaker: c.TieBreaker, Identity: b.pc.Identity}
		b.p.Fetch, b.p.CursorPosition, b.p.ItemPosition = ts.Fetch, ts.Position, ts.ItemPosition
		b.p.CursorFormats = c.Formats
		if len(b.p.CursorFormats) == 0 {
			b.p.CursorFormats = []string{httppoll.RFC3339, httppoll.Epoch} // httppoll.ParseTime's default
		}
	case StrategyToken:
		b.p.Fetch = (&httppoll.TokenCursor{Source: src, Param: c.Param, Next: c.Next, HasMore: c.HasMore, LimitParam: c.LimitParam, Limit: c.Limit}).Fetch
	case StrategyPage, StrategySnapshotDiff:
		if c.Strategy == StrategySnapshotDiff {
			b.p.Strategy = watukuytype.SnapshotDiff
		}
		b.p.Fetch = (&httppoll.PageCursor{Source: src, Param: c.Param, Offset: c.Offset, Start: c.Start, SizeParam: c.SizeParam,
			Size: c.Size, HasMore: c.HasMore, CollectionETag: c.ETag}).Fetch
	default:
		return fmt.Errorf("unknown strategy %q", c.Strategy)
	}
	return nil
}

func buildTombstone(b *builder) error {
	if b.pc.Cursor.Deleted != "" {
		b.p.Tombstone = watukuytype.Flag(b.pc.Cursor.Deleted)
	}
	return nil
}

// buildJitter maps an explicit jitter: 0 to NoJitter: the engine's zero Jitter is the default.
func buildJitter(b *builder) error {
	if j := b.pc.Schedule.Jitter; j != nil {
		b.p.Schedule.Jitter, b.p.Schedule.NoJitter = *j, *j == 0
	}
	return nil
}

func buildBackoff(b *builder) error {
	bo := b.pc.Schedule.Backoff
	b.p.Backoff = watukuytype.Backoff{Base: bo.Base, Factor: bo.Factor, Max: bo.Max}
	return nil
}

func buildRetry(b *builder) error {
	r := b.pc.Delivery.Retry
	if r != (Backoff{}) {
		d := watukuytype.Backoff{Base: r.Base, Factor: r.Factor, Max: r.Max}
		if d.Base == 0 {
			d.Base = core.DefaultRetryBase
		}
		if d.Factor == 0 {
			d.Factor = 2
		}
		if d.Max == 0 {
			d.Max = max(core.DefaultRetryMax, d.Base)
		}
		b.p.Delivery.Retry = d
	}
	b.p.Delivery.RetryHorizon = b.pc.Delivery.RetryHorizon
	return nil
}

func buildFixed(b *builder) error {
	b.p.Schedule.Fixed = b.pc.Schedule.Adaptive != nil && !*b.pc.Schedule.Adaptive
	return nil
}

func buildReconcile(b *builder) error {
	r := b.pc.Reconcile
	if r == nil {
		return nil
	}
	rs := b.src
	if r.URL != "" {
		rs.URL = r.URL
	}
	param := r.Param
	if param == "" && !r.Offset {
		param = "page"
	}
	b.p.Reconcile = &watukuytype.Reconcile{Every: r.Every, MaxPages: r.MaxPages, Fetch: (&httppoll.PageCursor{Source: rs, Param: param,
		Offset: r.Offset, SizeParam: r.SizeParam, Size: r.Size, HasMore: r.HasMore}).Fetch}
	return nil
}

func buildLogRetention(b *builder) error {
	if b.pc.Log != nil {
		b.p.LogRetention = b.pc.Log.Retention
	}
	return nil
}

// buildDetail makes the detail request: it sends the poller's headers (auth) but not its
// query (the listing's paging parameters).
func buildDetail(b *builder) error {
	dt := b.pc.Deletes.Detail
	if dt == nil {
		return nil
	}
	ds := httppoll.Source{Client: b.client, URL: dt.URL, Query: url.Values{}, Header: b.src.Header, Items: dt.Items}
	for k, v := range dt.Query {
		ds.Query.Set(k, v)
	}
	b.p.Detail = (&httppoll.DetailRequest{Source: ds}).Fetch
	return nil
}

func buildValidate(b *builder) error {
	if b.pc.Schema == "" {
		return nil
	}
	v, err := schemaValidator(b.pc.Schema)
	if err != nil {
		return err
	}
	b.p.Validate = v
	return nil
}

func buildOrderingKey(b *builder) error {
	path := b.pc.Delivery.OrderingKey
	if path == "" || path == "identity" {
		return nil
	}
	b.p.Delivery.OrderingKey = func(ev watukuytype.Event) string {
		if v := gjson.GetBytes(ev.Item, path); v.Exists() {
			return v.String()
		}
		return ev.Identity // deletes carry no item
	}
	return nil
}

func buildWebhook(b *builder) error {
	wh := b.pc.Delivery.Webhook
	if wh == nil {
		return nil
	}
	if !b.cfg.Delivers(b.i) {
		b.p.Handler = b.undelivered
		return nil
	}
	w, err := sink.NewWebhook(sink.Webhook{URL: wh.URL, Secrets: wh.Secrets, Timeout: wh.Timeout})
	if err != nil {
		return err
	}
	b.p.Handler = w.Handle
	return nil
}

func buildStream(b *builder) error {
	if st := b.pc.Delivery.Stream; st != nil && !b.cfg.Delivers(b.i) {
		b.p.Handler = b.undelivered
	} else if st != nil {
		b.p.Handler = (&sink.Stream{Client: b.rdb, Key: st.Key, MaxLen: st.MaxLen}).Handle
	}
	return nil
}

// buildStdout also serves a Poller made in Go with no sink: stdout is the fallback.
func buildStdout(b *builder) error {
	if b.pc.Delivery.Kind() == "stdout" {
		b.p.Handler = (&sink.Stdout{W: b.out}).Handle
	}
	return nil
}

// schemaValidator compiles a JSON Schema file; items it rejects are parked as invalid with
// the schema's own explanation.
func schemaValidator(path string) (func(item json.RawMessage) error, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	loc := "file://" + filepath.ToSlash(abs)
	if err := c.AddResource(loc, doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sch, err := c.Compile(loc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return func(item json.RawMessage) error {
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(item))
		if err != nil {
			return err
		}
		return sch.Validate(inst)
	}, nil
}

// fieldsFingerprint makes only the named fields count as a change: the canonical JSON of an
// object holding just those paths.
func fieldsFingerprint(paths []string) func(item json.RawMessage) ([]byte, error) {
	return func(item json.RawMessage) ([]byte, error) {
		sel := make(map[string]json.RawMessage, len(paths))
		for _, path := range paths {
			if v := gjson.GetBytes(item, path); v.Exists() {
				sel[path] = json.RawMessage(v.Raw)
			}
		}
		raw, err := json.Marshal(sel)
		if err != nil {
			return nil, err
		}
		return jcs.Append(nil, raw)
	}
}

// undelivered is the handler of a poller whose delivery the config left out (LoadOperator: its
// variables are not set here). The operator commands deliver nothing; a call is a bug.
func (b *builder) undelivered(context.Context, watukuytype.Event) error {
	return fmt.Errorf("poller %q: delivery is not set up in this process (%s): it delivers nothing", b.p.Name, b.cfg.unsetOf(b.i))
}
