package config

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/watukuytype"
	"github.com/watukuy/watukuy/webhook"
)

// The checks and decoders that schema rows name: what a key's kind alone does not say.

func checkName(d *decoder, ps *pollerState, s string, at pos, fp string) {
	ps.nameAt = at
	if err := core.CheckName(s); err != nil {
		d.errAt(at, fp, "%v", err)
	}
}

func checkHTTPURL(d *decoder, _ *pollerState, s string, at pos, fp string) { d.httpURL(s, at, fp) }

func checkOptionalHTTPURL(d *decoder, _ *pollerState, s string, at pos, fp string) {
	if s != "" {
		d.httpURL(s, at, fp)
	}
}

func checkDetailURL(d *decoder, _ *pollerState, s string, at pos, fp string) {
	if d.httpURL(s, at, fp) && !strings.Contains(s, "{id}") {
		d.errAt(at, fp, "must contain {id}, replaced by the identity to confirm")
	}
}

func checkNotEmpty(d *decoder, _ *pollerState, s string, at pos, fp string) {
	if s == "" {
		d.errAt(at, fp, "must not be empty")
	}
}

// checkFormat accepts the named formats and Go layouts (which must hold a layout element).
func checkFormat(d *decoder, _ *pollerState, s string, at pos, fp string) {
	if slices.Contains(namedFormats, s) {
		return
	}
	if vars := d.fromVars(fp); vars != "" { // no suggestion: it would tell what the value is like
		if ref := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC); ref.Format(s) == s {
			d.errAt(at, fp, "unknown format: %s is none of %s, nor a Go layout (the value is not shown)", vars, orList(namedFormats))
		}
		return
	}
	msg := fmt.Sprintf("unknown format %q (want %s, or a Go layout such as %q)", s, orList(namedFormats), time.RFC3339)
	if sug := suggest(s, namedFormats); sug != "" {
		d.errAt(at, fp, "%s; did you mean %q?", msg, sug)
		return
	}
	// A Go layout must hold at least one element (2006, 01, 02, 15, 04, 05, …).
	if ref := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC); ref.Format(s) == s {
		d.errAt(at, fp, "%s", msg)
	}
}

func decodePartitions(d *decoder, ps *pollerState, v ast.Node, fp string) {
	seen := map[string]int{}
	d.list(v, fp, func(i int, item ast.Node, ip string) {
		s, ok := d.str(item, ip)
		if !ok {
			if r, rok := d.resolve(item, ip); rok && r == nil {
				d.errAt(posOf(item), ip, "empty partition")
			}
			return
		}
		iat := posOf(item)
		bad := core.CheckPartition(s)
		switch line, dup := seen[s]; {
		case bad != nil:
			d.errAt(iat, ip, "%v", bad)
		case dup:
			d.errAt(iat, ip, "partition %q is listed twice (first at line %d)", s, line)
		default:
			seen[s] = iat.line
		}
		ps.p.Partitions = append(ps.p.Partitions, s)
	})
}

func decodeJitter(d *decoder, ps *pollerState, v ast.Node, fp string) {
	if j, ok := d.float(v, fp); ok {
		if err := core.CheckJitter(j); err != nil {
			d.errAt(posOf(v), fp, "%v", err)
		}
		ps.p.Schedule.Jitter = &j
	}
}

// factorOf reads a backoff factor into the field to gives: an explicit value below 1 is an
// error, never the default.
func factorOf(to func(p *Poller) *float64) func(d *decoder, ps *pollerState, v ast.Node, fp string) {
	return func(d *decoder, ps *pollerState, v ast.Node, fp string) {
		if f, ok := d.float(v, fp); ok {
			if f < 1 {
				d.errAt(posOf(v), fp, "must be at least 1, got %v", f)
				return
			}
			*to(ps.p) = f
		}
	}
}

// checkRetry: a retry max given below its base.
func checkRetry(d *decoder, ps *pollerState, b blockRead) {
	r := ps.p.Delivery.Retry
	base := r.Base
	if base == 0 {
		base = core.DefaultRetryBase
	}
	if r.Max > 0 && r.Max < base {
		d.errAt(b.values["max"], join(b.field, "max"), "must be at least base (%s)", base)
	}
}

// decodeHorizon reads delivery.retry.horizon: a duration, or none (RetryHorizonNone).
func decodeHorizon(d *decoder, ps *pollerState, v ast.Node, fp string) {
	if s, ok := v.(*ast.StringNode); ok && s.Value == "none" {
		ps.p.Delivery.RetryHorizon = RetryHorizonNone
		return
	}
	ps.p.Delivery.RetryHorizon, _ = d.duration(v, fp)
}

// checkBackoff applies the engine's rule to the backoff with its defaults filled in: a max
// given below the base.
func checkBackoff(d *decoder, ps *pollerState, b blockRead) {
	bo := ps.p.Schedule.Backoff
	if _, err := core.CycleBackoff(watukuytype.Backoff{Base: bo.Base, Factor: bo.Factor, Max: bo.Max}); err != nil {
		d.errAt(b.values["max"], join(b.field, "max"), "%v", err)
	}
}

// decodeSchemaPath resolves the schema file against the config file's directory; Load also
// compiles it, so a missing or broken schema is reported with the file's other errors.
// relative resolves a path the file names relative to the file's own directory.
func (d *decoder) relative(s string) string {
	if !filepath.IsAbs(s) {
		s = filepath.Join(filepath.Dir(d.file), s)
	}
	return s
}

func decodeSchemaPath(d *decoder, ps *pollerState, v ast.Node, fp string) {
	if s, ok := d.str(v, fp); ok && s != "" {
		s = d.relative(s)
		ps.p.Schema = s
		if d.files {
			if _, err := schemaValidator(s); err != nil {
				d.errAt(posOf(v), fp, "%v", err)
			}
		}
	}
}

func decodeSecrets(d *decoder, ps *pollerState, v ast.Node, fp string) {
	w := ps.p.Delivery.Webhook
	r, ok := d.resolve(v, fp)
	if !ok || r == nil {
		return
	}
	if seq, isSeq := r.(*ast.SequenceNode); isSeq {
		d.list(r, fp, func(i int, item ast.Node, ip string) {
			if s, ok := d.secret(item, ip); ok {
				w.Secrets = append(w.Secrets, s)
			}
		})
		if len(w.Secrets) == 0 && len(seq.Values) == 0 {
			d.errAt(posOf(v), fp, "empty list: give at least one secret")
		}
	} else if s, ok := d.secret(v, fp); ok {
		w.Secrets = []string{s}
	}
}

// checkCursor checks the keys given against the strategy: keys it does not use, keys it needs.
func checkCursor(d *decoder, ps *pollerState, b blockRead) {
	c := ps.p.Cursor
	if c.Strategy == "" {
		return // missing or unknown, already reported
	}
	for _, k := range b.keys {
		if kat, ok := b.present[k.name()]; ok && k.strategies != nil && !slices.Contains(k.strategies, c.Strategy) {
			d.errAt(kat, join(b.field, k.name()), "not used by the %s strategy (only by %s)", c.Strategy, orList(k.strategies))
		}
	}
	for _, k := range b.keys {
		if _, ok := b.present[k.name()]; !ok && slices.Contains(k.requiredFor, c.Strategy) {
			d.errAt(b.at, join(b.field, k.name()), "required for the %s strategy", c.Strategy)
		}
	}
	if at, ok := b.present["offset"]; ok && c.Offset && c.Param == "" && slices.Contains(listings, c.Strategy) {
		d.errAt(at, join(b.field, "param"), "%s", offsetParamMsg)
	}
}

// offsetParamMsg says why a listing paged by item offset needs its param: without it the
// offset would go out as ?page=, the page number's default parameter.
const offsetParamMsg = "required when offset is true: name the query parameter of the item offset (e.g. offset); " +
	"without it the offset would be sent as ?page=, a page number"

func checkSchedule(d *decoder, ps *pollerState, b blockRead) {
	if s := ps.p.Schedule; s.Min > 0 && s.Max > 0 {
		if err := core.CheckInterval(s.Min, s.Max); err != nil {
			d.errAt(b.values["max"], join(b.field, "max"), "%v", err)
		}
	}
}

func checkDelivery(d *decoder, ps *pollerState, b blockRead) {
	dl := ps.p.Delivery
	var sinks []string
	for _, set := range []struct {
		kind string
		set  bool
	}{{"webhook", dl.Webhook != nil}, {"stream", dl.Stream != nil}, {"stdout", dl.Stdout != nil},
		{"nats", dl.NATS != nil}, {"amqp", dl.AMQP != nil}, {"postgres", dl.Postgres != nil}} {
		if set.set {
			sinks = append(sinks, set.kind)
		}
	}
	switch len(sinks) {
	case 0:
		d.errAt(b.at, b.field, "want one of %s", orList(sinkKinds))
	case 1:
	default:
		d.errAt(b.at, b.field, "want exactly one of %s, got %s", orList(sinkKinds), strings.Join(sinks, " and "))
	}
}

// checkEntry fills the identity default and checks what spans blocks: keys only complete
// listings use, ${partition} without partitions, a reconcile paged by offset without its
// param (found at the reconcile key: the reconcile block has no check of its own).
func checkEntry(d *decoder, ps *pollerState, b blockRead) {
	p := ps.p
	if p.Identity == "" {
		p.Identity = "id"
	}
	if r := p.Reconcile; r != nil && r.Offset && r.Param == "" {
		d.errAt(b.present["reconcile"], join(b.field, "reconcile.param"), "%s", offsetParamMsg)
	}
	// An unknown strategy is reported by the cursor decoder.
	if p.Cursor.Strategy != "" && p.Cursor.Strategy != StrategySnapshotDiff && p.Reconcile == nil {
		for _, k := range ps.listing {
			d.errAt(k.at, k.field, "not used by a %s poller without a reconcile lane: only complete listings (snapshotDiff or reconcile) find deletes", p.Cursor.Strategy)
		}
	}
	if len(p.Partitions) == 0 {
		for _, u := range ps.uses {
			d.errAt(u.at, u.field, "uses %s but the poller lists no partitions", PartitionVar)
		}
	}
}

// httpURL checks an absolute http(s) URL; ${partition} counts as a host or path segment. It
// reports whether the URL is good.
func (d *decoder) httpURL(s string, at pos, field string) bool {
	u, err := url.Parse(strings.ReplaceAll(s, PartitionVar, "p"))
	switch {
	case err != nil:
		d.errAt(at, field, "bad URL: %v", errors.Unwrap(err))
	case u.Scheme != "http" && u.Scheme != "https":
		d.errAt(at, field, "want an http:// or https:// URL, got %q", redactURL(u))
	case u.Host == "":
		d.errAt(at, field, "URL %q has no host", redactURL(u))
	default:
		return true
	}
	return false
}

func redactURL(u *url.URL) string {
	c := *u
	c.User = nil
	c.RawQuery = ""
	c.Fragment = ""
	return c.String()
}

// secretHint says how to make a secret.
const secretHint = "make one with: echo whsec_$(head -c 32 /dev/urandom | base64)"

// secret checks a Standard Webhooks secret by the webhook package's rule, without ever
// echoing it.
func (d *decoder) secret(n ast.Node, field string) (string, bool) {
	r, ok := d.resolve(n, field)
	if !ok || r == nil {
		if ok {
			d.errAt(posOf(n), field, "empty secret")
		}
		return "", false
	}
	if _, isStr := r.(*ast.StringNode); !isStr {
		if _, isLit := r.(*ast.LiteralNode); !isLit {
			d.errAt(posOf(r), field, "want a string, got %s", kindOf(r))
			return "", false
		}
	}
	s, ok := d.str(r, field)
	if !ok {
		return "", false
	}
	s = strings.TrimSpace(s)
	if err := webhook.CheckSecret(s); err != nil {
		what := "a webhook secret"
		if vars := d.fromVars(field); vars != "" {
			what += " from " + vars
		}
		d.errAt(posOf(r), field, "%s: %v (value not shown); %s", what, err, secretHint)
		return "", false
	}
	return s, true
}
