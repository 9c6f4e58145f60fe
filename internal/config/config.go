// Package config reads the watukuy config file (--config, default ./watukuy.yaml): pollers
// that need no Go code. Every error names the file, the line and column, and the field path;
// unknown keys are errors. Defaults are the caller's business (zero values stay zero), except
// Poller.Identity, which defaults to "id".
//
// String values expand ${VAR} from the environment; ${partition} is never read from the
// environment and stays in the value, to be replaced by the key's partition when a request is
// built; $${X} is a literal ${X}.
package config

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	yaml "github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// Config is a parsed, validated config file.
type Config struct {
	File    string // the path it was read from (as given)
	Redis   string // optional; flag > env > file is decided by the caller
	Prefix  string
	Pollers []Poller
}

// Poller is one configured HTTP source.
type Poller struct {
	Name             string
	Partitions       []string
	Request          Request
	Items            string   // gjson path of the item array ("" = the body is the array)
	Identity         string   // gjson path inside an item; "id" when not given
	Version          string   // optional gjson path
	Fingerprint      []string // optional: only these fields count as a change
	Cursor           Cursor
	Schedule         Schedule
	Reconcile        *Reconcile // nil: no reconcile lane
	Log              *Log       // nil: no replay log
	Deletes          Deletes
	Commit           Commit
	SchemaVersion    int
	OnSchemaChange   string // "", "rebaseline" or "emit"
	Schema           string // JSON Schema path, resolved against the config file's directory
	Shadow           bool
	History          bool
	LeaseTTL         time.Duration
	MaxPagesPerCycle int
	Delivery         Delivery
	Line             int // line of the poller's entry in the file
}

// Request is how a page is fetched. URL, Query values and Headers values may hold
// ${partition}.
type Request struct {
	URL     string
	Query   map[string]string
	Headers map[string]string
	Timeout time.Duration
}

// Cursor strategies.
const (
	StrategyTimestamp    = "timestamp"
	StrategyToken        = "token"
	StrategyPage         = "page"
	StrategySnapshotDiff = "snapshotDiff"
)

// Cursor is the flat cursor block; which keys apply depends on Strategy.
type Cursor struct {
	Strategy   string // timestamp | token | page | snapshotDiff
	Field      string // timestamp: the item's change time
	Param      string // query parameter that carries the cursor (page: the page number or offset)
	HasMore    string // optional response path
	Next       string // token: response path of the next token ("" follows Link rel="next")
	LimitParam string // timestamp, token
	TieBreaker string // timestamp: query parameter for the last identity at the cursor time
	Deleted    string // gjson path of a tombstone flag
	SizeParam  string // page, snapshotDiff
	Formats    []string
	Limit      int  // timestamp, token
	Size       int  // page, snapshotDiff
	Start      int  // page, snapshotDiff: first page number
	Offset     bool // page, snapshotDiff: Param is an item offset
	ETag       bool // page, snapshotDiff: collection ETag on the first page
}

// Schedule is the adaptive polling interval.
type Schedule struct {
	Min, Max time.Duration
	Jitter   float64
	Adaptive *bool // nil = default (true)
}

// Reconcile is the periodic full listing that finds deletes.
type Reconcile struct {
	Every     time.Duration
	Strategy  string // "", "page" or "snapshotDiff"
	URL       string // "" = the request URL
	Param     string
	SizeParam string
	HasMore   string
	Size      int
	MaxPages  int
	Offset    bool
}

// Log is the replay log.
type Log struct {
	Retention time.Duration
}

// Deletes is how deletes found by complete listings (snapshotDiff, reconcile) are confirmed.
type Deletes struct {
	ConfirmListings int           // consecutive complete listings that must miss an identity; 0 = default
	Detail          *Detail       // nil: no detail request
	Tombstones      time.Duration // how long a deleted identity is remembered; 0 = default
}

// Detail is the request for one item that confirms a delete at once. URL holds "{id}"; URL
// and Query values may hold ${partition}.
type Detail struct {
	URL   string
	Items string // gjson path of the item in the body ("" = the body is the item)
	Query map[string]string
}

// Commit bounds one commit script; zero values are the defaults.
type Commit struct {
	MaxItems int
	MaxBytes int
}

// Poison values.
const (
	PoisonPark = "park"
	PoisonHalt = "halt"
)

// Delivery is where events go; exactly one of Webhook, Stream and Stdout is set.
type Delivery struct {
	Webhook     *Webhook
	Stream      *Stream
	Stdout      *Stdout
	Concurrency int
	OrderingKey string
	Attempts    int
	Poison      string // "", "park" or "halt"
}

// Webhook posts events (Standard Webhooks). Secrets holds one or more "whsec_<base64>"
// secrets (several during a rotation).
type Webhook struct {
	URL     string
	Secrets []string
	Timeout time.Duration
}

// Stream adds events to a Redis stream.
type Stream struct {
	Key    string
	MaxLen int64
}

// Stdout prints events as NDJSON.
type Stdout struct{}

// Load reads and validates path. getenv expands ${VAR}; nil means the process environment
// (then a variable set to "" is allowed; with a getenv function "" counts as not set).
func Load(path string, getenv func(string) string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		msg := err.Error()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			msg = "cannot read: " + pe.Err.Error()
		}
		return nil, &Error{File: path, Msg: msg, Err: err}
	}
	return Parse(path, data, getenv)
}

// Parse is Load on bytes already read; file is the name used in errors and the base of
// relative schema paths.
func Parse(file string, data []byte, getenv func(string) string) (*Config, error) {
	lookup := os.LookupEnv
	if getenv != nil {
		lookup = func(k string) (string, bool) {
			v := getenv(k)
			return v, v != ""
		}
	}
	d := &decoder{file: file, lookup: lookup, anchors: map[string]ast.Node{}}
	f, err := parser.ParseBytes(data, 0)
	if err != nil {
		e := &Error{File: file, Msg: err.Error(), Err: err}
		var ye yaml.Error
		if errors.As(err, &ye) {
			e.Msg = ye.GetMessage()
			if tk := ye.GetToken(); tk != nil && tk.Position != nil {
				e.Line, e.Column = tk.Position.Line, tk.Position.Column
			}
		}
		return nil, e
	}
	var body ast.Node
	for i, doc := range f.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		if body != nil {
			d.errAt(posOf(doc.Body), "", "want a single YAML document, found a second one (document %d)", i+1)
			return nil, joinErrors(d.errs)
		}
		body = doc.Body
		ast.Walk(anchorVisitor(d.anchors), body)
	}
	cfg := d.config(body)
	if err := joinErrors(d.errs); err != nil {
		return nil, err
	}
	return cfg, nil
}

var (
	nameRE      = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)
	partitionRE = regexp.MustCompile(`^[A-Za-z0-9_.:@-]{1,128}$`)
)

var (
	configKeys    = []string{"redis", "prefix", "pollers"}
	pollerKeys    = []string{"name", "partitions", "request", "items", "identity", "version", "fingerprint", "cursor", "schedule", "reconcile", "log", "deletes", "commit", "schemaVersion", "onSchemaChange", "schema", "shadow", "history", "leaseTTL", "maxPagesPerCycle", "delivery"}
	requestKeys   = []string{"url", "query", "headers", "timeout"}
	cursorKeys    = []string{"strategy", "field", "param", "hasMore", "next", "formats", "limitParam", "limit", "tieBreaker", "deleted", "offset", "start", "sizeParam", "size", "etag"}
	scheduleKeys  = []string{"min", "max", "jitter", "adaptive"}
	reconcileKeys = []string{"every", "strategy", "url", "param", "sizeParam", "size", "offset", "hasMore", "maxPages"}
	logKeys       = []string{"retention"}
	deletesKeys   = []string{"confirmListings", "detail", "tombstones"}
	detailKeys    = []string{"url", "items", "query"}
	commitKeys    = []string{"maxItems", "maxBytes"}
	deliveryKeys  = []string{"webhook", "stream", "stdout", "concurrency", "orderingKey", "attempts", "poison"}
	webhookKeys   = []string{"url", "secret", "timeout"}
	streamKeys    = []string{"key", "maxlen"}

	strategies          = []string{StrategyTimestamp, StrategyToken, StrategyPage, StrategySnapshotDiff}
	reconcileStrategies = []string{StrategyPage, StrategySnapshotDiff}
	poisons             = []string{PoisonPark, PoisonHalt}
	schemaChanges       = []string{"rebaseline", "emit"}
	namedFormats        = []string{"rfc3339", "epoch_s", "epoch_ms", "epoch"}

	// cursorKeyStrategies lists, for the cursor keys that only some strategies use, which ones.
	cursorKeyStrategies = map[string][]string{
		"field":      {StrategyTimestamp},
		"formats":    {StrategyTimestamp},
		"tieBreaker": {StrategyTimestamp},
		"next":       {StrategyToken},
		"limitParam": {StrategyTimestamp, StrategyToken},
		"limit":      {StrategyTimestamp, StrategyToken},
		"offset":     {StrategyPage, StrategySnapshotDiff},
		"start":      {StrategyPage, StrategySnapshotDiff},
		"sizeParam":  {StrategyPage, StrategySnapshotDiff},
		"size":       {StrategyPage, StrategySnapshotDiff},
		"etag":       {StrategyPage, StrategySnapshotDiff},
	}
)

func (d *decoder) config(body ast.Node) *Config {
	cfg := &Config{File: d.file}
	switch r, ok := d.resolve(body, ""); r.(type) {
	case nil:
		if ok {
			d.errAt(pos{line: 1}, "pollers", "required: the file defines no pollers")
		}
		return cfg
	case *ast.MappingNode, *ast.MappingValueNode:
	default:
		d.typeErr(r, "", "a mapping with redis, prefix and pollers")
		return cfg
	}
	var pollersAt pos
	var namesAt []pos
	pollersOK := false
	present := d.object(body, "", configKeys, func(key string, at pos, v ast.Node, fp string) {
		switch key {
		case "redis":
			if s, ok := d.str(v, fp); ok {
				u, err := url.Parse(s)
				schemes := map[string]bool{"redis": true, "rediss": true, "unix": true, "redis+cluster": true, "rediss+cluster": true}
				if s != "" && (err != nil || !schemes[u.Scheme]) {
					d.errAt(posOf(v), fp, "want a redis://, rediss://, unix:// or redis+cluster:// URL")
				}
				cfg.Redis = s
			}
		case "prefix":
			if s, ok := d.str(v, fp); ok {
				if strings.ContainsAny(s, "{} \t\r\n") {
					d.errAt(posOf(v), fp, "prefix %q must not contain braces or spaces", s)
				}
				cfg.Prefix = s
			}
		case "pollers":
			pollersAt = at
			pollersOK = d.list(v, fp, func(i int, item ast.Node, ip string) {
				p, nameAt := d.poller(item, ip)
				cfg.Pollers = append(cfg.Pollers, p)
				namesAt = append(namesAt, nameAt)
			})
		}
	})
	if _, ok := present["pollers"]; !ok {
		if pollersAt == (pos{}) {
			d.errAt(posOf(body), "pollers", "required")
		} else {
			d.errAt(pollersAt, "pollers", "required: list at least one poller")
		}
	} else if pollersOK && len(cfg.Pollers) == 0 {
		d.errAt(pollersAt, "pollers", "required: list at least one poller")
	}
	// Duplicate names.
	first := map[string]int{}
	for i, p := range cfg.Pollers {
		if p.Name == "" {
			continue
		}
		if j, dup := first[p.Name]; dup {
			d.errAt(namesAt[i], index("pollers", i)+".name", "duplicate poller name %q (first at line %d)", p.Name, cfg.Pollers[j].Line)
			continue
		}
		first[p.Name] = i
	}
	return cfg
}

// keyAt is a key or value given in the file.
type keyAt struct {
	at    pos
	field string
}

func (d *decoder) poller(n ast.Node, field string) (Poller, pos) {
	at := posOf(n)
	p := Poller{Line: at.line}
	nameAt := at
	var uses []keyAt // values that hold ${partition}
	noteUses := func(s string, vat pos, fp string) {
		if strings.Contains(s, PartitionVar) {
			uses = append(uses, keyAt{vat, fp})
		}
	}
	if r, ok := d.resolve(n, field); !ok {
		return p, at
	} else if r == nil {
		d.errAt(at, field, "empty entry: want a poller with name, request, cursor and delivery")
		return p, at
	}
	given := map[string]bool{} // keys present, even with a null value
	var listingKeys []keyAt    // deletes keys that only complete listings use
	present := d.object(n, field, pollerKeys, func(key string, kat pos, v ast.Node, fp string) {
		given[key] = true
		switch key {
		case "name":
			if s, ok := d.str(v, fp); ok {
				p.Name, nameAt = s, posOf(v)
				if !nameRE.MatchString(s) {
					d.errAt(posOf(v), fp, "name %q must match %s", s, nameRE)
				}
			}
		case "partitions":
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
				switch line, dup := seen[s]; {
				case !partitionRE.MatchString(s):
					d.errAt(iat, ip, "partition %q must match %s", s, partitionRE)
				case dup:
					d.errAt(iat, ip, "partition %q is listed twice (first at line %d)", s, line)
				default:
					seen[s] = iat.line
				}
				p.Partitions = append(p.Partitions, s)
			})
		case "request":
			p.Request = d.request(v, kat, fp, noteUses)
		case "items":
			p.Items, _ = d.str(v, fp)
		case "identity":
			p.Identity, _ = d.str(v, fp)
		case "version":
			p.Version, _ = d.str(v, fp)
		case "fingerprint":
			p.Fingerprint = d.strList(v, fp, "field")
		case "cursor":
			p.Cursor = d.cursor(v, kat, fp)
		case "schedule":
			p.Schedule = d.schedule(v, kat, fp)
		case "reconcile":
			p.Reconcile = d.reconcile(v, kat, fp, noteUses)
		case "log":
			p.Log = &Log{}
			lp := d.object(v, fp, logKeys, func(key string, _ pos, v ast.Node, fp string) {
				p.Log.Retention, _ = d.duration(v, fp)
			})
			if _, ok := lp["retention"]; !ok {
				d.errAt(kat, fp+".retention", "required")
			}
		case "deletes":
			p.Deletes, listingKeys = d.deletes(v, fp, noteUses)
		case "commit":
			d.object(v, fp, commitKeys, func(key string, _ pos, v ast.Node, fp string) {
				switch key {
				case "maxItems":
					p.Commit.MaxItems, _ = d.positive(v, fp)
				case "maxBytes":
					p.Commit.MaxBytes, _ = d.positive(v, fp)
				}
			})
		case "schemaVersion":
			if i, ok := d.int(v, fp); ok {
				if i < 0 {
					d.errAt(posOf(v), fp, "must not be negative, got %d", i)
				}
				p.SchemaVersion = i
			}
		case "onSchemaChange":
			p.OnSchemaChange, _ = d.enum(v, fp, "onSchemaChange", schemaChanges)
		case "schema":
			if s, ok := d.str(v, fp); ok && s != "" {
				if !filepath.IsAbs(s) {
					s = filepath.Join(filepath.Dir(d.file), s)
				}
				p.Schema = s
			}
		case "shadow":
			p.Shadow, _ = d.bool(v, fp)
		case "history":
			p.History, _ = d.bool(v, fp)
		case "leaseTTL":
			p.LeaseTTL, _ = d.duration(v, fp)
		case "maxPagesPerCycle":
			p.MaxPagesPerCycle, _ = d.positive(v, fp)
		case "delivery":
			p.Delivery = d.delivery(v, kat, fp)
		}
	})
	if _, ok := present["name"]; !ok {
		d.errAt(at, field+".name", "required")
	}
	// A null request, cursor or delivery is reported by its own decoder.
	if !given["request"] {
		d.errAt(at, field+".request.url", "required")
	}
	if !given["cursor"] {
		d.errAt(at, field+".cursor.strategy", "required (want %s)", orList(strategies))
	}
	if !given["delivery"] {
		d.errAt(at, field+".delivery", "required (one of webhook, stream or stdout)")
	}
	if p.Identity == "" {
		p.Identity = "id"
	}
	// An unknown strategy is reported by the cursor decoder.
	if p.Cursor.Strategy != "" && p.Cursor.Strategy != StrategySnapshotDiff && p.Reconcile == nil {
		for _, k := range listingKeys {
			d.errAt(k.at, k.field, "not used by a %s poller without a reconcile lane: only complete listings (snapshotDiff or reconcile) find deletes", p.Cursor.Strategy)
		}
	}
	if len(p.Partitions) == 0 {
		for _, u := range uses {
			d.errAt(u.at, u.field, "uses %s but the poller lists no partitions", PartitionVar)
		}
	}
	return p, nameAt
}

// positive reads an integer that must be at least 1.
func (d *decoder) positive(v ast.Node, fp string) (int, bool) {
	i, ok := d.int(v, fp)
	if ok && i < 1 {
		d.errAt(posOf(v), fp, "must be at least 1, got %d", i)
		return i, false
	}
	return i, ok
}

// strList reads a list of non-empty strings.
func (d *decoder) strList(n ast.Node, field, what string) []string {
	var out []string
	d.list(n, field, func(i int, item ast.Node, ip string) {
		s, ok := d.str(item, ip)
		if !ok {
			if r, rok := d.resolve(item, ip); rok && r == nil {
				d.errAt(posOf(item), ip, "empty %s", what)
			}
			return
		}
		if s == "" {
			d.errAt(posOf(item), ip, "empty %s", what)
			return
		}
		out = append(out, s)
	})
	return out
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

func (d *decoder) request(n ast.Node, at pos, field string, noteUses func(string, pos, string)) Request {
	var r Request
	present := d.object(n, field, requestKeys, func(key string, _ pos, v ast.Node, fp string) {
		switch key {
		case "url":
			if s, ok := d.str(v, fp); ok {
				r.URL = s
				d.httpURL(s, posOf(v), fp)
				noteUses(s, posOf(v), fp)
			}
		case "query":
			r.Query = d.strMap(v, fp, func(k, val string, vat pos) { noteUses(val, vat, join(fp, k)) })
		case "headers":
			r.Headers = d.strMap(v, fp, func(k, val string, vat pos) { noteUses(val, vat, join(fp, k)) })
		case "timeout":
			r.Timeout, _ = d.duration(v, fp)
		}
	})
	if _, ok := present["url"]; !ok {
		d.errAt(at, field+".url", "required")
	}
	return r
}

func (d *decoder) cursor(n ast.Node, at pos, field string) Cursor {
	var c Cursor
	present := d.object(n, field, cursorKeys, func(key string, _ pos, v ast.Node, fp string) {
		switch key {
		case "strategy":
			c.Strategy, _ = d.enum(v, fp, "strategy", strategies)
		case "field":
			c.Field, _ = d.str(v, fp)
		case "param":
			c.Param, _ = d.str(v, fp)
		case "hasMore":
			c.HasMore, _ = d.str(v, fp)
		case "next":
			c.Next, _ = d.str(v, fp)
		case "formats":
			c.Formats = d.strList(v, fp, "format")
			d.list(v, fp, func(i int, item ast.Node, ip string) {
				if s, ok := d.str(item, ip); ok && s != "" {
					d.checkFormat(s, posOf(item), ip)
				}
			})
		case "limitParam":
			c.LimitParam, _ = d.str(v, fp)
		case "limit":
			c.Limit, _ = d.positive(v, fp)
		case "tieBreaker":
			c.TieBreaker, _ = d.str(v, fp)
		case "deleted":
			c.Deleted, _ = d.str(v, fp)
		case "offset":
			c.Offset, _ = d.bool(v, fp)
		case "start":
			if i, ok := d.int(v, fp); ok {
				if i < 0 {
					d.errAt(posOf(v), fp, "must not be negative, got %d", i)
				}
				c.Start = i
			}
		case "sizeParam":
			c.SizeParam, _ = d.str(v, fp)
		case "size":
			c.Size, _ = d.positive(v, fp)
		case "etag":
			c.ETag, _ = d.bool(v, fp)
		}
	})
	if _, ok := present["strategy"]; !ok {
		d.errAt(at, field+".strategy", "required (want %s)", orList(strategies))
		return c
	}
	if c.Strategy == "" {
		return c // unknown strategy, already reported
	}
	for _, key := range cursorKeys {
		kat, ok := present[key]
		users := cursorKeyStrategies[key]
		if ok && users != nil && !slices.Contains(users, c.Strategy) {
			d.errAt(kat, join(field, key), "not used by the %s strategy (only by %s)", c.Strategy, orList(users))
		}
	}
	need := func(key string) {
		if _, ok := present[key]; !ok {
			d.errAt(at, join(field, key), "required for the %s strategy", c.Strategy)
		}
	}
	switch c.Strategy {
	case StrategyTimestamp:
		need("field")
		need("param")
	case StrategyToken:
		need("param") // next is optional: without it the Link header's rel="next" is followed
	}
	return c
}

// checkFormat accepts the named formats and Go layouts (which must hold a layout element).
func (d *decoder) checkFormat(s string, at pos, field string) {
	if slices.Contains(namedFormats, s) {
		return
	}
	msg := fmt.Sprintf("unknown format %q (want %s, or a Go layout such as %q)", s, orList(namedFormats), time.RFC3339)
	if sug := suggest(s, namedFormats); sug != "" {
		d.errAt(at, field, "%s; did you mean %q?", msg, sug)
		return
	}
	// A Go layout must hold at least one element (2006, 01, 02, 15, 04, 05, …).
	if ref := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC); ref.Format(s) == s {
		d.errAt(at, field, "%s", msg)
	}
}

func (d *decoder) schedule(n ast.Node, _ pos, field string) Schedule {
	var s Schedule
	var maxAt pos
	d.object(n, field, scheduleKeys, func(key string, _ pos, v ast.Node, fp string) {
		switch key {
		case "min":
			s.Min, _ = d.duration(v, fp)
		case "max":
			s.Max, _ = d.duration(v, fp)
			maxAt = posOf(v)
		case "jitter":
			if j, ok := d.float(v, fp); ok {
				if j < 0 || j >= 1 {
					d.errAt(posOf(v), fp, "jitter %v must be in [0, 1)", j)
				}
				s.Jitter = j
			}
		case "adaptive":
			if b, ok := d.bool(v, fp); ok {
				s.Adaptive = &b
			}
		}
	})
	if s.Min > 0 && s.Max > 0 && s.Min > s.Max {
		d.errAt(maxAt, join(field, "max"), "max %s is less than min %s", s.Max, s.Min)
	}
	return s
}

func (d *decoder) reconcile(n ast.Node, at pos, field string, noteUses func(string, pos, string)) *Reconcile {
	r := &Reconcile{}
	present := d.object(n, field, reconcileKeys, func(key string, _ pos, v ast.Node, fp string) {
		switch key {
		case "every":
			r.Every, _ = d.duration(v, fp)
		case "strategy":
			r.Strategy, _ = d.enum(v, fp, "reconcile strategy", reconcileStrategies)
		case "url":
			if s, ok := d.str(v, fp); ok && s != "" {
				r.URL = s
				d.httpURL(s, posOf(v), fp)
				noteUses(s, posOf(v), fp)
			}
		case "param":
			r.Param, _ = d.str(v, fp)
		case "sizeParam":
			r.SizeParam, _ = d.str(v, fp)
		case "size":
			r.Size, _ = d.positive(v, fp)
		case "offset":
			r.Offset, _ = d.bool(v, fp)
		case "hasMore":
			r.HasMore, _ = d.str(v, fp)
		case "maxPages":
			r.MaxPages, _ = d.positive(v, fp)
		}
	})
	if _, ok := present["every"]; !ok {
		d.errAt(at, field+".every", "required")
	}
	return r
}

// deletes decodes the deletes block; it also returns where confirmListings and detail are
// given (null included), which only complete listings use.
func (d *decoder) deletes(n ast.Node, field string, noteUses func(string, pos, string)) (Deletes, []keyAt) {
	var dl Deletes
	var listing []keyAt
	d.object(n, field, deletesKeys, func(key string, kat pos, v ast.Node, fp string) {
		switch key {
		case "confirmListings":
			listing = append(listing, keyAt{kat, fp})
			dl.ConfirmListings, _ = d.positive(v, fp)
		case "detail":
			listing = append(listing, keyAt{kat, fp})
			dl.Detail = d.detail(v, kat, fp, noteUses)
		case "tombstones":
			dl.Tombstones, _ = d.duration(v, fp)
		}
	})
	return dl, listing
}

func (d *decoder) detail(n ast.Node, at pos, field string, noteUses func(string, pos, string)) *Detail {
	dt := &Detail{}
	present := d.object(n, field, detailKeys, func(key string, _ pos, v ast.Node, fp string) {
		switch key {
		case "url":
			if s, ok := d.str(v, fp); ok {
				dt.URL = s
				if d.httpURL(s, posOf(v), fp) && !strings.Contains(s, "{id}") {
					d.errAt(posOf(v), fp, "must contain {id}, replaced by the identity to confirm")
				}
				noteUses(s, posOf(v), fp)
			}
		case "items":
			dt.Items, _ = d.str(v, fp)
		case "query":
			dt.Query = d.strMap(v, fp, func(k, val string, vat pos) { noteUses(val, vat, join(fp, k)) })
		}
	})
	if _, ok := present["url"]; !ok {
		d.errAt(at, field+".url", "required")
	}
	return dt
}

func (d *decoder) delivery(n ast.Node, at pos, field string) Delivery {
	var dl Delivery
	d.object(n, field, deliveryKeys, func(key string, kat pos, v ast.Node, fp string) {
		switch key {
		case "webhook":
			dl.Webhook = d.webhook(v, kat, fp)
		case "stream":
			dl.Stream = &Stream{}
			sp := d.object(v, fp, streamKeys, func(key string, _ pos, v ast.Node, fp string) {
				switch key {
				case "key":
					if k, ok := d.str(v, fp); ok {
						if k == "" {
							d.errAt(posOf(v), fp, "must not be empty")
						}
						dl.Stream.Key = k
					}
				case "maxlen":
					if i, ok := d.int64(v, fp); ok {
						if i < 0 {
							d.errAt(posOf(v), fp, "must not be negative, got %d", i)
						}
						dl.Stream.MaxLen = i
					}
				}
			})
			if _, ok := sp["key"]; !ok {
				d.errAt(kat, fp+".key", "required")
			}
		case "stdout":
			dl.Stdout = &Stdout{}
			d.object(v, fp, nil, func(string, pos, ast.Node, string) {})
		case "concurrency":
			dl.Concurrency, _ = d.positive(v, fp)
		case "orderingKey":
			dl.OrderingKey, _ = d.str(v, fp)
		case "attempts":
			dl.Attempts, _ = d.positive(v, fp)
		case "poison":
			dl.Poison, _ = d.enum(v, fp, "poison", poisons)
		}
	})
	var sinks []string
	if dl.Webhook != nil {
		sinks = append(sinks, "webhook")
	}
	if dl.Stream != nil {
		sinks = append(sinks, "stream")
	}
	if dl.Stdout != nil {
		sinks = append(sinks, "stdout")
	}
	switch len(sinks) {
	case 0:
		d.errAt(at, field, "want one of webhook, stream or stdout")
	case 1:
	default:
		d.errAt(at, field, "want exactly one of webhook, stream or stdout, got %s", strings.Join(sinks, " and "))
	}
	return dl
}

func (d *decoder) webhook(n ast.Node, at pos, field string) *Webhook {
	w := &Webhook{}
	present := d.object(n, field, webhookKeys, func(key string, _ pos, v ast.Node, fp string) {
		switch key {
		case "url":
			if s, ok := d.str(v, fp); ok {
				w.URL = s
				d.httpURL(s, posOf(v), fp)
			}
		case "secret":
			r, ok := d.resolve(v, fp)
			if !ok || r == nil {
				return
			}
			if _, isSeq := r.(*ast.SequenceNode); isSeq {
				d.list(r, fp, func(i int, item ast.Node, ip string) {
					if s, ok := d.secret(item, ip); ok {
						w.Secrets = append(w.Secrets, s)
					}
				})
				if len(w.Secrets) == 0 && len(r.(*ast.SequenceNode).Values) == 0 {
					d.errAt(posOf(v), fp, "empty list: give at least one secret or leave secret out")
				}
			} else if s, ok := d.secret(v, fp); ok {
				w.Secrets = []string{s}
			}
		case "timeout":
			w.Timeout, _ = d.duration(v, fp)
		}
	})
	if _, ok := present["url"]; !ok {
		d.errAt(at, field+".url", "required")
	}
	return w
}

// secret checks a Standard Webhooks secret without ever echoing it.
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
	b64, hasPrefix := strings.CutPrefix(s, "whsec_")
	if !hasPrefix {
		d.errAt(posOf(r), field, "a webhook secret must start with whsec_ followed by base64 (value not shown)")
		return "", false
	}
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		raw, err = base64.RawStdEncoding.DecodeString(b64)
	}
	if err != nil || len(raw) == 0 {
		d.errAt(posOf(r), field, "a webhook secret must be whsec_ followed by valid base64 (value not shown)")
		return "", false
	}
	return s, true
}
