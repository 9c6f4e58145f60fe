package config

import (
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/watukuytype"
)

const testSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

// envOf returns a getenv function over a fixed map.
func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func ptr[T any](v T) *T { return &v }

func TestLoadFullExample(t *testing.T) {
	cfg, err := Load("testdata/full.yaml", envOf(map[string]string{
		"SHOP_TOKEN":     "s3cr3t",
		"WEBHOOK_SECRET": testSecret,
	}))
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		File:   "testdata/full.yaml",
		Redis:  "redis://127.0.0.1:6379/0",
		Prefix: "wk",
		Pollers: []Poller{{
			Name:       "orders",
			Partitions: []string{"t_1", "t_2"},
			Request: Request{
				URL:     "http://api.example.com/orders",
				Query:   map[string]string{"limit": "100"},
				Headers: map[string]string{"Authorization": "Bearer s3cr3t"},
				Timeout: 10 * time.Second,
			},
			Items:       "data",
			Identity:    "id",
			Version:     "updated_at",
			Fingerprint: []string{"status", "total"},
			Cursor: Cursor{
				Strategy: StrategyTimestamp,
				Field:    "updated_at",
				Param:    "updated_since",
				HasMore:  "has_more",
			},
			Schedule:  Schedule{Min: 5 * time.Second, Max: 5 * time.Minute, Jitter: ptr(0.1), Adaptive: ptr(true)},
			Reconcile: &Reconcile{Every: 24 * time.Hour},
			Log:       &Log{Retention: 7 * 24 * time.Hour},
			Deletes: Deletes{ConfirmListings: 2, Tombstones: 30 * 24 * time.Hour, Detail: &Detail{
				URL: "http://api.example.com/orders/{id}", Items: "data", Query: map[string]string{"expand": "all"}}},
			Commit:        Commit{MaxItems: 500, MaxBytes: 1 << 20},
			SchemaVersion: 1,
			Schema:        filepath.Join("testdata", "schemas", "order.json"),
			Delivery: Delivery{
				Webhook:     &Webhook{URL: "https://hooks.example.com/x", Secrets: []string{testSecret}, Timeout: 10 * time.Second},
				Concurrency: 4,
				OrderingKey: "identity",
				Attempts:    8,
				Poison:      PoisonPark,
			},
			Line: 4,
		}},
	}
	want.red = cfg.red // what the variables expanded to, kept out of messages
	if !reflect.DeepEqual(cfg, want) {
		t.Errorf("got\n%#v\nwant\n%#v", cfg, want)
		if !reflect.DeepEqual(cfg.Pollers[0], want.Pollers[0]) {
			t.Errorf("poller differs:\n%+v\n%+v", cfg.Pollers[0], want.Pollers[0])
		}
	}
}

// TestLoadFullExampleUnsetEnv: the same file without its variables names both, with file:line.
func TestLoadFullExampleUnsetEnv(t *testing.T) {
	_, err := Load("testdata/full.yaml", envOf(nil))
	for _, want := range []string{
		`testdata/full.yaml:9:32: pollers[0].request.headers.Authorization: environment variable "SHOP_TOKEN" is not set`,
		`testdata/full.yaml:34:59: pollers[0].delivery.webhook.secret: environment variable "WEBHOOK_SECRET" is not set`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v\ndoes not contain %q", err, want)
		}
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"), nil)
	var ce *Error
	if !errors.As(err, &ce) || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "nope.yaml: cannot read") {
		t.Fatalf("got %v", err)
	}
}

// valid is a minimal valid file; error cases below change one thing at a time.
const valid = `pollers:
  - name: orders
    request:
      url: http://api.example.com/orders
    cursor:
      strategy: page
    delivery:
      stdout: {}
`

// validSnapshot is valid with a snapshotDiff cursor, whose complete listings find deletes.
var validSnapshot = strings.Replace(valid, "strategy: page", "strategy: snapshotDiff", 1)

func TestValidMinimal(t *testing.T) {
	cfg, err := Parse("w.yaml", []byte(valid), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Pollers[0]
	if p.Name != "orders" || p.Identity != "id" || p.Delivery.Stdout == nil || p.Reconcile != nil || p.Log != nil ||
		p.Schedule.Adaptive != nil || p.Line != 2 || p.Delivery.Attempts != 0 || p.LeaseTTL != 0 {
		t.Errorf("got %+v", p)
	}
}

// Budgets: a rate per second, minute, hour or duration, a default burst, and pollers naming
// them (templated per partition).
func TestBudgets(t *testing.T) {
	yaml := "budgets:\n  - {name: \"shop-${partition}\", rate: 2000/min}\n  - {name: api, rate: 40/s, burst: 5}\n" +
		strings.Replace(valid, "  - name: orders\n", "  - name: orders\n    partitions: [a]\n    budget: shop-${partition}\n", 1)
	cfg, err := Parse("w.yaml", []byte(yaml), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := []watukuytype.Budget{{Name: "shop-${partition}", Rate: 2000, Per: time.Minute}, {Name: "api", Rate: 40, Per: time.Second, Burst: 5}}
	if got := cfg.EngineBudgets(); !reflect.DeepEqual(got, want) {
		t.Errorf("budgets %+v, want %+v", got, want)
	}
	if cfg.Pollers[0].Budget != "shop-${partition}" {
		t.Errorf("poller budget %q", cfg.Pollers[0].Budget)
	}
	ps, err := Build(cfg, nil, io.Discard, nil, zerolog.Nop())
	if err != nil || ps[0].Budget != "shop-${partition}" {
		t.Fatalf("Build: %v, budget %q", err, ps[0].Budget)
	}
}

// TestErrors: each case must produce an error whose text contains every want string; every
// want names the file:line[:column] and the field path.
func TestErrors(t *testing.T) {
	env := map[string]string{"SET": "x", "N": "4", "BAD_N": "four"}
	cases := []struct {
		name string
		yaml string
		want []string
	}{
		// YAML syntax.
		{"syntax unclosed flow sequence", "pollers:\n  - name: [a, b\n    request: {}\n",
			[]string{"w.yaml:3:"}},
		{"syntax tab indent", "pollers:\n\t- name: a\n",
			[]string{"w.yaml:2:1: ", "cannot start any token"}},
		{"syntax duplicate key", "pollers:\n  - name: a\n    name: b\n",
			[]string{"w.yaml:3:5: ", `mapping key "name" already defined at [2:5]`}},
		{"syntax bad indentation", "pollers:\n  - name: a\n    request:\n      url: http://x\n     method: GET\n",
			[]string{"w.yaml:5:6: "}},
		{"second document", valid + "---\n" + valid,
			[]string{"w.yaml:10:1: want a single YAML document"}},

		// Unknown keys.
		{"unknown key suggestion case", strings.Replace(valid, "strategy: page", "strategy: page\n      hasmore: more", 1),
			[]string{`w.yaml:7:7: pollers[0].cursor.hasmore: unknown key "hasmore" (did you mean "hasMore"?)`}},
		{"unknown key suggestion snake", strings.Replace(valid, "strategy: page", "strategy: page\n      has_more: more", 1),
			[]string{`w.yaml:7:7: pollers[0].cursor.has_more: unknown key "has_more" (did you mean "hasMore"?)`}},
		{"unknown key suggestion typo", strings.Replace(valid, "stdout: {}", "webhook: {url: http://h, secrets: []}", 1),
			[]string{`w.yaml:8:32: pollers[0].delivery.webhook.secrets: unknown key "secrets" (did you mean "secret"?)`}},
		{"unknown key no suggestion", "wibble: 1\n" + valid,
			[]string{`w.yaml:1:1: wibble: unknown key "wibble" (want one of redis, prefix, budgets, admin, pollers)`}},
		{"unknown key in stdout", strings.Replace(valid, "stdout: {}", "stdout: {pretty: true}", 1),
			[]string{`w.yaml:8:16: pollers[0].delivery.stdout.pretty: unknown key "pretty" (stdout takes no keys)`}},
		{"unknown key in deletes", strings.Replace(validSnapshot, "  request:", "  deletes: {confirmListing: 2}\n    request:", 1),
			[]string{`w.yaml:3:15: pollers[0].deletes.confirmListing: unknown key "confirmListing" (did you mean "confirmListings"?)`}},
		{"unknown key in detail", strings.Replace(validSnapshot, "  request:", "  deletes: {detail: {url: \"http://h/{id}\", path: data}}\n    request:", 1),
			[]string{`w.yaml:3:46: pollers[0].deletes.detail.path: unknown key "path" (want one of url, items, query)`}},
		{"unknown key in commit", strings.Replace(valid, "  request:", "  commit: {maxitems: 5}\n    request:", 1),
			[]string{`w.yaml:3:14: pollers[0].commit.maxitems: unknown key "maxitems" (did you mean "maxItems"?)`}},
		{"unknown key request method", strings.Replace(valid, "url: http", "method: POST\n      url: http", 1),
			[]string{`w.yaml:4:7: pollers[0].request.method: unknown key "method"`}},

		// Wrong types.
		{"wrong type concurrency", strings.Replace(valid, "stdout: {}", "stdout: {}\n      concurrency: \"four\"", 1),
			[]string{`w.yaml:9:20: pollers[0].delivery.concurrency: want an integer, got string "four"`}},
		{"wrong type integer from env", strings.Replace(valid, "stdout: {}", "stdout: {}\n      attempts: ${BAD_N}", 1),
			[]string{`w.yaml:9:17: pollers[0].delivery.attempts: want an integer, but the value from ${BAD_N} is not (the value is not shown)`}},
		{"wrong type partitions", strings.Replace(valid, "  request:", "  partitions: t_1\n    request:", 1),
			[]string{`w.yaml:3:17: pollers[0].partitions: want a list, got string "t_1"`}},
		{"wrong type request", strings.Replace(valid, "request:\n      url: http://api.example.com/orders", "request: http://api.example.com/orders", 1),
			[]string{`w.yaml:3:14: pollers[0].request: want a mapping, got string "http://api.example.com/orders"`}},
		{"wrong type bool", strings.Replace(valid, "  request:", "  shadow: yes\n    request:", 1),
			[]string{`w.yaml:3:13: pollers[0].shadow: want true or false, got string "yes"`}},
		{"wrong type jitter", strings.Replace(valid, "  request:", "  schedule: {jitter: high}\n    request:", 1),
			[]string{`w.yaml:3:24: pollers[0].schedule.jitter: want a number, got string "high"`}},
		{"wrong type pollers", "pollers: {name: a}\n",
			[]string{`w.yaml:1:10: pollers: want a list, got mapping`}},
		{"wrong type maxBytes", strings.Replace(valid, "  request:", "  commit: {maxBytes: 1MiB}\n    request:", 1),
			[]string{`w.yaml:3:24: pollers[0].commit.maxBytes: want an integer, got string "1MiB"`}},
		{"wrong type detail", strings.Replace(validSnapshot, "  request:", "  deletes: {detail: \"http://h/{id}\"}\n    request:", 1),
			[]string{`w.yaml:3:23: pollers[0].deletes.detail: want a mapping, got string "http://h/{id}"`}},
		{"wrong type secret", strings.Replace(valid, "stdout: {}", "webhook: {url: http://h, secret: {a: b}}", 1),
			[]string{`w.yaml:8:40: pollers[0].delivery.webhook.secret: want a string, got mapping`}},

		// Durations.
		{"bad duration no unit", strings.Replace(valid, "url: http://api.example.com/orders", "url: http://api.example.com/orders\n      timeout: 10", 1),
			[]string{`w.yaml:5:16: pollers[0].request.timeout: bad duration "10"`}},
		{"bad duration unit", strings.Replace(valid, "  request:", "  schedule: {min: 5x}\n    request:", 1),
			[]string{`w.yaml:3:21: pollers[0].schedule.min: bad duration "5x"`}},
		{"bad duration days after hours", strings.Replace(valid, "  request:", "  log: {retention: 12h1d}\n    request:", 1),
			[]string{`w.yaml:3:22: pollers[0].log.retention: bad duration "12h1d"`}},
		{"negative duration", strings.Replace(valid, "  request:", "  leaseTTL: -1s\n    request:", 1),
			[]string{`w.yaml:3:15: pollers[0].leaseTTL: duration "-1s" must be positive`}},
		{"bad duration tombstones", strings.Replace(valid, "  request:", "  deletes: {tombstones: 30}\n    request:", 1),
			[]string{`w.yaml:3:27: pollers[0].deletes.tombstones: bad duration "30"`}},
		{"zero duration tombstones", strings.Replace(valid, "  request:", "  deletes: {tombstones: 0s}\n    request:", 1),
			[]string{`w.yaml:3:27: pollers[0].deletes.tombstones: duration "0s" must be positive`}},

		// Missing required fields.
		{"missing pollers", "prefix: wk\n", []string{`w.yaml:1:1: pollers: required`}},
		{"empty file", "", []string{`w.yaml:1: pollers: required`}},
		{"empty pollers", "pollers: []\n", []string{`w.yaml:1:1: pollers: required: list at least one poller`}},
		{"missing name", strings.Replace(valid, "- name: orders\n    request:", "- request:", 1),
			[]string{`w.yaml:2:5: pollers[0].name: required`}},
		{"missing request url", strings.Replace(valid, "url: http://api.example.com/orders", "timeout: 5s", 1),
			[]string{`w.yaml:3:5: pollers[0].request.url: required`}},
		{"missing request", strings.Replace(valid, "request:\n      url: http://api.example.com/orders\n    ", "", 1),
			[]string{`w.yaml:2:5: pollers[0].request.url: required`}},
		{"missing cursor", strings.Replace(valid, "cursor:\n      strategy: page\n    ", "", 1),
			[]string{`w.yaml:2:5: pollers[0].cursor.strategy: required`}},
		{"missing strategy", strings.Replace(valid, "strategy: page", "param: p", 1),
			[]string{`w.yaml:5:5: pollers[0].cursor.strategy: required (want timestamp, token, page or snapshotDiff)`}},
		{"missing timestamp field and param", strings.Replace(valid, "strategy: page", "strategy: timestamp", 1),
			[]string{`w.yaml:5:5: pollers[0].cursor.field: required for the timestamp strategy`,
				`w.yaml:5:5: pollers[0].cursor.param: required for the timestamp strategy`}},
		{"missing token param", strings.Replace(valid, "strategy: page", "strategy: token\n      next: next_cursor", 1),
			[]string{`w.yaml:5:5: pollers[0].cursor.param: required for the token strategy`}},
		{"missing delivery", strings.Replace(valid, "    delivery:\n      stdout: {}\n", "", 1),
			[]string{`w.yaml:2:5: pollers[0].delivery: required (one of webhook, stream, stdout, nats, amqp or postgres)`}},
		{"delivery without sink", strings.Replace(valid, "stdout: {}", "attempts: 3", 1),
			[]string{`w.yaml:7:5: pollers[0].delivery: want one of webhook, stream, stdout, nats, amqp or postgres`}},
		{"delivery two sinks", strings.Replace(valid, "stdout: {}", "stdout: {}\n      stream: {key: ev}", 1),
			[]string{`w.yaml:7:5: pollers[0].delivery: want exactly one of webhook, stream, stdout, nats, amqp or postgres, got stream and stdout`}},
		{"webhook without url", strings.Replace(valid, "stdout: {}", "webhook: {timeout: 5s}", 1),
			[]string{`w.yaml:8:7: pollers[0].delivery.webhook.url: required`}},
		{"stream without key", strings.Replace(valid, "stdout: {}", "stream: {maxlen: 10}", 1),
			[]string{`w.yaml:8:7: pollers[0].delivery.stream.key: required`}},
		{"detail without url", strings.Replace(validSnapshot, "  request:", "  deletes: {detail: {items: data}}\n    request:", 1),
			[]string{`w.yaml:3:15: pollers[0].deletes.detail.url: required`}},
		{"reconcile without every", strings.Replace(valid, "  request:", "  reconcile: {maxPages: 10}\n    request:", 1),
			[]string{`w.yaml:3:5: pollers[0].reconcile.every: required`}},

		// Unknown enum values.
		{"unknown strategy", strings.Replace(valid, "strategy: page", "strategy: foo", 1),
			[]string{`w.yaml:6:17: pollers[0].cursor.strategy: unknown strategy "foo" (want timestamp, token, page or snapshotDiff)`}},
		{"unknown strategy typo", strings.Replace(valid, "strategy: page", "strategy: snapshotdiff", 1),
			[]string{`w.yaml:6:17: pollers[0].cursor.strategy: unknown strategy "snapshotdiff"`, `did you mean "snapshotDiff"?`}},
		{"unknown poison", strings.Replace(valid, "stdout: {}", "stdout: {}\n      poison: drop", 1),
			[]string{`w.yaml:9:15: pollers[0].delivery.poison: unknown poison "drop" (want park or halt)`}},
		{"unknown onSchemaChange", strings.Replace(valid, "  request:", "  onSchemaChange: ignore\n    request:", 1),
			[]string{`w.yaml:3:21: pollers[0].onSchemaChange: unknown onSchemaChange "ignore" (want rebaseline or emit)`}},
		{"unknown reconcile strategy", strings.Replace(valid, "  request:", "  reconcile: {every: 1h, strategy: token}\n    request:", 1),
			[]string{`w.yaml:3:38: pollers[0].reconcile.strategy: unknown reconcile strategy "token" (want page or snapshotDiff)`}},
		{"unknown format", strings.Replace(valid, "strategy: page", "strategy: timestamp\n      field: t\n      param: since\n      formats: [rfc3339, epoch_sec, nonsense]", 1),
			[]string{`w.yaml:9:26: pollers[0].cursor.formats[1]: unknown format "epoch_sec"`, `did you mean "epoch_s"?`,
				`w.yaml:9:37: pollers[0].cursor.formats[2]: unknown format "nonsense"`}},
		{"confirmListings without complete listings", strings.Replace(valid, "  request:", "  deletes: {confirmListings: 2}\n    request:", 1),
			[]string{`w.yaml:3:15: pollers[0].deletes.confirmListings: not used by a page poller without a reconcile lane: only complete listings (snapshotDiff or reconcile) find deletes`}},
		{"detail without complete listings", strings.Replace(valid, "strategy: page", "strategy: token\n      param: cursor\n    deletes:\n      detail: {url: \"http://h/{id}\"}", 1),
			[]string{`w.yaml:9:7: pollers[0].deletes.detail: not used by a token poller without a reconcile lane`}},
		{"cursor key of another strategy", strings.Replace(valid, "strategy: page", "strategy: page\n      next: next_cursor", 1),
			[]string{`w.yaml:7:7: pollers[0].cursor.next: not used by the page strategy (only by token)`}},

		// Environment.
		{"unset env var", strings.Replace(valid, "url: http://api.example.com/orders", "url: http://api.example.com/orders\n      headers:\n        Authorization: Bearer ${NOT_SET}", 1),
			[]string{`w.yaml:6:24: pollers[0].request.headers.Authorization: environment variable "NOT_SET" is not set`}},
		{"malformed env ref", strings.Replace(valid, "url: http://api.example.com/orders", "url: http://api.example.com/orders?k=${A-B}", 1),
			[]string{`w.yaml:4:12: pollers[0].request.url: invalid environment variable name "A-B"`}},
		{"unterminated env ref", strings.Replace(valid, "url: http://api.example.com/orders", "url: http://api.example.com/orders?k=${SET", 1),
			[]string{`w.yaml:4:12: pollers[0].request.url: unterminated "${SET"`}},
		{"detail partition without partitions", strings.Replace(validSnapshot, "  request:", "  deletes: {detail: {url: \"http://h/${partition}/{id}\", query: {t: \"${partition}\"}}}\n    request:", 1),
			[]string{`w.yaml:3:29: pollers[0].deletes.detail.url: uses ${partition} but the poller lists no partitions`,
				`w.yaml:3:70: pollers[0].deletes.detail.query.t: uses ${partition} but the poller lists no partitions`}},
		{"partition without partitions", strings.Replace(valid, "url: http://api.example.com/orders", "url: http://api.example.com/t/${partition}/orders", 1),
			[]string{`w.yaml:4:12: pollers[0].request.url: uses ${partition} but the poller lists no partitions`}},

		// Names, partitions, ranges, secrets, URLs.
		{"duplicate poller name", valid + strings.TrimPrefix(valid, "pollers:\n"),
			[]string{`w.yaml:9:11: pollers[1].name: duplicate poller name "orders" (first at line 2)`}},
		{"bad poller name", strings.Replace(valid, "name: orders", "name: -orders", 1),
			[]string{`w.yaml:2:11: pollers[0].name: name "-orders" must match`}},
		{"duplicate partition", strings.Replace(valid, "  request:", "  partitions: [t_1, t_2, t_1]\n    request:", 1),
			[]string{`w.yaml:3:28: pollers[0].partitions[2]: partition "t_1" is listed twice (first at line 3)`}},
		{"bad partition", strings.Replace(valid, "  request:", "  partitions: [\"t 1\"]\n    request:", 1),
			[]string{`w.yaml:3:18: pollers[0].partitions[0]: partition "t 1" must match`}},
		{"the unpartitioned key's name", strings.Replace(valid, "  request:", "  partitions: [t_1, \"-\"]\n    request:", 1),
			[]string{`w.yaml:3:23: pollers[0].partitions[1]: partition "-" is reserved`}},
		{"min greater than max", strings.Replace(valid, "  request:", "  schedule: {min: 5m, max: 5s}\n    request:", 1),
			[]string{`w.yaml:3:30: pollers[0].schedule.max: max 5s is less than min 5m0s`}},
		{"jitter out of range", strings.Replace(valid, "  request:", "  schedule: {jitter: 1.0}\n    request:", 1),
			[]string{`w.yaml:3:24: pollers[0].schedule.jitter: jitter 1 must be in [0, 1)`}},
		{"confirmListings zero", strings.Replace(validSnapshot, "  request:", "  deletes: {confirmListings: 0}\n    request:", 1),
			[]string{`w.yaml:3:32: pollers[0].deletes.confirmListings: must be at least 1, got 0`}},
		{"maxItems zero", strings.Replace(valid, "  request:", "  commit: {maxItems: 0}\n    request:", 1),
			[]string{`w.yaml:3:24: pollers[0].commit.maxItems: must be at least 1, got 0`}},
		{"maxBytes negative", strings.Replace(valid, "  request:", "  commit: {maxBytes: -1}\n    request:", 1),
			[]string{`w.yaml:3:24: pollers[0].commit.maxBytes: must be at least 1, got -1`}},
		{"detail url not http", strings.Replace(validSnapshot, "  request:", "  deletes: {detail: {url: \"ftp://h/{id}\"}}\n    request:", 1),
			[]string{`w.yaml:3:29: pollers[0].deletes.detail.url: want an http:// or https:// URL`}},
		{"detail url without id", strings.Replace(validSnapshot, "  request:", "  deletes: {detail: {url: \"http://h/customers\"}}\n    request:", 1),
			[]string{`w.yaml:3:29: pollers[0].deletes.detail.url: must contain {id}`}},
		{"attempts zero", strings.Replace(valid, "stdout: {}", "stdout: {}\n      attempts: 0", 1),
			[]string{`w.yaml:9:17: pollers[0].delivery.attempts: must be at least 1, got 0`}},
		{"concurrency negative", strings.Replace(valid, "stdout: {}", "stdout: {}\n      concurrency: -2", 1),
			[]string{`w.yaml:9:20: pollers[0].delivery.concurrency: must be at least 1, got -2`}},
		{"secret without prefix", strings.Replace(valid, "stdout: {}", "webhook: {url: http://h, secret: MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}", 1),
			[]string{`w.yaml:8:40: pollers[0].delivery.webhook.secret: a webhook secret: must start with "whsec_" (value not shown); make one with: echo whsec_$(head -c 32 /dev/urandom | base64)`}},
		{"secret bad base64 in list", strings.Replace(valid, "stdout: {}", "webhook: {url: http://h, secret: ["+testSecret+", whsec_***]}", 1),
			[]string{`w.yaml:8:81: pollers[0].delivery.webhook.secret[1]: a webhook secret: the part after "whsec_" is not standard base64`}},
		{"webhook url not http", strings.Replace(valid, "stdout: {}", "webhook: {url: ftp://h}", 1),
			[]string{`w.yaml:8:22: pollers[0].delivery.webhook.url: want an http:// or https:// URL, got "ftp://h"`}},
		{"request url relative", strings.Replace(valid, "url: http://api.example.com/orders", "url: /orders", 1),
			[]string{`w.yaml:4:12: pollers[0].request.url: want an http:// or https:// URL`}},
		{"redis url", "redis: 127.0.0.1:6379\n" + valid,
			[]string{`w.yaml:1:8: redis: want a redis://, rediss://, unix:// or redis+cluster:// URL`}},
		{"prefix with braces", "prefix: \"{wk}\"\n" + valid,
			[]string{`w.yaml:1:9: prefix: prefix "{wk}" must not contain braces`}},
		{"budget rate without period", "budgets:\n  - {name: shop, rate: 40}\n" + valid,
			[]string{`w.yaml:2:24: budgets[0].rate: rate "40": want requests/period, such as 40/s or 2000/min`}},
		{"budget rate unknown period", "budgets:\n  - {name: shop, rate: 40/fortnight}\n" + valid,
			[]string{`w.yaml:2:24: budgets[0].rate: rate "40/fortnight": period "fortnight"`}},
		{"budget burst zero", "budgets:\n  - {name: shop, rate: 40/s, burst: 0}\n" + valid,
			[]string{`w.yaml:2:37: budgets[0].burst: must be at least 1`}},
		{"budget without rate", "budgets:\n  - name: shop\n" + valid,
			[]string{`w.yaml:2:5: budgets[0].rate: required`}},
		{"budget name with braces", "budgets:\n  - {name: \"a{b}\", rate: 1/s}\n" + valid,
			[]string{`w.yaml:2:5: budgets[0].name: "a{b}": want a non-empty name without braces`}},
		{"budget defined twice", "budgets:\n  - {name: shop, rate: 1/s}\n  - {name: shop, rate: 2/s}\n" + valid,
			[]string{`w.yaml:3:12: budgets[1].name: duplicate budget name "shop" (first at line 2)`}},
		{"poller budget undefined", "budgets:\n  - {name: shop, rate: 1/s}\n" + strings.Replace(valid, "    request:", "    budget: shopp\n    request:", 1),
			[]string{`w.yaml:5:13: pollers[0].budget: names budget "shopp", which budgets: does not define (it defines [shop])`}},
		{"unknown alias", strings.Replace(valid, "stdout: {}", "stdout: *nope", 1),
			[]string{`w.yaml:8:15: pollers[0].delivery.stdout: unknown alias *nope`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("w.yaml", []byte(tc.yaml), envOf(env))
			if err == nil {
				t.Fatalf("no error; got %+v", cfg)
			}
			if cfg != nil {
				t.Errorf("a config came back with the error")
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.File != "w.yaml" || ce.Line == 0 {
				t.Errorf("error %v is not a positioned *Error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error:\n%v\ndoes not contain:\n%s", err, w)
				}
			}
		})
	}
}

// TestSeveralErrors: every problem of the file is reported at once, sorted by line.
func TestSeveralErrors(t *testing.T) {
	src := `pollers:
  - name: orders
    request:
      url: http://api.example.com/orders
      timeout: soon
    cursor:
      strategy: timestamp
      feild: updated_at
      param: since
    delivery:
      stdout: {}
      concurrency: many
  - name: orders
    request:
      url: http://api.example.com/orders
    cursor: {strategy: nope}
    delivery: {stdout: {}}
`
	_, err := Parse("w.yaml", []byte(src), envOf(nil))
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		`w.yaml:5:16: pollers[0].request.timeout: bad duration "soon"`,
		`w.yaml:6:5: pollers[0].cursor.field: required for the timestamp strategy`,
		`w.yaml:8:7: pollers[0].cursor.feild: unknown key "feild" (did you mean "field"?)`,
		`w.yaml:12:20: pollers[0].delivery.concurrency: want an integer, got string "many"`,
		`w.yaml:13:11: pollers[1].name: duplicate poller name "orders" (first at line 2)`,
		`w.yaml:16:24: pollers[1].cursor.strategy: unknown strategy "nope"`,
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("error %d:\n got %s\nwant %s…", i, lines[i], w)
		}
	}
	// Each one is a *Error.
	var n int
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var ce *Error
		if errors.As(e, &ce) && ce.Line > 0 && ce.Field != "" {
			n++
		}
	}
	if n != len(want) {
		t.Errorf("%d of %d errors are positioned *Error values", n, len(want))
	}
}

func TestErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{File: "watukuy.yaml", Line: 12, Column: 5, Field: "pollers[0].cursor.strategy", Msg: `unknown strategy "foo" (want timestamp, token, page or snapshotDiff)`},
			`watukuy.yaml:12:5: pollers[0].cursor.strategy: unknown strategy "foo" (want timestamp, token, page or snapshotDiff)`},
		{Error{File: "w.yaml", Line: 3, Msg: "x"}, "w.yaml:3: x"},
		{Error{File: "w.yaml", Msg: "cannot read"}, "w.yaml: cannot read"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

func TestEnvExpansion(t *testing.T) {
	src := `pollers:
  - name: orders
    partitions: ["${TENANT}", t_2]
    request:
      url: https://${HOST}/t/${partition}/orders
      query:
        since: "$${NOT_EXPANDED}"
        tenant: ${partition}
        price: $$5
        limit: 0100
      headers:
        Authorization: Bearer ${TOKEN}
        X-Tenant: ${partition}
    cursor: {strategy: page, size: 50}
    delivery:
      stream: {key: "events:${partition}", maxlen: 1000000}
      attempts: ${ATTEMPTS}
`
	cfg, err := Parse("w.yaml", []byte(src), envOf(map[string]string{
		"TENANT": "t_1", "HOST": "api.example.com", "TOKEN": "abc", "ATTEMPTS": "3",
		"partition": "MUST NOT BE READ", "NOT_EXPANDED": "MUST NOT BE READ",
	}))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Pollers[0]
	if want := []string{"t_1", "t_2"}; !reflect.DeepEqual(p.Partitions, want) {
		t.Errorf("partitions %q", p.Partitions)
	}
	if want := "https://api.example.com/t/${partition}/orders"; p.Request.URL != want {
		t.Errorf("url %q, want %q", p.Request.URL, want)
	}
	wantQuery := map[string]string{"since": "${NOT_EXPANDED}", "tenant": "${partition}", "price": "$$5", "limit": "0100"}
	if !reflect.DeepEqual(p.Request.Query, wantQuery) {
		t.Errorf("query %q, want %q", p.Request.Query, wantQuery)
	}
	wantHeaders := map[string]string{"Authorization": "Bearer abc", "X-Tenant": "${partition}"}
	if !reflect.DeepEqual(p.Request.Headers, wantHeaders) {
		t.Errorf("headers %q, want %q", p.Request.Headers, wantHeaders)
	}
	if s := p.Delivery.Stream; s == nil || s.Key != "events:${partition}" || s.MaxLen != 1000000 {
		t.Errorf("stream %+v", s)
	}
	if p.Delivery.Attempts != 3 || p.Cursor.Size != 50 {
		t.Errorf("attempts %d size %d", p.Delivery.Attempts, p.Cursor.Size)
	}
}

func TestExpandEnv(t *testing.T) {
	lookup := func(k string) (string, bool) {
		v, ok := map[string]string{"A": "1", "EMPTY": ""}[k]
		return v, ok
	}
	for _, tc := range []struct {
		in, want string
		missing  []string
		bad      bool
	}{
		{in: "plain", want: "plain"},
		{in: "${A}", want: "1"},
		{in: "x${A}y${A}", want: "x1y1"},
		{in: "${EMPTY}", want: ""},
		{in: "$${A}", want: "${A}"},
		{in: "$$${A}", want: "$${A}"[0:1] + "${A}"},
		{in: "${partition}", want: "${partition}"},
		{in: "$${partition}", want: "${partition}"},
		{in: "$A $ $$ {A}", want: "$A $ $$ {A}"},
		{in: "${B}-${C}", missing: []string{"B", "C"}},
		{in: "${A", bad: true},
		{in: "${}", bad: true},
		{in: "${1A}", bad: true},
	} {
		got, missing, err := expandEnv(tc.in, lookup)
		if (err != nil) != tc.bad {
			t.Errorf("%q: err %v", tc.in, err)
			continue
		}
		if tc.bad {
			continue
		}
		if !reflect.DeepEqual(missing, tc.missing) {
			t.Errorf("%q: missing %q, want %q", tc.in, missing, tc.missing)
		}
		if tc.missing == nil && got != tc.want {
			t.Errorf("%q: got %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestProcessEnv: with a nil getenv the process environment is used, and a variable set to ""
// is not "unset".
func TestProcessEnv(t *testing.T) {
	t.Setenv("WK_TEST_EMPTY", "")
	t.Setenv("WK_TEST_ORDERING", "tenant_id")
	src := strings.Replace(valid, "stdout: {}", "stdout: {}\n      orderingKey: ${WK_TEST_ORDERING}${WK_TEST_EMPTY}", 1)
	cfg, err := Parse("w.yaml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Pollers[0].Delivery.OrderingKey; got != "tenant_id" {
		t.Errorf("orderingKey %q", got)
	}
	_, err = Parse("w.yaml", []byte(strings.Replace(src, "${WK_TEST_EMPTY}", "${WK_TEST_SURELY_UNSET_VAR}", 1)), nil)
	if err == nil || !strings.Contains(err.Error(), `w.yaml:9:20: pollers[0].delivery.orderingKey: environment variable "WK_TEST_SURELY_UNSET_VAR" is not set`) {
		t.Errorf("got %v", err)
	}
}

func TestWebhookSecrets(t *testing.T) {
	const other = "whsec_dGhpcyBpcyB0aGUgc2Vjb25kIHNlY3JldCBrZXk=" // padded base64 works too
	for _, tc := range []struct {
		name, secret string
		want         []string
	}{
		{"string", "secret: " + testSecret, []string{testSecret}},
		{"list", "secret: [" + testSecret + ", " + other + "]", []string{testSecret, other}},
		{"block list from env", "secret:\n          - ${S1}\n          - \"${S2}\"", []string{testSecret, other}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(valid, "stdout: {}", "webhook:\n        url: https://hooks.example.com/x\n        "+tc.secret, 1)
			cfg, err := Parse("w.yaml", []byte(src), envOf(map[string]string{"S1": testSecret, "S2": other}))
			if err != nil {
				t.Fatal(err)
			}
			w := cfg.Pollers[0].Delivery.Webhook
			if w == nil || w.URL != "https://hooks.example.com/x" || !reflect.DeepEqual(w.Secrets, tc.want) {
				t.Errorf("got %+v, want secrets %q", w, tc.want)
			}
		})
	}
	// A bad secret is never echoed.
	_, err := Parse("w.yaml", []byte(strings.Replace(valid, "stdout: {}", "webhook: {url: http://h, secret: hunter2}", 1)), envOf(nil))
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("got %v", err)
	}
}

func TestParseDuration(t *testing.T) {
	day := 24 * time.Hour
	for _, tc := range []struct {
		in   string
		want time.Duration
		bad  bool
	}{
		{in: "10s", want: 10 * time.Second},
		{in: "5m", want: 5 * time.Minute},
		{in: "1h30m", want: 90 * time.Minute},
		{in: "7d", want: 7 * day},
		{in: "1d12h", want: day + 12*time.Hour},
		{in: "1.5d", want: 36 * time.Hour},
		{in: "2d3h4m5s", want: 2*day + 3*time.Hour + 4*time.Minute + 5*time.Second},
		{in: "-1d", want: -day},
		{in: "0", want: 0},
		{in: "d", bad: true},
		{in: "7", bad: true},
		{in: "7x", bad: true},
		{in: "1d-2h", bad: true},
		{in: "12h1d", bad: true},
		{in: "1dd", bad: true},
		{in: "1e3d", bad: true},
		{in: "999999999d", bad: true},
		{in: "", bad: true},
	} {
		got, err := ParseDuration(tc.in)
		if (err != nil) != tc.bad || !tc.bad && got != tc.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v (bad %v)", tc.in, got, err, tc.want, tc.bad)
		}
	}
	// Days work in every duration field.
	src := strings.Replace(valid, "  request:", "  log: {retention: 7d}\n    reconcile: {every: 1d12h}\n    leaseTTL: 1m\n    request:", 1)
	cfg, err := Parse("w.yaml", []byte(src), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Pollers[0]
	if p.Log.Retention != 7*day || p.Reconcile.Every != 36*time.Hour || p.LeaseTTL != time.Minute {
		t.Errorf("got %v %v %v", p.Log.Retention, p.Reconcile.Every, p.LeaseTTL)
	}
}

// TestAllKeys sets every accepted key once, for each strategy shape. deletes.tombstones and
// commit apply to every poller; confirmListings and detail to complete listings (reconcile,
// snapshotDiff).
func TestAllKeys(t *testing.T) {
	src := `redis: rediss://user:pw@redis.example.com:6380/1
prefix: wk2
pollers:
  - name: events.v2
    request:
      url: https://api.example.com/events
    identity: uid
    cursor:
      strategy: token
      param: cursor
      next: next_cursor
      hasMore: has_more
      limitParam: limit
      limit: 200
      deleted: is_deleted
    schedule: {min: 1s, max: 1h, jitter: 0, adaptive: false}
    onSchemaChange: emit
    schemaVersion: 3
    schema: /etc/watukuy/events.json
    shadow: true
    leaseTTL: 45s
    maxPagesPerCycle: 10
    reconcile:
      every: 12h
      strategy: snapshotDiff
      url: https://api.example.com/events/all
      param: offset
      offset: true
      sizeParam: per_page
      size: 500
      hasMore: more
      maxPages: 1000
    deletes:
      confirmListings: 1
      detail:
        url: https://api.example.com/events/{id}
        items: event
        query: {expand: all}
      tombstones: 7d
    commit: {maxItems: 200, maxBytes: 65536}
    delivery: {stream: {key: "events:v2"}, concurrency: 1, poison: halt, orderingKey: account_id}
  - name: products
    partitions: ["shop@eu:1", t.2]
    request: {url: "https://${partition}.example.com/products"}
    cursor: {strategy: snapshotDiff, param: page, sizeParam: per_page, size: 100, start: 0, offset: false, etag: true}
    deletes: {detail: {url: "https://${partition}.example.com/products/{id}", query: {shop: "${partition}"}}}
    delivery: {stdout: }
  - name: ts
    request: {url: "https://api.example.com/ts"}
    cursor: {strategy: timestamp, field: mtime, param: since, formats: [epoch_ms, "2006-01-02 15:04:05"], tieBreaker: after_id}
    deletes: {tombstones: 1h}
    commit: {maxBytes: 4096}
    delivery: {stdout: {}}
`
	cfg, err := Parse("dir/w.yaml", []byte(src), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := []Poller{{
		Name:     "events.v2",
		Request:  Request{URL: "https://api.example.com/events"},
		Identity: "uid",
		Cursor: Cursor{Strategy: StrategyToken, Param: "cursor", Next: "next_cursor", HasMore: "has_more",
			LimitParam: "limit", Limit: 200, Deleted: "is_deleted"},
		Schedule:       Schedule{Min: time.Second, Max: time.Hour, Jitter: ptr(0.0), Adaptive: ptr(false)},
		OnSchemaChange: "emit", SchemaVersion: 3, Schema: "/etc/watukuy/events.json", Shadow: true,
		LeaseTTL: 45 * time.Second, MaxPagesPerCycle: 10,
		Reconcile: &Reconcile{Every: 12 * time.Hour, Strategy: StrategySnapshotDiff, URL: "https://api.example.com/events/all",
			Param: "offset", Offset: true, SizeParam: "per_page", Size: 500, HasMore: "more", MaxPages: 1000},
		Deletes: Deletes{ConfirmListings: 1, Tombstones: 7 * 24 * time.Hour, Detail: &Detail{
			URL: "https://api.example.com/events/{id}", Items: "event", Query: map[string]string{"expand": "all"}}},
		Commit:   Commit{MaxItems: 200, MaxBytes: 65536},
		Delivery: Delivery{Stream: &Stream{Key: "events:v2"}, Concurrency: 1, Poison: PoisonHalt, OrderingKey: "account_id"},
		Line:     4,
	}, {
		Name: "products", Partitions: []string{"shop@eu:1", "t.2"},
		Request:  Request{URL: "https://${partition}.example.com/products"},
		Identity: "id",
		Cursor:   Cursor{Strategy: StrategySnapshotDiff, Param: "page", SizeParam: "per_page", Size: 100, ETag: true},
		Deletes: Deletes{Detail: &Detail{URL: "https://${partition}.example.com/products/{id}",
			Query: map[string]string{"shop": "${partition}"}}},
		Delivery: Delivery{Stdout: &Stdout{}},
		Line:     42,
	}, {
		Name:     "ts",
		Request:  Request{URL: "https://api.example.com/ts"},
		Identity: "id",
		Cursor: Cursor{Strategy: StrategyTimestamp, Field: "mtime", Param: "since",
			Formats: []string{"epoch_ms", "2006-01-02 15:04:05"}, TieBreaker: "after_id"},
		Deletes:  Deletes{Tombstones: time.Hour},
		Commit:   Commit{MaxBytes: 4096},
		Delivery: Delivery{Stdout: &Stdout{}},
		Line:     48,
	}}
	if cfg.Redis != "rediss://user:pw@redis.example.com:6380/1" || cfg.Prefix != "wk2" || cfg.File != "dir/w.yaml" {
		t.Errorf("config %+v", cfg)
	}
	if len(cfg.Pollers) != len(want) {
		t.Fatalf("%d pollers", len(cfg.Pollers))
	}
	for i := range want {
		if !reflect.DeepEqual(cfg.Pollers[i], want[i]) {
			t.Errorf("poller %d:\n got %+v\nwant %+v", i, cfg.Pollers[i], want[i])
		}
	}
}

func TestSchemaPathRelativeToFile(t *testing.T) {
	src := strings.Replace(valid, "  request:", "  schema: schemas/o.json\n    request:", 1)
	for file, want := range map[string]string{
		"watukuy.yaml":          "schemas/o.json",
		"/etc/wk/watukuy.yaml":  "/etc/wk/schemas/o.json",
		"conf/prod/watukuy.yml": "conf/prod/schemas/o.json",
	} {
		cfg, err := Parse(file, []byte(src), envOf(nil))
		if err != nil {
			t.Fatal(err)
		}
		if got := cfg.Pollers[0].Schema; got != filepath.FromSlash(want) {
			t.Errorf("%s: schema %q, want %q", file, got, want)
		}
	}
}

// TestAnchors: shared settings defined once under an x- key and merged with <<.
func TestAnchors(t *testing.T) {
	src := `x-defaults: &defaults
  request:
    url: https://api.example.com/${partition}/orders
    headers: {Authorization: "Bearer ${TOKEN}"}
  cursor: {strategy: page}
  delivery: {stdout: {}}
pollers:
  - <<: *defaults
    name: a
    partitions: [p1]
  - <<: *defaults
    name: b
    partitions: [p2]
    cursor: {strategy: snapshotDiff}
`
	cfg, err := Parse("w.yaml", []byte(src), envOf(map[string]string{"TOKEN": "t"}))
	if err != nil {
		t.Fatal(err)
	}
	a, b := cfg.Pollers[0], cfg.Pollers[1]
	if a.Name != "a" || b.Name != "b" || a.Cursor.Strategy != StrategyPage || b.Cursor.Strategy != StrategySnapshotDiff ||
		a.Request.Headers["Authorization"] != "Bearer t" || b.Request.URL != "https://api.example.com/${partition}/orders" ||
		b.Delivery.Stdout == nil {
		t.Errorf("got %+v\n%+v", a, b)
	}
}

func TestSuggest(t *testing.T) {
	known := []string{"strategy", "field", "param", "hasMore", "next", "limitParam", "sizeParam", "etag"}
	for in, want := range map[string]string{
		"hasmore":     "hasMore",
		"has_more":    "hasMore",
		"HasMore":     "hasMore",
		"stratgey":    "strategy",
		"feild":       "field",
		"limit_param": "limitParam",
		"size":        "",
		"cursor":      "",
		"x":           "",
		"ETag":        "etag",
	} {
		if got := suggest(in, known); got != want {
			t.Errorf("suggest(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestOneErrorPerProblem: a problem is reported once, not again by the checks that follow it.
func TestOneErrorPerProblem(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"top level not a mapping", "- a\n", `w.yaml:1:1: want a mapping with redis, prefix, budgets, admin and pollers, got sequence`},
		{"pollers not a list", "pollers: 5\n", `w.yaml:1:10: pollers: want a list, got integer "5"`},
		{"empty poller entry", "pollers:\n  -\n", `w.yaml:2:5: pollers[0]: empty entry: want a poller with name, request, cursor and delivery`},
		{"null request", strings.Replace(valid, "request:\n      url: http://api.example.com/orders", "request: ~", 1),
			`w.yaml:3:5: pollers[0].request.url: required`},
		{"null cursor", strings.Replace(valid, "cursor:\n      strategy: page", "cursor:", 1),
			`w.yaml:5:5: pollers[0].cursor.strategy: required (want timestamp, token, page or snapshotDiff)`},
		{"null delivery", strings.Replace(valid, "delivery:\n      stdout: {}", "delivery:", 1),
			`w.yaml:7:5: pollers[0].delivery: want one of webhook, stream, stdout, nats, amqp or postgres`},
		{"empty stream key", strings.Replace(valid, "stdout: {}", "stream: {key: ''}", 1),
			`w.yaml:8:21: pollers[0].delivery.stream.key: must not be empty`},
		{"null detail", strings.Replace(valid, "strategy: page", "strategy: snapshotDiff\n    deletes:\n      detail:", 1),
			`w.yaml:8:7: pollers[0].deletes.detail.url: required`},
		{"empty detail url", strings.Replace(validSnapshot, "  request:", "  deletes: {detail: {url: ''}}\n    request:", 1),
			`w.yaml:3:29: pollers[0].deletes.detail.url: want an http:// or https:// URL, got ""`},
		{"unknown strategy with deletes", strings.Replace(valid, "strategy: page", "strategy: nope\n    deletes: {confirmListings: 2}", 1),
			`w.yaml:6:17: pollers[0].cursor.strategy: unknown strategy "nope" (want timestamp, token, page or snapshotDiff)`},
		{"empty secret list", strings.Replace(valid, "stdout: {}", "webhook: {url: 'http://h', secret: []}", 1),
			`w.yaml:8:42: pollers[0].delivery.webhook.secret: empty list: give at least one secret`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("w.yaml", []byte(tc.yaml), envOf(nil))
			if err == nil || err.Error() != tc.want {
				t.Errorf("got:\n%v\nwant:\n%s", err, tc.want)
			}
		})
	}
}

// TestNullStdout: "stdout:" with no value selects the stdout sink.
func TestNullStdout(t *testing.T) {
	cfg, err := Parse("w.yaml", []byte(strings.Replace(valid, "stdout: {}", "stdout:", 1)), envOf(nil))
	if err != nil || cfg.Pollers[0].Delivery.Stdout == nil {
		t.Fatalf("got %v, %v", cfg, err)
	}
}

// A built poller's Revision digests what its listings are made of: another page size or URL
// gives another (a listing under way starts over), another schedule the same.
func TestRevisionFollowsTheRequests(t *testing.T) {
	rev := func(yaml string) string {
		t.Helper()
		cfg, err := Parse("w.yaml", []byte(yaml), envOf(nil))
		if err != nil {
			t.Fatal(err)
		}
		ps, err := Build(cfg, nil, io.Discard, nil, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		return ps[0].Revision
	}
	base := rev(validSnapshot)
	if base == "" || rev(validSnapshot) != base {
		t.Fatalf("revision %q is not stable", base)
	}
	if got := rev(strings.Replace(validSnapshot, "strategy: snapshotDiff", "strategy: snapshotDiff\n      size: 7", 1)); got == base {
		t.Error("another page size kept the revision")
	}
	if got := rev(strings.Replace(validSnapshot, "    delivery:", "    schedule: {min: 1s, max: 1m}\n    delivery:", 1)); got != base {
		t.Error("another schedule changed the revision")
	}
}
