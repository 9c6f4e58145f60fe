// Package config reads the watukuy config file (--config, default ./watukuy.yaml): pollers
// that need no Go code. Every error names the file, the line and column, and the field path;
// unknown keys are errors. Defaults are the engine's business (zero values stay zero), except
// Poller.Identity, which defaults to "id".
//
// One table (schema.go) describes every key of a poller entry: its type, default, range,
// the cursor strategies that use it, its documentation and how it sets the engine's poller.
// Decoding walks it (walk.go), Build runs its build steps (build.go), and docs/configuration.md's table
// of poller keys is rendered from it (reference.go).
//
// String values expand ${VAR} from the environment; ${partition} is never read from the
// environment and stays in the value, to be replaced by the key's partition when a request is
// built; $${X} is a literal ${X}.
package config

import (
	"errors"
	"io/fs"
	"net/url"
	"os"
	"strings"
	"time"

	yaml "github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"

	"github.com/watukuy/watukuy/httppoll"
	"github.com/watukuy/watukuy/watukuytype"
)

// Config is a parsed, validated config file.
type Config struct {
	File    string // the path it was read from (as given)
	Redis   string // optional; flag > env > file is decided by the caller
	Prefix  string
	Pollers []Poller
	// Budgets are the request budgets every worker shares (top-level budgets:).
	Budgets []Budget
	// Admin holds the admin API's tokens (top-level admin:).
	Admin Admin
	// Unset are the delivery and admin fields whose environment variables are not set, read
	// by LoadOperator (which leaves them out instead of failing); Load fails on them.
	Unset []*Error
	// red keeps the values of the file's ${VAR}s out of Build's and Locate's messages.
	red *redactor
}

// unsetOf names the unset delivery fields of poller i.
func (c *Config) unsetOf(i int) string {
	prefix := index("pollers", i) + ".delivery."
	var out []string
	for _, e := range c.Unset {
		if strings.HasPrefix(e.Field, prefix) {
			out = append(out, e.Field+": "+e.Msg)
		}
	}
	return strings.Join(out, "; ")
}

// Delivers reports whether poller i's delivery is set up: no variable of its delivery is
// missing.
func (c *Config) Delivers(i int) bool {
	prefix := index("pollers", i) + ".delivery."
	for _, e := range c.Unset {
		if strings.HasPrefix(e.Field, prefix) {
			return false
		}
	}
	return true
}

// Budget is one entry of budgets: a rate such as 40/s or 2000/min, and a burst.
type Budget struct {
	watukuytype.Budget
	Line   int // line of the entry in the file
	nameAt pos
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
	Budget           string // a budget of budgets: (may hold ${partition})
	budgetAt         pos    // where Budget is given
	History          bool
	LeaseTTL         time.Duration
	MaxPagesPerCycle int
	Circuit          Circuit
	Changes          Changes
	Delivery         Delivery
	Line             int // line of the poller's entry in the file
}

// WithoutPlaces is p without where its entry and keys are in the file (moving an entry is no
// change of the poller).
func (p Poller) WithoutPlaces() Poller {
	p.Line, p.budgetAt = 0, pos{}
	return p
}

// Request is how a page is fetched. URL, Query values and Headers values may hold
// ${partition}.
type Request struct {
	URL          string
	Query        map[string]string
	Headers      map[string]string
	Timeout      time.Duration
	MaxBodyBytes int64 // 0 = the default
}

// usesPartition reports whether the request's URL, query or headers hold ${partition}.
func (r Request) usesPartition() bool {
	if strings.Contains(r.URL, PartitionVar) {
		return true
	}
	for _, vs := range []map[string]string{r.Query, r.Headers} {
		for _, v := range vs {
			if strings.Contains(v, PartitionVar) {
				return true
			}
		}
	}
	return false
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

// Schedule is the adaptive polling interval and the failure backoff.
type Schedule struct {
	Min, Max time.Duration
	Jitter   *float64 // nil = default; 0 = none
	Adaptive *bool    // nil = default (true)
	Backoff  Backoff
}

// Backoff spaces failed cycles; zero values are the defaults.
type Backoff struct {
	Base, Max time.Duration
	Factor    float64
}

// Circuit is the circuit breaker; zero values are the defaults.
type Circuit struct {
	Failures   int
	ProbeEvery time.Duration
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

// Changes is what updated and deleted events say of the change (watukuytype.Changes); zero
// values are the defaults.
type Changes struct {
	Patch    bool
	Ignore   []string // JSON Pointers or gjson-style dotted paths, each checked at decode time
	MaxBytes int      // 0 = the default
}

// Poison values.
const (
	PoisonPark = "park"
	PoisonHalt = "halt"
)

// Delivery is where events go; exactly one of Webhook, Stream, Stdout, NATS, AMQP and
// Postgres is set.
type Delivery struct {
	Webhook      *Webhook
	Stream       *Stream
	Stdout       *Stdout
	NATS         *NATS
	AMQP         *AMQP
	Postgres     *Postgres
	Concurrency  int
	Batch        int
	OrderingKey  string
	Attempts     int
	Retry        Backoff       // zero values are the defaults
	RetryHorizon time.Duration // 0: the default; RetryHorizonNone: poison after one try
	Poison       string        // "", "park" or "halt"
}

// RetryHorizonNone is delivery.retry.horizon: none.
const RetryHorizonNone time.Duration = -1

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

// NATS publishes events to NATS JetStream (package natssink).
type NATS struct {
	URL, Subject, Stream       string
	Create                     bool
	DuplicateWindow            time.Duration
	CredsFile, NKeyFile, Token string
	TLS                        TLS
	Timeout                    time.Duration
}

// AMQP publishes events to a RabbitMQ exchange (package amqpsink).
type AMQP struct {
	URL, Exchange, RoutingKey string
	TLS                       TLS
	Timeout                   time.Duration
}

// Postgres inserts events into a PostgreSQL table (package pgsink).
type Postgres struct {
	URL, Table string
	Create     bool
	MaxConns   int
	Timeout    time.Duration
}

// TLS names the files of a broker connection's TLS: the CA that signs the server's
// certificate, and the client's own certificate and key.
type TLS struct {
	CAFile, CertFile, KeyFile string
}

// SinkKinds maps each poller's name to its sink's kind (Delivery.Kind), for the metrics.
func (c *Config) SinkKinds() map[string]string {
	m := make(map[string]string, len(c.Pollers))
	for _, pc := range c.Pollers {
		m[pc.Name] = pc.Delivery.Kind()
	}
	return m
}

// Describe names the sink and its target, credentials redacted ("nats nats://host:4222
// subject watukuy.${poller}").
func (d Delivery) Describe() string {
	switch {
	case d.Webhook != nil:
		return "webhook " + httppoll.RedactURL(d.Webhook.URL)
	case d.Stream != nil:
		return "stream " + d.Stream.Key
	case d.NATS != nil:
		s := "nats " + redactURLs(d.NATS.URL) + " subject " + d.NATS.Subject
		if d.NATS.Stream != "" {
			s += " stream " + d.NATS.Stream
		}
		return s
	case d.AMQP != nil:
		ex := d.AMQP.Exchange
		if ex == "" {
			ex = `""`
		}
		return "amqp " + httppoll.RedactURL(d.AMQP.URL) + " exchange " + ex + " routing key " + d.AMQP.RoutingKey
	case d.Postgres != nil:
		return "postgres " + httppoll.RedactURL(d.Postgres.URL) + " table " + d.Postgres.Table
	}
	return "stdout"
}

// redactURLs redacts each URL of a comma-separated list (NATS's servers).
func redactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		parts[i] = httppoll.RedactURL(strings.TrimSpace(p))
	}
	return strings.Join(parts, ",")
}

// Kind names the delivery's sink: webhook, stream, stdout, nats, amqp or postgres.
func (d Delivery) Kind() string {
	switch {
	case d.Webhook != nil:
		return "webhook"
	case d.Stream != nil:
		return "stream"
	case d.NATS != nil:
		return "nats"
	case d.AMQP != nil:
		return "amqp"
	case d.Postgres != nil:
		return "postgres"
	}
	return "stdout"
}

// Load reads and validates path and the JSON Schema files it names, so that one run reports
// every error. getenv expands ${VAR}; nil means the process environment (then a variable set
// to "" is allowed; with a getenv function "" counts as not set).
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
	return parse(path, data, getenv, true)
}

// LoadOperator is Load for the operator commands, which deliver nothing and serve no API: a
// variable missing in a delivery or admin field (a webhook secret, an admin token only the
// workers have) leaves that field out, listed in Config.Unset, instead of failing.
func LoadOperator(path string, getenv func(string) string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Load(path, getenv) // the same error
	}
	return parseWith(&decoder{file: path, files: true, deferSecrets: true}, data, getenv)
}

// Parse is Load on bytes already read, without reading the schema files they name (Build
// does); file is the name used in errors and the base of relative schema paths.
func Parse(file string, data []byte, getenv func(string) string) (*Config, error) {
	return parse(file, data, getenv, false)
}

// parse is Parse; with files it also compiles the schema files the pollers name.
func parse(file string, data []byte, getenv func(string) string, files bool) (*Config, error) {
	return parseWith(&decoder{file: file, files: files}, data, getenv)
}

// parseWith decodes data with d (its file, files and deferSecrets set).
func parseWith(d *decoder, data []byte, getenv func(string) string) (*Config, error) {
	file := d.file
	lookup := os.LookupEnv
	if getenv != nil {
		lookup = func(k string) (string, bool) {
			v := getenv(k)
			return v, v != ""
		}
	}
	d.lookup, d.anchors, d.red = lookup, map[string]ast.Node{}, &redactor{}
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
	cfg.Unset, cfg.red = d.unset, d.red
	return cfg, nil
}

var configKeys = []string{"redis", "prefix", "budgets", "admin", "pollers"}

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
		d.typeErr(r, "", "a mapping with redis, prefix, budgets, admin and pollers")
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
		case "budgets":
			d.list(v, fp, func(i int, item ast.Node, ip string) {
				if b, ok := d.budget(item, ip); ok {
					cfg.Budgets = append(cfg.Budgets, b)
				}
			})
		case "admin":
			d.admin(v, fp, cfg)
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
	d.checkBudgets(cfg)
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

// poller decodes one entry of pollers; it also returns where the entry's name is.
func (d *decoder) poller(n ast.Node, field string) (Poller, pos) {
	at := posOf(n)
	p := Poller{Line: at.line}
	if r, ok := d.resolve(n, field); !ok {
		return p, at
	} else if r == nil {
		d.errAt(at, field, "empty entry: want a poller with name, request, cursor and delivery")
		return p, at
	}
	ps := &pollerState{p: &p, nameAt: at}
	d.block(ps, pollerEntry, n, at, field)
	return p, ps.nameAt
}
