package config

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"

	"github.com/watukuy/watukuy/httppoll"
	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/schedule"
	"github.com/watukuy/watukuy/internal/sink"
	"github.com/watukuy/watukuy/sinks/amqpsink"
	"github.com/watukuy/watukuy/sinks/natssink"
	"github.com/watukuy/watukuy/sinks/pgsink"
	"github.com/watukuy/watukuy/watukuytype"
)

// kind is the type of a field's value in the file.
type kind int

const (
	kindBlock    kind = iota // a mapping of further fields
	kindString               // a string (numbers and booleans give their text)
	kindInt                  // an integer, at least field.min
	kindFloat                // a number
	kindBool                 // true or false
	kindDuration             // a positive duration: Go syntax plus days
	kindStrings              // a list of non-empty strings
	kindStrMap               // a mapping of strings
	kindSecret               // a whsec_ secret or a list of them
)

// kindNames are the types as the reference shows them.
var kindNames = map[kind]string{
	kindBlock: "mapping", kindString: "string", kindInt: "integer", kindFloat: "number", kindBool: "boolean",
	kindDuration: "duration", kindStrings: "list of strings", kindStrMap: "mapping of strings", kindSecret: "secret or list of secrets",
}

// field is one key of a poller entry: the schema row that decoding, the per-strategy checks,
// Build and docs/configuration.md's reference table all read.
type field struct {
	path        string   // YAML path under the poller entry, e.g. "cursor.limit"
	kind        kind     // the value's type
	doc         string   // what it means (the reference's text)
	def         string   // the default when left out, as the reference shows it ("" = none)
	min         int      // integers: the smallest value allowed (0 or 1: an explicit 0 never means "default")
	enum        []string // strings: the values allowed
	what        string   // enum: what the value is called in errors ("strategy")
	strategies  []string // cursor keys: the strategies that use it (nil = all)
	requiredFor []string // cursor keys: the strategies that need it
	required    bool     // must be given in its block (a block: must be given in the entry)
	note        string   // appended to "required" in the error
	partition   bool     // the value may hold ${partition}
	template    bool     // a broker's subject or routing key: ${poller} and ${type} are the event's too
	file        bool     // a file's path, relative to the config file's directory
	listing     bool     // only complete listings (snapshotDiff, reconcile) use it
	item        string   // lists: what an element is called in errors ("field")
	allowed     string   // what a check of its own allows, for the reference
	sets        string   // the built poller's field that it sets, for the reference
	// ptr is where the decoded value goes in the Poller (*string, *int, *int64, *float64,
	// *bool, **bool, *time.Duration, *[]string or *map[string]string); nil for blocks.
	ptr func(p *Poller) any
	// open allocates a block the Poller holds by pointer; it runs when the key is given.
	open func(p *Poller)
	// check adds a check of a string value or list element that decoded.
	check func(d *decoder, ps *pollerState, s string, at pos, field string)
	// decode replaces the kind's decoding for the few fields that need their own.
	decode func(d *decoder, ps *pollerState, v ast.Node, field string)
	// after checks a block once all its keys are read.
	after func(d *decoder, ps *pollerState, b blockRead)
	// build sets the built poller from the decoded Poller (build.go).
	build func(b *builder) error
}

// name is the key's own name, the last element of its path.
func (f *field) name() string { return f.path[strings.LastIndexByte(f.path, '.')+1:] }

// parent is the path of the block that holds the key ("" for the poller entry).
func (f *field) parent() string {
	if i := strings.LastIndexByte(f.path, '.'); i >= 0 {
		return f.path[:i]
	}
	return ""
}

var (
	strategies          = []string{StrategyTimestamp, StrategyToken, StrategyPage, StrategySnapshotDiff}
	reconcileStrategies = []string{StrategyPage, StrategySnapshotDiff}
	poisons             = []string{PoisonPark, PoisonHalt}
	schemaChanges       = []string{"rebaseline", "emit"}
	namedFormats        = []string{"rfc3339", "epoch_s", "epoch_ms", "epoch"}
	sinkKinds           = []string{"webhook", "stream", "stdout", "nats", "amqp", "postgres"}

	timestampOnly = []string{StrategyTimestamp}
	tokenOnly     = []string{StrategyToken}
	incremental   = []string{StrategyTimestamp, StrategyToken}
	listings      = []string{StrategyPage, StrategySnapshotDiff}
)

// schema is the poller entry's fields, each block followed by its keys; within a block the
// order is the order errors list the keys in.
var schema = []*field{
	{path: "name", kind: kindString, required: true, sets: "Name", check: checkName, allowed: "`" + core.NamePattern + "`",
		doc: "the poller's name, unique in the file",
		ptr: func(p *Poller) any { return &p.Name }, build: func(b *builder) error { b.p.Name = b.pc.Name; return nil }},
	{path: "partitions", kind: kindStrings, sets: "Partitions", decode: decodePartitions, def: `one key, partition ""`,
		allowed: "`" + core.PartitionPattern + "`, each once",
		doc:     "instances of the poller, e.g. tenants; `${partition}` in the request is replaced by each",
		build:   func(b *builder) error { b.p.Partitions = b.pc.Partitions; return nil }},
	{path: "request", kind: kindBlock, required: true, sets: "Fetch", doc: "how a page is fetched", build: buildRequest},
	{path: "request.url", kind: kindString, required: true, partition: true, check: checkHTTPURL, allowed: "http(s) URL",
		doc: "the endpoint", ptr: func(p *Poller) any { return &p.Request.URL }},
	{path: "request.query", kind: kindStrMap, partition: true, doc: "query parameters sent with every request",
		ptr: func(p *Poller) any { return &p.Request.Query }},
	{path: "request.headers", kind: kindStrMap, partition: true, doc: "headers sent with every request (and the detail request)",
		ptr: func(p *Poller) any { return &p.Request.Headers }},
	{path: "request.timeout", kind: kindDuration, def: fmtDuration(httppoll.DefaultTimeout), doc: "bounds one request, body included",
		ptr: func(p *Poller) any { return &p.Request.Timeout }},
	{path: "request.maxBodyBytes", kind: kindInt, min: 1, def: fmt.Sprintf("%d (%d MiB)", httppoll.DefaultMaxBody, httppoll.DefaultMaxBody>>20),
		doc: "bounds a response body in bytes, on the wire and decompressed; a larger page fails the cycle (lower `cursor.limit` or `cursor.size`, or raise this)",
		ptr: func(p *Poller) any { return &p.Request.MaxBodyBytes }},
	{path: "items", kind: kindString, def: "the body is the array", sets: "Fetch", doc: "gjson path of the item array in the body",
		ptr: func(p *Poller) any { return &p.Items }},
	{path: "identity", kind: kindString, def: "id", sets: "Identity", doc: "gjson path of the item's identity",
		ptr: func(p *Poller) any { return &p.Identity }, build: buildIdentity},
	{path: "version", kind: kindString, sets: "Version", doc: "gjson path of the item's version",
		ptr: func(p *Poller) any { return &p.Version }, build: buildVersion},
	{path: "fingerprint", kind: kindStrings, item: "field", sets: "Fingerprint", def: "the whole item",
		doc: "gjson paths of the fields that count as a change", ptr: func(p *Poller) any { return &p.Fingerprint }, build: buildFingerprint},

	{path: "cursor", kind: kindBlock, required: true, after: checkCursor, doc: "the cursor strategy and its parameters"},
	{path: "cursor.strategy", kind: kindString, required: true, note: " (want " + orList(strategies) + ")", enum: strategies, what: "strategy",
		sets: "Fetch, Strategy", build: buildCursor,
		doc: "`timestamp`, `token` (an opaque next token), `page` (page numbers or offsets) or `snapshotDiff` " +
			"(a full listing every cycle; identities it misses are deleted)",
		ptr: func(p *Poller) any { return &p.Cursor.Strategy }},
	{path: "cursor.field", kind: kindString, strategies: timestampOnly, requiredFor: timestampOnly,
		doc: "gjson path of the item's change time", ptr: func(p *Poller) any { return &p.Cursor.Field }},
	{path: "cursor.param", kind: kindString, requiredFor: incremental, def: "page (page, snapshotDiff; with offset: none, required)",
		doc: "query parameter that carries the cursor (page: the page number or offset)", ptr: func(p *Poller) any { return &p.Cursor.Param }},
	{path: "cursor.hasMore", kind: kindString, doc: "gjson path of the response's has-more flag",
		ptr: func(p *Poller) any { return &p.Cursor.HasMore }},
	{path: "cursor.next", kind: kindString, strategies: tokenOnly, def: `the Link header's rel="next"`,
		doc: "gjson path of the next token in the response", ptr: func(p *Poller) any { return &p.Cursor.Next }},
	{path: "cursor.formats", kind: kindStrings, item: "format", strategies: timestampOnly, def: "RFC 3339 and epochs",
		check: checkFormat, allowed: orList(namedFormats) + ", or a Go layout",
		doc: "formats of the change time", ptr: func(p *Poller) any { return &p.Cursor.Formats }},
	{path: "cursor.limitParam", kind: kindString, strategies: incremental, doc: "query parameter that carries `limit`",
		ptr: func(p *Poller) any { return &p.Cursor.LimitParam }},
	{path: "cursor.limit", kind: kindInt, min: 1, strategies: incremental, doc: "items asked for per page",
		ptr: func(p *Poller) any { return &p.Cursor.Limit }},
	{path: "cursor.tieBreaker", kind: kindString, strategies: timestampOnly, doc: "query parameter for the last identity at the cursor time",
		ptr: func(p *Poller) any { return &p.Cursor.TieBreaker }},
	{path: "cursor.deleted", kind: kindString, sets: "Tombstone", doc: "gjson path of a flag that marks a deleted item",
		ptr: func(p *Poller) any { return &p.Cursor.Deleted }, build: buildTombstone},
	{path: "cursor.offset", kind: kindBool, strategies: listings, def: "false", doc: "`param` is an item offset, not a page number",
		ptr: func(p *Poller) any { return &p.Cursor.Offset }},
	{path: "cursor.start", kind: kindInt, min: 0, strategies: listings, def: "1 (offsets: 0)", doc: "the first page number",
		ptr: func(p *Poller) any { return &p.Cursor.Start }},
	{path: "cursor.sizeParam", kind: kindString, strategies: listings, doc: "query parameter that carries `size`",
		ptr: func(p *Poller) any { return &p.Cursor.SizeParam }},
	{path: "cursor.size", kind: kindInt, min: 1, strategies: listings, doc: "items asked for per page",
		ptr: func(p *Poller) any { return &p.Cursor.Size }},
	{path: "cursor.etag", kind: kindBool, strategies: listings, def: "false", doc: "every page carries the collection's ETag; an unchanged collection answers 304",
		ptr: func(p *Poller) any { return &p.Cursor.ETag }},

	{path: "schedule", kind: kindBlock, sets: "Schedule", doc: "the adaptive polling interval", after: checkSchedule},
	{path: "schedule.min", kind: kindDuration, def: fmtDuration(core.DefaultScheduleMin), sets: "Schedule.Min", doc: "the shortest interval",
		ptr: func(p *Poller) any { return &p.Schedule.Min }, build: func(b *builder) error { b.p.Schedule.Min = b.pc.Schedule.Min; return nil }},
	{path: "schedule.max", kind: kindDuration, def: fmtDuration(core.DefaultScheduleMax), sets: "Schedule.Max", doc: "the longest interval (not less than min)",
		ptr: func(p *Poller) any { return &p.Schedule.Max }, build: func(b *builder) error { b.p.Schedule.Max = b.pc.Schedule.Max; return nil }},
	{path: "schedule.jitter", kind: kindFloat, def: strconv.FormatFloat(core.DefaultJitter, 'g', -1, 64), sets: "Schedule.Jitter, Schedule.NoJitter",
		decode: decodeJitter, allowed: "[0, 1)", build: buildJitter,
		doc: "random spread of the interval (0.1: ±10%), so keys polled together drift apart; 0: none, every interval exact"},
	{path: "schedule.adaptive", kind: kindBool, def: "true", sets: "Schedule.Fixed", doc: "false: always poll every min",
		ptr: func(p *Poller) any { return &p.Schedule.Adaptive }, build: buildFixed},
	{path: "schedule.backoff", kind: kindBlock, sets: "Backoff", after: checkBackoff, build: buildBackoff,
		doc: "spaces failed cycles: after failure n the next is due within a random delay up to min(max, base×factor^(n-1)); " +
			"the failure that reaches `circuit.failures` opens the circuit instead"},
	{path: "schedule.backoff.base", kind: kindDuration, def: fmtDuration(schedule.DefaultBackoff.Base), doc: "the delay bound after the first failure",
		ptr: func(p *Poller) any { return &p.Schedule.Backoff.Base }},
	{path: "schedule.backoff.factor", kind: kindFloat, def: strconv.FormatFloat(schedule.DefaultBackoff.Factor, 'g', -1, 64), allowed: "≥ 1",
		decode: factorOf(func(p *Poller) *float64 { return &p.Schedule.Backoff.Factor }), doc: "multiplies the bound after each further failure"},
	{path: "schedule.backoff.max", kind: kindDuration, def: fmtDuration(schedule.DefaultBackoff.Max) + " (at least base)", doc: "the largest bound (not less than base)",
		ptr: func(p *Poller) any { return &p.Schedule.Backoff.Max }},

	{path: "reconcile", kind: kindBlock, sets: "Reconcile", doc: "a periodic full listing whose misses are deleted",
		open: func(p *Poller) { p.Reconcile = &Reconcile{} }, build: buildReconcile},
	{path: "reconcile.every", kind: kindDuration, required: true, sets: "Reconcile.Every", doc: "the time between listings",
		ptr: func(p *Poller) any { return &p.Reconcile.Every }},
	{path: "reconcile.strategy", kind: kindString, enum: reconcileStrategies, what: "reconcile strategy",
		doc: "for the reader only: a reconcile listing is always complete and paged by `param` (or `offset`), so `page` and `snapshotDiff` work the same",
		ptr: func(p *Poller) any { return &p.Reconcile.Strategy }},
	{path: "reconcile.url", kind: kindString, partition: true, check: checkOptionalHTTPURL, allowed: "http(s) URL", def: "request.url",
		doc: "another listing endpoint", ptr: func(p *Poller) any { return &p.Reconcile.URL }},
	{path: "reconcile.param", kind: kindString, def: "page (with offset: none, required)", doc: "query parameter of the page number or offset",
		ptr: func(p *Poller) any { return &p.Reconcile.Param }},
	{path: "reconcile.sizeParam", kind: kindString, doc: "query parameter that carries `size`",
		ptr: func(p *Poller) any { return &p.Reconcile.SizeParam }},
	{path: "reconcile.size", kind: kindInt, min: 1, doc: "items asked for per page",
		ptr: func(p *Poller) any { return &p.Reconcile.Size }},
	{path: "reconcile.offset", kind: kindBool, def: "false", doc: "`param` is an item offset (0, size, 2×size, …), not a page number; with it `param` has no default",
		ptr: func(p *Poller) any { return &p.Reconcile.Offset }},
	{path: "reconcile.hasMore", kind: kindString, doc: "gjson path of the response's has-more flag",
		ptr: func(p *Poller) any { return &p.Reconcile.HasMore }},
	{path: "reconcile.maxPages", kind: kindInt, min: 1, def: strconv.Itoa(core.DefaultReconcileMaxPages), sets: "Reconcile.MaxPages",
		doc: "pages of the listing one cycle reads; a longer listing goes on from where it stopped in the next cycle (due at once) and deletes only once it completed",
		ptr: func(p *Poller) any { return &p.Reconcile.MaxPages }},

	{path: "log", kind: kindBlock, doc: "the replay log (`watukuy replay`)", def: "no log", open: func(p *Poller) { p.Log = &Log{} }},
	{path: "log.retention", kind: kindDuration, required: true, sets: "LogRetention", doc: "how long committed events are kept",
		ptr: func(p *Poller) any { return &p.Log.Retention }, build: buildLogRetention},

	{path: "changes", kind: kindBlock, sets: "Changes", build: buildChanges,
		doc: "what events say of a change: a patch per `updated` event, fields whose changes alone are no event ([Change sets](#change-sets))"},
	{path: "changes.patch", kind: kindBool, def: "false", sets: "Changes.Patch",
		doc: "keep each item as last emitted, so every `updated` event carries the RFC 6902 patch from it (`changes`) and every `deleted` event the item (`previous`); costs a copy of each tracked item in Redis",
		ptr: func(p *Poller) any { return &p.Changes.Patch }},
	{path: "changes.ignore", kind: kindStrings, item: "field", sets: "Changes.Ignore", check: checkIgnore,
		allowed: "JSON Pointer (`/updated_at`) or dotted path (`meta.etag`)",
		doc:     "fields whose changes alone make no `updated` event (the content hash leaves them out); the next event's patch includes them",
		ptr:     func(p *Poller) any { return &p.Changes.Ignore }},
	{path: "changes.maxBytes", kind: kindInt, min: 1, sets: "Changes.MaxBytes",
		def: fmt.Sprintf("%d (%d KiB)", watukuytype.DefaultChangesMaxBytes, watukuytype.DefaultChangesMaxBytes>>10),
		doc: "the largest item kept, in bytes; the `updated` event of a larger one (or of the one after it) carries `changes: null` and `changesOmitted: \"too large\"`",
		ptr: func(p *Poller) any { return &p.Changes.MaxBytes }},

	{path: "deletes", kind: kindBlock, doc: "how deletes found by complete listings are confirmed"},
	{path: "deletes.confirmListings", kind: kindInt, min: 1, listing: true, def: strconv.Itoa(core.DefaultConfirmDeletes), sets: "ConfirmDeletes",
		doc: "consecutive complete listings that must miss an identity before it is deleted", ptr: func(p *Poller) any { return &p.Deletes.ConfirmListings },
		build: func(b *builder) error { b.p.ConfirmDeletes = b.pc.Deletes.ConfirmListings; return nil }},
	{path: "deletes.detail", kind: kindBlock, listing: true, sets: "Detail", doc: "a request for one item: 404/410 deletes at once, found is diffed",
		open: func(p *Poller) { p.Deletes.Detail = &Detail{} }, build: buildDetail},
	{path: "deletes.detail.url", kind: kindString, required: true, partition: true, check: checkDetailURL, allowed: "http(s) URL with `{id}`",
		doc: "the item's URL; `{id}` is replaced by the identity", ptr: func(p *Poller) any { return &p.Deletes.Detail.URL }},
	{path: "deletes.detail.items", kind: kindString, def: "the body is the item", doc: "gjson path of the item in the body",
		ptr: func(p *Poller) any { return &p.Deletes.Detail.Items }},
	{path: "deletes.detail.query", kind: kindStrMap, partition: true, doc: "query parameters (sent with request.headers, not request.query)",
		ptr: func(p *Poller) any { return &p.Deletes.Detail.Query }},
	{path: "deletes.tombstones", kind: kindDuration, def: fmtDuration(core.DefaultTombstoneRetention), sets: "TombstoneRetention",
		doc: "how long a deleted identity is remembered, so one created again gets new event ids", ptr: func(p *Poller) any { return &p.Deletes.Tombstones },
		build: func(b *builder) error { b.p.TombstoneRetention = b.pc.Deletes.Tombstones; return nil }},

	{path: "commit", kind: kindBlock, doc: "bounds one commit script; a larger page commits in chunks"},
	{path: "commit.maxItems", kind: kindInt, min: 1, def: strconv.Itoa(core.DefaultCommitMaxItems), sets: "CommitMaxItems", doc: "changes per commit",
		ptr: func(p *Poller) any { return &p.Commit.MaxItems }, build: func(b *builder) error { b.p.CommitMaxItems = b.pc.Commit.MaxItems; return nil }},
	{path: "commit.maxBytes", kind: kindInt, min: 1, def: strconv.Itoa(core.DefaultCommitMaxBytes), sets: "CommitMaxBytes", doc: "bytes per commit",
		ptr: func(p *Poller) any { return &p.Commit.MaxBytes }, build: func(b *builder) error { b.p.CommitMaxBytes = b.pc.Commit.MaxBytes; return nil }},

	{path: "schemaVersion", kind: kindInt, min: 0, def: "0", sets: "SchemaVersion", doc: "part of every event id; bump it when the meaning of items changes",
		ptr: func(p *Poller) any { return &p.SchemaVersion }, build: func(b *builder) error { b.p.SchemaVersion = b.pc.SchemaVersion; return nil }},
	{path: "onSchemaChange", kind: kindString, enum: schemaChanges, what: "onSchemaChange", def: "rebaseline", sets: "EmitOnSchemaChange",
		doc: "after a schemaVersion bump: rebaseline silently, or emit `updated` for changed items", ptr: func(p *Poller) any { return &p.OnSchemaChange },
		build: func(b *builder) error { b.p.EmitOnSchemaChange = b.pc.OnSchemaChange == "emit"; return nil }},
	{path: "schema", kind: kindString, decode: decodeSchemaPath, sets: "Validate", build: buildValidate,
		doc: "JSON Schema file (relative to the config file); items it rejects are parked invalid"},
	{path: "budget", kind: kindString, partition: true, sets: "Budget",
		doc:   "a budget of the top-level `budgets:` that every request of the poller takes a token from, shared by every worker; may hold `${partition}` (one bucket per partition)",
		ptr:   func(p *Poller) any { return &p.Budget },
		check: func(d *decoder, ps *pollerState, s string, at pos, field string) { ps.p.budgetAt = at },
		build: func(b *builder) error { b.p.Budget = b.pc.Budget; return nil }},
	{path: "shadow", kind: kindBool, def: "false", sets: "Shadow", doc: "poll and commit state, deliver nothing (onboarding)",
		ptr: func(p *Poller) any { return &p.Shadow }, build: func(b *builder) error { b.p.Shadow = b.pc.Shadow; return nil }},
	{path: "history", kind: kindBool, def: "false", sets: "History", doc: "the API serves a change log: a backfill places entries by version",
		ptr: func(p *Poller) any { return &p.History }, build: func(b *builder) error { b.p.History = b.pc.History; return nil }},
	{path: "leaseTTL", kind: kindDuration, def: fmtDuration(core.DefaultLeaseTTL), sets: "LeaseTTL",
		doc: "how long a cycle's lease on a key lasts unless renewed (every TTL/3 and with every committed page); " +
			"a worker that dies mid-cycle holds its keys until it runs out: shorter fails over sooner, with more renewals",
		ptr: func(p *Poller) any { return &p.LeaseTTL }, build: func(b *builder) error { b.p.LeaseTTL = b.pc.LeaseTTL; return nil }},
	{path: "maxPagesPerCycle", kind: kindInt, min: 1, def: strconv.Itoa(core.DefaultMaxPagesPerCycle), sets: "MaxPagesPerCycle",
		doc:   "pages one cycle fetches, its lanes together (live first); a cut-short cycle is due again at once and a listing goes on from where it stopped, so a backlog or a long listing is worked off in slices",
		ptr:   func(p *Poller) any { return &p.MaxPagesPerCycle },
		build: func(b *builder) error { b.p.MaxPagesPerCycle = b.pc.MaxPagesPerCycle; return nil }},

	{path: "circuit", kind: kindBlock, doc: "the circuit breaker: failed cycles in a row open it, and an open circuit polls only a probe now and then"},
	{path: "circuit.failures", kind: kindInt, min: 1, def: strconv.Itoa(core.DefaultFailures), sets: "Failures",
		doc: "consecutive failed cycles that open the circuit (earlier ones back off: `schedule.backoff`)",
		ptr: func(p *Poller) any { return &p.Circuit.Failures }, build: func(b *builder) error { b.p.Failures = b.pc.Circuit.Failures; return nil }},
	{path: "circuit.probeEvery", kind: kindDuration, def: "schedule.max", sets: "ProbeEvery",
		doc: "how long an open circuit waits before its probe, one cycle: a success closes the circuit, a failure waits again (`watukuy trigger` probes at once)",
		ptr: func(p *Poller) any { return &p.Circuit.ProbeEvery }, build: func(b *builder) error { b.p.ProbeEvery = b.pc.Circuit.ProbeEvery; return nil }},

	{path: "delivery", kind: kindBlock, required: true, note: " (one of " + orList(sinkKinds) + ")",
		doc: "where events go: exactly one of " + strings.Join(sinkKinds[:len(sinkKinds)-1], ", ") + " and " + sinkKinds[len(sinkKinds)-1], after: checkDelivery},
	{path: "delivery.webhook", kind: kindBlock, sets: "Handler", doc: "POST each event, signed (Standard Webhooks)",
		open: func(p *Poller) { p.Delivery.Webhook = &Webhook{} }, build: buildWebhook},
	{path: "delivery.webhook.url", kind: kindString, required: true, check: checkHTTPURL, allowed: "http(s) URL", doc: "the receiver",
		ptr: func(p *Poller) any { return &p.Delivery.Webhook.URL }},
	{path: "delivery.webhook.secret", kind: kindSecret, required: true, note: " (" + secretHint + ")", decode: decodeSecrets, allowed: "`whsec_` + standard base64 of ≥ 24 bytes",
		doc: "signing secret (Standard Webhooks); make one with `echo whsec_$(head -c 32 /dev/urandom | base64)` and keep it out of the file " +
			"(`secret: \"${WEBHOOK_SECRET}\"`); a list during a rotation (every secret signs)"},
	{path: "delivery.webhook.timeout", kind: kindDuration, def: fmtDuration(sink.DefaultWebhookTimeout), doc: "bounds one attempt",
		ptr: func(p *Poller) any { return &p.Delivery.Webhook.Timeout }},
	{path: "delivery.stream", kind: kindBlock, sets: "Handler", doc: "XADD each event to a Redis stream",
		open: func(p *Poller) { p.Delivery.Stream = &Stream{} }, build: buildStream},
	{path: "delivery.stream.key", kind: kindString, required: true, check: checkNotEmpty, allowed: "not empty", doc: "the stream",
		ptr: func(p *Poller) any { return &p.Delivery.Stream.Key }},
	{path: "delivery.stream.maxlen", kind: kindInt, min: 0, def: "0: no trimming", doc: "approximate trim length (must cover the slowest reader)",
		ptr: func(p *Poller) any { return &p.Delivery.Stream.MaxLen }},
	{path: "delivery.stdout", kind: kindBlock, sets: "Handler", doc: "print each event as an NDJSON line (takes no keys)",
		open: func(p *Poller) { p.Delivery.Stdout = &Stdout{} }, build: buildStdout},
	{path: "delivery.nats", kind: kindBlock, sets: "Handler", doc: "publish each event to NATS JetStream, with the event id as `Nats-Msg-Id` (the stream drops a re-send within its duplicate window)",
		open: func(p *Poller) { p.Delivery.NATS = &NATS{} }, after: checkNATS, build: buildNATS},
	{path: "delivery.nats.url", kind: kindString, required: true, check: checkBrokerURL("nats", "tls"), allowed: "nats:// or tls:// URL (a comma-separated list of servers)",
		doc: "the servers; credentials may be in it (`nats://user:${NATS_PASSWORD}@host:4222`), never shown", ptr: func(p *Poller) any { return &p.Delivery.NATS.URL }},
	{path: "delivery.nats.subject", kind: kindString, required: true, template: true, partition: true, check: checkTemplate, allowed: "a subject; `${poller}`, `${partition}`, `${type}`",
		doc: "the subject each event is published to", ptr: func(p *Poller) any { return &p.Delivery.NATS.Subject }},
	{path: "delivery.nats.stream", kind: kindString, def: "any stream that captures the subject",
		doc: "the stream that must store the events (a publish another stream captures fails)", ptr: func(p *Poller) any { return &p.Delivery.NATS.Stream }},
	{path: "delivery.nats.create", kind: kindBool, def: "false", doc: "create `stream` if it is missing (file storage, subjects from `subject`, `duplicateWindow`)",
		ptr: func(p *Poller) any { return &p.Delivery.NATS.Create }},
	{path: "delivery.nats.duplicateWindow", kind: kindDuration, def: "2m (JetStream's)", doc: "with `create`: how long the stream remembers an event id; keep it above the lease TTL plus `schedule.max`",
		ptr: func(p *Poller) any { return &p.Delivery.NATS.DuplicateWindow }},
	{path: "delivery.nats.credsFile", kind: kindString, file: true, ptr: func(p *Poller) any { return &p.Delivery.NATS.CredsFile },
		doc: "a NATS credentials file (JWT and NKey seed), relative to the config file"},
	{path: "delivery.nats.nkeyFile", kind: kindString, file: true, ptr: func(p *Poller) any { return &p.Delivery.NATS.NKeyFile },
		doc: "an NKey seed file, relative to the config file"},
	{path: "delivery.nats.token", kind: kindString, doc: "an authentication token (`${NATS_TOKEN}`), never shown", ptr: func(p *Poller) any { return &p.Delivery.NATS.Token }},
	{path: "delivery.nats.tls", kind: kindBlock, doc: "TLS files (a tls:// URL, or a server that requires TLS)"},
	{path: "delivery.nats.tls.caFile", kind: kindString, file: true, ptr: func(p *Poller) any { return &p.Delivery.NATS.TLS.CAFile }, doc: "the CA of the server's certificate"},
	{path: "delivery.nats.tls.certFile", kind: kindString, file: true, ptr: func(p *Poller) any { return &p.Delivery.NATS.TLS.CertFile }, doc: "the client certificate"},
	{path: "delivery.nats.tls.keyFile", kind: kindString, file: true, ptr: func(p *Poller) any { return &p.Delivery.NATS.TLS.KeyFile }, doc: "the client certificate's key"},
	{path: "delivery.nats.timeout", kind: kindDuration, def: fmtDuration(natssink.DefaultTimeout), doc: "bounds one attempt, from connecting to the stream's acknowledgement",
		ptr: func(p *Poller) any { return &p.Delivery.NATS.Timeout }},

	{path: "delivery.amqp", kind: kindBlock, sets: "Handler", doc: "publish each event to a RabbitMQ exchange (publisher confirms, mandatory, persistent), with the event id as `message_id`",
		open: func(p *Poller) { p.Delivery.AMQP = &AMQP{} }, build: buildAMQP},
	{path: "delivery.amqp.url", kind: kindString, required: true, check: checkBrokerURL("amqp", "amqps"), allowed: "amqp:// or amqps:// URL",
		doc: "the broker and vhost; credentials may be in it (`amqp://watukuy:${AMQP_PASSWORD}@host:5672/vhost`), never shown", ptr: func(p *Poller) any { return &p.Delivery.AMQP.URL }},
	{path: "delivery.amqp.exchange", kind: kindString, def: `"": the default exchange (routingKey names a queue)`,
		doc: "the exchange, which must exist", ptr: func(p *Poller) any { return &p.Delivery.AMQP.Exchange }},
	{path: "delivery.amqp.routingKey", kind: kindString, required: true, template: true, partition: true, check: checkTemplate, allowed: "`${poller}`, `${partition}`, `${type}`",
		doc: "the routing key; an event no queue is bound for is a failed attempt", ptr: func(p *Poller) any { return &p.Delivery.AMQP.RoutingKey }},
	{path: "delivery.amqp.tls", kind: kindBlock, doc: "TLS files (amqps://)"},
	{path: "delivery.amqp.tls.caFile", kind: kindString, file: true, ptr: func(p *Poller) any { return &p.Delivery.AMQP.TLS.CAFile }, doc: "the CA of the server's certificate"},
	{path: "delivery.amqp.tls.certFile", kind: kindString, file: true, ptr: func(p *Poller) any { return &p.Delivery.AMQP.TLS.CertFile }, doc: "the client certificate"},
	{path: "delivery.amqp.tls.keyFile", kind: kindString, file: true, ptr: func(p *Poller) any { return &p.Delivery.AMQP.TLS.KeyFile }, doc: "the client certificate's key"},
	{path: "delivery.amqp.timeout", kind: kindDuration, def: fmtDuration(amqpsink.DefaultTimeout), doc: "bounds one attempt, from connecting to the broker's confirm",
		ptr: func(p *Poller) any { return &p.Delivery.AMQP.Timeout }},

	{path: "delivery.postgres", kind: kindBlock, sets: "Handler", doc: "insert each event into a PostgreSQL table keyed by the event id (a re-sent event is stored once)",
		open: func(p *Poller) { p.Delivery.Postgres = &Postgres{} }, build: buildPostgres},
	{path: "delivery.postgres.url", kind: kindString, required: true, check: checkBrokerURL("postgres", "postgresql"), allowed: "postgres:// URL",
		doc: "the database; a password may be in it (`postgres://watukuy:${PG_PASSWORD}@host:5432/app`), never shown", ptr: func(p *Poller) any { return &p.Delivery.Postgres.URL }},
	{path: "delivery.postgres.table", kind: kindString, required: true, check: checkTable, allowed: "`table` or `schema.table`",
		doc: "the table (its columns: [Broker sinks](#broker-sinks))", ptr: func(p *Poller) any { return &p.Delivery.Postgres.Table }},
	{path: "delivery.postgres.create", kind: kindBool, def: "false", doc: "create the table (and its schema) if it is missing",
		ptr: func(p *Poller) any { return &p.Delivery.Postgres.Create }},
	{path: "delivery.postgres.maxConns", kind: kindInt, min: 1, def: "4", doc: "connections of the process's pool for this sink",
		ptr: func(p *Poller) any { return &p.Delivery.Postgres.MaxConns }},
	{path: "delivery.postgres.timeout", kind: kindDuration, def: fmtDuration(pgsink.DefaultTimeout), doc: "bounds one attempt, from connecting to the insert's commit",
		ptr: func(p *Poller) any { return &p.Delivery.Postgres.Timeout }},
	{path: "delivery.concurrency", kind: kindInt, min: 1, def: strconv.Itoa(core.DefaultConcurrency), sets: "Delivery.Concurrency",
		doc: "ordering keys delivered at once", ptr: func(p *Poller) any { return &p.Delivery.Concurrency },
		build: func(b *builder) error { b.p.Delivery.Concurrency = b.pc.Delivery.Concurrency; return nil }},
	{path: "delivery.batch", kind: kindInt, min: 1, def: strconv.Itoa(core.DefaultBatch), sets: "Delivery.Batch",
		doc:   "outbox events one read takes, delivered and acked together: larger costs fewer round trips per event, smaller acks sooner (fewer events delivered again after a worker dies mid-batch)",
		ptr:   func(p *Poller) any { return &p.Delivery.Batch },
		build: func(b *builder) error { b.p.Delivery.Batch = b.pc.Delivery.Batch; return nil }},
	{path: "delivery.orderingKey", kind: kindString, def: "identity", sets: "Delivery.OrderingKey",
		doc: "`identity` or a gjson path of the item: events with the same key are delivered in order", ptr: func(p *Poller) any { return &p.Delivery.OrderingKey },
		build: buildOrderingKey},
	{path: "delivery.attempts", kind: kindInt, min: 1, def: strconv.Itoa(core.DefaultAttempts), sets: "Delivery.Attempts",
		doc: "attempts of one try of an event, within a cycle (its tries go on across cycles: `delivery.retry`)", ptr: func(p *Poller) any { return &p.Delivery.Attempts },
		build: func(b *builder) error { b.p.Delivery.Attempts = b.pc.Delivery.Attempts; return nil }},
	{path: "delivery.retry", kind: kindBlock, sets: "Delivery.Retry", after: checkRetry, build: buildRetry,
		doc: "spaces the tries of an event whose handler failed, across cycles: after try n the event waits half to all of min(max, base×factor^(n-1)), " +
			"first among its ordering key's events; a sink that fails as a whole (unreachable, or 5xx/timeouts on two events with none delivered) " +
			"blocks the key's delivery instead, tried again on the same waits capped at schedule.max"},
	{path: "delivery.retry.base", kind: kindDuration, def: fmtDuration(core.DefaultRetryBase), doc: "the wait bound after the first failed try",
		ptr: func(p *Poller) any { return &p.Delivery.Retry.Base }},
	{path: "delivery.retry.factor", kind: kindFloat, def: "2", allowed: "≥ 1",
		decode: factorOf(func(p *Poller) *float64 { return &p.Delivery.Retry.Factor }), doc: "multiplies the bound after each further try"},
	{path: "delivery.retry.max", kind: kindDuration, def: fmtDuration(core.DefaultRetryMax) + " (at least base)", doc: "the largest bound",
		ptr: func(p *Poller) any { return &p.Delivery.Retry.Max }},
	{path: "delivery.retry.horizon", kind: kindDuration, def: fmtDuration(core.DefaultRetryHorizon), allowed: "> 0 or `none`", sets: "Delivery.RetryHorizon",
		decode: decodeHorizon, doc: "how long an event may keep failing while its sink works (other events deliver) before it is poison; " +
			"a sink blocked longer makes the events its tries fail poison; `none`: poison after one try (a blocked sink then never poisons)"},
	{path: "delivery.poison", kind: kindString, enum: poisons, what: "poison", def: PoisonPark, sets: "Delivery.Poison",
		doc: "a poison event is parked (the key goes on) or halts the key", ptr: func(p *Poller) any { return &p.Delivery.Poison },
		build: func(b *builder) error {
			if b.pc.Delivery.Poison == PoisonHalt {
				b.p.Delivery.Poison = watukuytype.PoisonHalt
			}
			return nil
		}},
}

// pollerEntry is the poller entry itself, the block that holds the top-level keys.
var pollerEntry = &field{kind: kindBlock, after: checkEntry}

// keysOf lists the keys of the block at path ("" = the poller entry) in schema order.
func keysOf(path string) []*field {
	var out []*field
	for _, f := range schema {
		if f.parent() == path {
			out = append(out, f)
		}
	}
	return out
}

// fieldNames is the names of fs.
func fieldNames(fs []*field) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.name()
	}
	return out
}

// fmtDuration shows a default duration the way the file writes it ("5m", "30d").
func fmtDuration(d time.Duration) string {
	if day := 24 * time.Hour; d >= day && d%day == 0 {
		return fmt.Sprintf("%dd", d/day)
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Locate adds the file, the poller's line and the key to an engine *watukuytype.ConfigError about
// one of the file's pollers: the engine owns the checks it shares with Go-defined pollers, and
// this says where the file went wrong. Other errors are returned as they are.
func (c *Config) Locate(err error) error {
	var ce *watukuytype.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	i := slices.IndexFunc(c.Pollers, func(p Poller) bool { return p.Name == ce.Poller })
	if i < 0 {
		return err
	}
	field := join(index("pollers", i), keyOf(ce.Field))
	return &Error{File: c.File, Line: c.Pollers[i].Line, Field: field, Msg: c.red.redact(field, ce.Msg), Err: err}
}

// keyOf is the file's key for an engine field: the key of that path, or the key that sets
// the poller field of that name.
func keyOf(engineField string) string {
	for _, f := range schema {
		if f.path == engineField {
			return f.path
		}
	}
	for _, f := range schema {
		for _, name := range strings.Split(f.sets, ", ") {
			if strings.EqualFold(name, engineField) {
				return f.path
			}
		}
	}
	return engineField
}
