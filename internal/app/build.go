package app

import (
	"bytes"
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

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/config"
	"github.com/watukuy/watukuy/internal/cursor"
	"github.com/watukuy/watukuy/internal/diff"
	"github.com/watukuy/watukuy/internal/httpx"
	"github.com/watukuy/watukuy/internal/sink"
)

// Build turns the config file's pollers into engine pollers: the HTTP source and cursor
// strategy, identity, version and fingerprint paths, schedule, reconcile lane, delete
// confirmation, commit bounds and sink.
func Build(cfg *config.Config, rdb redis.UniversalClient, out io.Writer, log zerolog.Logger) ([]watukuy.Poller, error) {
	var ps []watukuy.Poller
	for _, pc := range cfg.Pollers {
		p, err := buildPoller(cfg, pc, rdb, out, log)
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

func buildPoller(cfg *config.Config, pc config.Poller, rdb redis.UniversalClient, out io.Writer, log zerolog.Logger) (watukuy.Poller, error) {
	bad := func(field, format string, a ...any) error {
		return &config.Error{File: cfg.File, Line: pc.Line, Field: fmt.Sprintf("pollers.%s.%s", pc.Name, field), Msg: fmt.Sprintf(format, a...)}
	}
	log = log.With().Str("poller", pc.Name).Logger()
	client := &httpx.Client{Timeout: pc.Request.Timeout, Logger: log}
	src := cursor.Source{Client: client, URL: pc.Request.URL, Query: url.Values{}, Header: http.Header{}, Items: pc.Items}
	for k, v := range pc.Request.Query {
		src.Query.Set(k, v)
	}
	for k, v := range pc.Request.Headers {
		src.Header.Set(k, v)
	}
	p := watukuy.Poller{Name: pc.Name, Partitions: pc.Partitions, SchemaVersion: pc.SchemaVersion,
		EmitOnSchemaChange: pc.OnSchemaChange == "emit", LeaseTTL: pc.LeaseTTL, MaxPagesPerCycle: pc.MaxPagesPerCycle,
		Schedule: watukuy.Schedule{Min: pc.Schedule.Min, Max: pc.Schedule.Max, Jitter: pc.Schedule.Jitter,
			Fixed: pc.Schedule.Adaptive != nil && !*pc.Schedule.Adaptive}}
	c := pc.Cursor
	listing := func(s cursor.Source) *cursor.Page {
		return &cursor.Page{Source: s, Param: c.Param, Offset: c.Offset, Start: c.Start, SizeParam: c.SizeParam,
			Size: c.Size, HasMore: c.HasMore, CollectionETag: c.ETag}
	}
	switch c.Strategy {
	case "timestamp":
		ts := &cursor.Timestamp{Source: src, Field: c.Field, Formats: c.Formats, Param: c.Param, LimitParam: c.LimitParam,
			Limit: c.Limit, HasMore: c.HasMore, TieBreaker: c.TieBreaker, Identity: pc.Identity}
		p.Fetch, p.CursorPosition = ts.Fetch, ts.Position
	case "token":
		p.Fetch = (&cursor.Token{Source: src, Param: c.Param, Next: c.Next, HasMore: c.HasMore, LimitParam: c.LimitParam, Limit: c.Limit}).Fetch
	case "page":
		p.Fetch = listing(src).Fetch
	case "snapshotDiff":
		p.Strategy = watukuy.SnapshotDiff
		p.Fetch = listing(src).Fetch
	default:
		return p, bad("cursor.strategy", "unknown strategy %q", c.Strategy)
	}
	if c.Deleted != "" {
		p.Tombstone = watukuy.Flag(c.Deleted)
	}
	p.Identity = watukuy.Field(pc.Identity)
	if pc.Identity == "" {
		p.Identity = watukuy.Field("id")
	}
	if pc.Version != "" {
		p.Version = watukuy.Field(pc.Version)
	}
	if len(pc.Fingerprint) > 0 {
		p.Fingerprint = fieldsFingerprint(pc.Fingerprint)
	}
	if r := pc.Reconcile; r != nil {
		rs := src
		if r.URL != "" {
			rs.URL = r.URL
		}
		param := r.Param
		if param == "" && !r.Offset {
			param = "page"
		}
		p.Reconcile = &watukuy.Reconcile{Every: r.Every, MaxPages: r.MaxPages, Fetch: (&cursor.Page{Source: rs, Param: param,
			Offset: r.Offset, SizeParam: r.SizeParam, Size: r.Size, HasMore: r.HasMore}).Fetch}
	}
	// The detail request sends the poller's headers (auth) but not its query (the listing's
	// paging parameters).
	if dt := pc.Deletes.Detail; dt != nil {
		ds := cursor.Source{Client: client, URL: dt.URL, Query: url.Values{}, Header: src.Header, Items: dt.Items}
		for k, v := range dt.Query {
			ds.Query.Set(k, v)
		}
		p.Detail = (&cursor.Detail{Source: ds}).Fetch
	}
	p.ConfirmDeletes, p.TombstoneRetention = pc.Deletes.ConfirmListings, pc.Deletes.Tombstones
	p.CommitMaxItems, p.CommitMaxBytes = pc.Commit.MaxItems, pc.Commit.MaxBytes
	if pc.Schema != "" {
		v, err := schemaValidator(pc.Schema)
		if err != nil {
			return p, bad("schema", "%v", err)
		}
		p.Validate = v
	}
	if pc.Log != nil {
		p.LogRetention = pc.Log.Retention
	}
	p.Shadow, p.History = pc.Shadow, pc.History
	d := pc.Delivery
	p.Delivery = watukuy.Delivery{Concurrency: d.Concurrency, Attempts: d.Attempts}
	if d.Poison == "halt" {
		p.Delivery.Poison = watukuy.PoisonHalt
	}
	if d.OrderingKey != "" && d.OrderingKey != "identity" {
		path := d.OrderingKey
		p.Delivery.OrderingKey = func(ev watukuy.Event) string {
			if v := gjson.GetBytes(ev.Item, path); v.Exists() {
				return v.String()
			}
			return ev.Identity // deletes carry no item
		}
	}
	switch {
	case d.Webhook != nil:
		w, err := sink.NewWebhook(sink.Webhook{URL: d.Webhook.URL, Secrets: d.Webhook.Secrets, Timeout: d.Webhook.Timeout})
		if err != nil {
			return p, bad("delivery.webhook", "%v", err)
		}
		p.Handler = w.Handle
	case d.Stream != nil:
		p.Handler = (&sink.Stream{Client: rdb, Key: d.Stream.Key, MaxLen: d.Stream.MaxLen}).Handle
	default:
		p.Handler = (&sink.Stdout{W: out}).Handle
	}
	return p, nil
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
		return diff.AppendCanonical(nil, raw)
	}
}
