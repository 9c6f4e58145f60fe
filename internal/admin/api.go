// Package admin serves the admin HTTP API: the operator commands of the CLI as JSON endpoints
// under /api/, on the same engine methods, behind bearer tokens (package admintoken). Its routes are
// listed in NewAPI; docs/operations.md's "Admin API" section documents them.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/admintoken"
	"github.com/watukuy/watukuy/internal/outage"
	"github.com/watukuy/watukuy/watukuytype"
)

// DefaultMaxBody is Options.MaxBody when it is not set: every request body the API reads is a
// few fields.
const DefaultMaxBody = 64 << 10

const (
	// DefaultLimit is the page size of a listing without ?limit=.
	DefaultLimit = 100
	// MaxLimit is the largest ?limit= a listing takes.
	MaxLimit = 1000
	// MaxScan bounds the keys one GET /api/parked looks at: past it the answer stops with the
	// rows found so far (maybe none) and a next cursor, so that a request costs the same
	// however many keys there are.
	MaxScan = 10000
)

// Options configures the API.
type Options struct {
	// Engine is what the endpoints act on; it needs no pollers registered (they come from the
	// registry, as for the CLI).
	Engine *watukuy.Engine
	// Tokens are the bearer tokens accepted; with none the API answers every request with 404
	// "the admin API is off".
	Tokens *admintoken.Set
	// Login checks the status page's login cookie (share the page's, over the same Tokens);
	// default: NewLogin over Tokens.
	Login *Login
	// Logger gets one line per action, naming the token by its id.
	Logger zerolog.Logger
	// MaxBody bounds a request body (default DefaultMaxBody); a larger one is refused with 413.
	MaxBody int64
}

// api is the handler NewAPI returns.
type api struct {
	o      Options
	mux    *http.ServeMux
	routes []string // the patterns, for the 404 of a path no route takes
}

// NewAPI returns the handler of the routes below /api/ (mount it at "/api/"):
//
//	GET    /api/whoami
//	GET    /api/pollers                                          each poller's scheduled keys
//	GET    /api/keys[?poller=P&limit=N&after=C]                  {"keys","next"}
//	GET    /api/keys/{poller}/{partition}
//	POST   /api/keys/{poller}/{partition}/{trigger|pause|resume}
//	POST   /api/pollers/{poller}/{trigger|pause|resume}          every partition
//	GET    /api/keys/{poller}/{partition}/backfill
//	POST   /api/keys/{poller}/{partition}/backfill               {"from","to","force"}
//	POST   /api/pollers/{poller}/backfill                        every partition
//	POST   /api/keys/{poller}/{partition}/replay                 {"from","to"}
//	POST   /api/keys/{poller}/{partition}/reset-cursor           {"cursor","clearSnapshot"}
//	GET    /api/parked[?poller=P&kind=K&limit=N&after=C]         {"rows","next"}
//	GET    /api/keys/{poller}/{partition}/parked[?kind=K&limit=N&after=C]
//	POST   /api/keys/{poller}/{partition}/parked/{retry|discard} {"ids"} or {"all","kind"}
//	GET    /api/pollers/{poller}/partitions
//	POST   /api/pollers/{poller}/partitions                      {"partition"}
//	DELETE /api/pollers/{poller}/partitions/{partition}[?purge=true]
//
// A partition "-" in a path is the key of an unpartitioned poller. The listings answer a page
// at a time: limit rows (default DefaultLimit, at most MaxLimit) and next, the cursor to pass
// as after for the page that follows ("" after the last page).
func NewAPI(o Options) http.Handler {
	if o.MaxBody <= 0 {
		o.MaxBody = DefaultMaxBody
	}
	if o.Login == nil {
		o.Login = NewLogin(LoginOptions{Tokens: o.Tokens})
	}
	a := &api{o: o, mux: http.NewServeMux()}
	read := func(pattern string, h handlerFunc) {
		a.mux.Handle(pattern, a.route(false, true, h))
		a.routes = append(a.routes, pattern)
	}
	act := func(pattern string, h handlerFunc) {
		a.mux.Handle(pattern, a.route(true, true, h))
		a.routes = append(a.routes, pattern)
	}

	a.mux.Handle("GET /api/whoami", a.route(false, false, a.whoami)) // reads nothing in Redis
	a.routes = append(a.routes, "GET /api/whoami")
	read("GET /api/pollers", a.pollers)
	read("GET /api/keys", a.keys)
	read("GET /api/keys/{poller}/{partition}", a.key)
	for _, op := range keyOps {
		act("POST /api/keys/{poller}/{partition}/"+op.name, a.keyOp(op, false))
		act("POST /api/pollers/{poller}/"+op.name, a.keyOp(op, true))
	}
	read("GET /api/keys/{poller}/{partition}/backfill", a.backfillProgress)
	act("POST /api/keys/{poller}/{partition}/backfill", a.backfill(false))
	act("POST /api/pollers/{poller}/backfill", a.backfill(true))
	act("POST /api/keys/{poller}/{partition}/replay", a.replay)
	act("POST /api/keys/{poller}/{partition}/reset-cursor", a.resetCursor)
	read("GET /api/parked", a.parkedAll)
	read("GET /api/keys/{poller}/{partition}/parked", a.parkedOfKey)
	act("POST /api/keys/{poller}/{partition}/parked/retry", a.release("retry", watukuy.Parked.Retry))
	act("POST /api/keys/{poller}/{partition}/parked/discard", a.release("discard", watukuy.Parked.Discard))
	read("GET /api/pollers/{poller}/partitions", a.partitions)
	act("POST /api/pollers/{poller}/partitions", a.addPartition)
	act("DELETE /api/pollers/{poller}/partitions/{partition}", a.removePartition)
	return a
}

// handlerFunc is an endpoint: it returns the value to answer with (200) or an error, which
// ServeHTTP turns into the JSON error of its kind.
type handlerFunc func(ctx context.Context, c *call) (any, error)

// call is one request on its way through an endpoint.
type call struct {
	r     *http.Request
	token admintoken.Token
	// log is the action's log line, filled by the endpoint with what it did.
	log *zerolog.Event
}

func (a *api) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if a.o.Tokens.Len() == 0 {
		writeError(w, &Error{Status: http.StatusNotFound, Code: "api_off",
			Message: "the admin API is off: set WATUKUY_ADMIN_TOKEN (or admin.tokens in the config file) to turn it on"})
		return
	}
	if _, pattern := a.mux.Handler(r); pattern == "" {
		allowed := a.allowedMethods(r)
		if len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			writeError(w, &Error{Status: http.StatusMethodNotAllowed, Code: "method_not_allowed",
				Message: fmt.Sprintf("%s %s: allowed %s", r.Method, r.URL.Path, strings.Join(allowed, ", "))})
			return
		}
		writeError(w, &Error{Status: http.StatusNotFound, Code: "not_found", Known: a.routes,
			Message: fmt.Sprintf("no endpoint %s %s: known lists the endpoints", r.Method, r.URL.Path)})
		return
	}
	a.mux.ServeHTTP(w, r)
}

// allowedMethods lists the methods some route takes at r's path.
func (a *api) allowedMethods(r *http.Request) []string {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := a.mux.Handler(probe); pattern != "" {
			allowed = append(allowed, m)
		}
	}
	return allowed
}

// pingTimeout bounds the PING that precedes every endpoint that uses Redis. A Redis that
// does not answer (stopped, a cut link that drops packets, a frozen server) is then a 503 in
// about the client's read timeout (3 s by default) instead of that timeout for each retry of
// each command the endpoint sends (half a minute and more), and an action does not start on
// it. The endpoint itself runs without a deadline: a long listing or replay is not cut.
const pingTimeout = 2 * time.Second

// route authenticates a request, checks that its token may act when acts, checks that Redis
// answers when usesRedis, runs h and answers; an action is logged with the token's id and
// what it did.
func (a *api) route(acts, usesRedis bool, h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, cred, ok := a.o.Login.Authenticate(r)
		if !ok {
			e := &Error{Status: http.StatusUnauthorized, Code: "unauthorized", Message: "send Authorization: Bearer <token>"}
			if cred != NoCredential {
				e.Message = "the token matches none configured"
				a.o.Logger.Warn().Str("remote", r.RemoteAddr).Str("method", r.Method).Str("path", r.URL.Path).Msg("admin API: a request with an unknown token")
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="watukuy"`)
			writeError(w, e)
			return
		}
		if acts && t.ReadOnly {
			writeError(w, &Error{Status: http.StatusForbidden, Code: "read_only", Message: fmt.Sprintf("token %q is read-only: it can inspect but not act", t.ID)})
			return
		}
		if acts && cred == Cookie && r.Header.Get(RequestHeader) == "" {
			writeError(w, &Error{Status: http.StatusForbidden, Code: "csrf", Message: "a request that acts with the login cookie needs the header " + RequestHeader})
			return
		}
		c := &call{r: r, token: t}
		if acts {
			c.log = a.o.Logger.Info().Str("token", t.ID).Str("method", r.Method).Str("path", r.URL.Path)
		}
		r.Body = http.MaxBytesReader(w, r.Body, a.o.MaxBody)
		var v any
		err := a.ping(r.Context(), usesRedis)
		if err == nil {
			v, err = h(r.Context(), c)
		}
		if err != nil {
			e := classify(err)
			if e.RetryAfter > 0 {
				w.Header().Set("Retry-After", fmt.Sprint(e.RetryAfter))
			}
			if acts {
				a.o.Logger.Warn().Str("token", t.ID).Str("method", r.Method).Str("path", r.URL.Path).Int("status", e.Status).Str("code", e.Code).Msg("admin API: action failed: " + e.Message)
			}
			writeError(w, e)
			return
		}
		if acts {
			c.log.Msg("admin API: action")
		}
		writeJSON(w, http.StatusOK, v)
	})
}

// ping fails with an unreachable error when Redis does not answer a PING in pingTimeout.
func (a *api) ping(ctx context.Context, usesRedis bool) error {
	if !usesRedis || a.o.Engine == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, pingTimeout)
	defer cancel()
	if err := a.o.Engine.Redis().Ping(ctx).Err(); err != nil {
		if errors.Is(err, context.Canceled) {
			return err // the client left
		}
		return fmt.Errorf("Redis does not answer a PING (within %v): %w", pingTimeout, err)
	}
	return nil
}

// Error is an API error: its status, a code a client can switch on, a message for the
// operator, the request field at fault (400) and what exists (404).
type Error struct {
	Status int `json:"-"`
	// RetryAfter, in seconds, is sent as the Retry-After header of a retryable error.
	RetryAfter int      `json:"-"`
	Code       string   `json:"code"`
	Message    string   `json:"message"`
	Field      string   `json:"field,omitempty"`
	Known      []string `json:"known,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// badField is a 400 naming the field at fault.
func badField(field, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: "bad_request", Field: field, Message: field + ": " + fmt.Sprintf(format, args...)}
}

// classify turns an engine error into the API's.
func classify(err error) *Error {
	if se := (*watukuytype.StoppedError)(nil); errors.As(err, &se) {
		e := *classify(se.Err)
		e.Message += strings.TrimPrefix(se.Error(), se.Err.Error()) // " (stopped there: …)"
		return &e
	}
	var (
		ae  *Error
		nf  *watukuytype.NotFoundError
		ce  *watukuytype.ConfigError
		ru  *watukuytype.ReplayUnavailableError
		kb  *watukuytype.KeyBusyError
		cf  *watukuytype.ConflictError
		mbe *http.MaxBytesError
	)
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.As(err, &mbe):
		return &Error{Status: http.StatusRequestEntityTooLarge, Code: "too_large", Message: fmt.Sprintf("the request body is over %d bytes", mbe.Limit)}
	case errors.As(err, &nf):
		known := nf.Known
		if known == nil {
			known = []string{}
		}
		return &Error{Status: http.StatusNotFound, Code: "not_found", Message: nf.Error(), Known: known}
	case errors.As(err, &ru):
		return &Error{Status: http.StatusConflict, Code: "replay_unavailable", Message: ru.Error()}
	case errors.As(err, &cf):
		return &Error{Status: http.StatusConflict, Code: "conflict", Message: cf.Error()}
	case errors.As(err, &kb):
		return &Error{Status: http.StatusServiceUnavailable, Code: "key_busy", Message: kb.Error(), RetryAfter: 1}
	case errors.As(err, &ce):
		return &Error{Status: http.StatusBadRequest, Code: "bad_request", Field: strings.TrimPrefix(ce.Field, "--"), Message: ce.Error()}
	case outage.Unreachable(err):
		return &Error{Status: http.StatusServiceUnavailable, Code: "redis_unavailable", Message: err.Error(), RetryAfter: 1}
	case errors.Is(err, watukuytype.ErrEngineStopped):
		return &Error{Status: http.StatusServiceUnavailable, Code: "engine_stopped", Message: err.Error()}
	}
	return &Error{Status: http.StatusInternalServerError, Code: "internal", Message: err.Error()}
}

func writeError(w http.ResponseWriter, e *Error) {
	writeJSON(w, e.Status, struct {
		Error *Error `json:"error"`
	}{e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// decode reads a JSON body into v: an unknown field, a value of the wrong type or a body over
// the limit is refused naming the field. An empty body is an empty object.
func decode(c *call, v any) error {
	dec := json.NewDecoder(c.r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if errors.Is(err, io.EOF) {
		return nil
	}
	var (
		te  *json.UnmarshalTypeError
		se  *json.SyntaxError
		mbe *http.MaxBytesError
	)
	switch {
	case err == nil:
		if dec.More() {
			return badField("body", "want one JSON object, found more after it")
		}
		return nil
	case errors.As(err, &mbe):
		return err
	case errors.As(err, &te):
		return badField(te.Field, "want %s, got JSON %s", te.Type, te.Value)
	case errors.As(err, &se):
		return badField("body", "not JSON: %v (at byte %d)", err, se.Offset)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return badField(name, "unknown field")
	}
	return badField("body", "%v", err)
}

// keyOf is the request's key: {poller} and {partition}, "-" naming the unpartitioned one.
func keyOf(r *http.Request) watukuytype.Key {
	part := r.PathValue("partition")
	if part == "-" {
		part = ""
	}
	return watukuytype.Key{Poller: r.PathValue("poller"), Partition: part}
}

// eachKey calls fn with each key an endpoint acts on (Engine.Each): the path's key, or with
// all every partition of the path's poller that is not deleted. The engine refuses a path's
// key that does not exist or is deleted (404).
func (a *api) eachKey(ctx context.Context, r *http.Request, all bool, fn func(watukuytype.Key) error) error {
	k := keyOf(r)
	var named []string
	if !all {
		named = []string{k.Partition}
	}
	n, err := a.o.Engine.Each(ctx, k.Poller, named, fn)
	if err == nil && n == 0 {
		return &Error{Status: http.StatusNotFound, Code: "not_found", Known: []string{},
			Message: fmt.Sprintf("poller %q has no partitions (all were deleted): add one with POST /api/pollers/%s/partitions", k.Poller, k.Poller)}
	}
	return err
}

// limitParam reads ?limit=: DefaultLimit when absent, a 400 unless a number from 1 to
// MaxLimit.
func limitParam(r *http.Request) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return DefaultLimit, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > MaxLimit {
		return 0, badField("limit", "%q: want a number from 1 to %d", v, MaxLimit)
	}
	return n, nil
}

// keyCursor reads the ?after= of GET /api/keys: the next of an earlier answer, which names the
// last key of its page. A cursor of another poller than ?poller= is refused.
func keyCursor(r *http.Request, poller string) (string, error) {
	after := r.URL.Query().Get("after")
	if after == "" {
		return "", nil
	}
	k, err := watukuytype.ParseKey(after)
	if err != nil {
		return "", badField("after", "%q is not a cursor of this listing: pass the next of the previous answer", after)
	}
	if poller != "" && k.Poller != poller {
		return "", badField("after", "%q is a cursor of poller %q, not of %q", after, k.Poller, poller)
	}
	return after, nil
}

// keyStatus is one key and its status after an action.
type keyStatus struct {
	Poller    string `json:"poller"`
	Partition string `json:"partition"`
	Status    string `json:"status"`
}

// status inspects a key after an action, for its answer.
func (a *api) status(ctx context.Context, k watukuytype.Key) (keyStatus, error) {
	ki, err := a.o.Engine.Inspect(ctx, k)
	return keyStatus{Poller: k.Poller, Partition: k.Partition, Status: string(ki.Status)}, err
}

func (a *api) whoami(_ context.Context, c *call) (any, error) {
	return struct {
		ID       string `json:"id"`
		ReadOnly bool   `json:"readOnly"`
	}{c.token.ID, c.token.ReadOnly}, nil
}

// pollers counts each known poller's scheduled keys (registered and not deleted) in one read,
// whatever the number of keys.
func (a *api) pollers(ctx context.Context, _ *call) (any, error) {
	counts, err := a.o.Engine.PollerKeys(ctx)
	if err != nil {
		return nil, err
	}
	type poller struct {
		Name string `json:"name"`
		Keys int64  `json:"keys"`
	}
	out := make([]poller, 0, len(counts))
	for name, n := range counts {
		out = append(out, poller{Name: name, Keys: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return struct {
		Pollers []poller `json:"pollers"`
	}{out}, nil
}

// keys inspects one page of keys, in poller then partition order.
func (a *api) keys(ctx context.Context, c *call) (any, error) {
	poller := c.r.URL.Query().Get("poller")
	limit, err := limitParam(c.r)
	if err != nil {
		return nil, err
	}
	after, err := keyCursor(c.r, poller)
	if err != nil {
		return nil, err
	}
	kis, next, err := a.o.Engine.InspectPage(ctx, poller, after, limit)
	if err != nil {
		return nil, err
	}
	if kis == nil {
		kis = []watukuytype.KeyInfo{}
	}
	return struct {
		Keys []watukuytype.KeyInfo `json:"keys"`
		Next string                `json:"next"`
	}{kis, next}, nil
}

func (a *api) key(ctx context.Context, c *call) (any, error) {
	k := keyOf(c.r)
	return a.o.Engine.Inspect(ctx, k)
}

// keyOp is trigger, pause or resume.
type keyOp struct {
	name string
	fn   func(*watukuy.Engine, context.Context, watukuytype.Key) error
}

var keyOps = []keyOp{
	{"trigger", (*watukuy.Engine).Trigger},
	{"pause", (*watukuy.Engine).Pause},
	{"resume", (*watukuy.Engine).Resume},
}

func (a *api) keyOp(op keyOp, all bool) handlerFunc {
	return func(ctx context.Context, c *call) (any, error) {
		out := []keyStatus{}
		err := a.eachKey(ctx, c.r, all, func(k watukuytype.Key) error {
			if err := op.fn(a.o.Engine, ctx, k); err != nil {
				return err
			}
			st, err := a.status(ctx, k)
			if err != nil {
				return err
			}
			out = append(out, st)
			return nil
		})
		if err != nil {
			return nil, err
		}
		c.log.Str("action", op.name).Int("keys", len(out)).Str("poller", c.r.PathValue("poller"))
		if !all {
			c.log.Str("partition", keyOf(c.r).Partition)
		}
		return struct {
			Action string      `json:"action"`
			Keys   []keyStatus `json:"keys"`
		}{op.name, out}, nil
	}
}

func (a *api) backfillProgress(ctx context.Context, c *call) (any, error) {
	k := keyOf(c.r)
	ki, err := a.o.Engine.Inspect(ctx, k)
	if err != nil {
		return nil, err
	}
	return KeyBackfill{Poller: k.Poller, Partition: k.Partition, Backfill: ki.Backfill}, nil
}

// KeyBackfill is one key's backfill in an answer of the API, and in the CLI's backfill output.
type KeyBackfill struct {
	Poller    string                        `json:"poller"`
	Partition string                        `json:"partition"`
	Backfill  *watukuytype.BackfillProgress `json:"backfill"`
	Note      string                        `json:"note,omitempty"`
}

// nullable is a JSON string field that tells absent, null and a value apart.
type nullable struct {
	set   bool
	value *string
}

func (n *nullable) UnmarshalJSON(b []byte) error {
	n.set = true
	if string(b) == "null" {
		n.value = nil
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	n.value = &s
	return nil
}

// text is the value, "" for null.
func (n nullable) text() string {
	if n.value == nil {
		return ""
	}
	return *n.value
}

func (a *api) backfill(all bool) handlerFunc {
	return func(ctx context.Context, c *call) (any, error) {
		var body struct {
			From  nullable `json:"from"`
			To    nullable `json:"to"`
			Force bool     `json:"force"`
		}
		if err := decode(c, &body); err != nil {
			return nil, err
		}
		if !body.From.set {
			return nil, badField("from", `required: the cursor to start at, or null for the very beginning`)
		}
		req := watukuytype.BackfillRequest{From: body.From.text(), Force: body.Force}
		if body.To.set {
			to := body.To.text()
			req.To = &to
		}
		out := []KeyBackfill{}
		err := a.eachKey(ctx, c.r, all, func(k watukuytype.Key) error {
			bp, err := a.o.Engine.Backfill(ctx, k, req)
			if err != nil {
				return err
			}
			kb := KeyBackfill{Poller: k.Poller, Partition: k.Partition, Backfill: &bp}
			if ki, err := a.o.Engine.Inspect(ctx, k); err == nil && ki.Paused {
				kb.Note = "the key is " + string(ki.Status) + ": its backfill runs after it is resumed"
			}
			out = append(out, kb)
			return nil
		})
		if err != nil {
			return nil, err
		}
		c.log.Str("action", "backfill").Str("poller", c.r.PathValue("poller")).Int("keys", len(out)).
			Str("from", req.From).Bool("force", req.Force)
		if req.To != nil {
			c.log.Str("to", *req.To)
		}
		return struct {
			Keys []KeyBackfill `json:"keys"`
		}{out}, nil
	}
}

func (a *api) replay(ctx context.Context, c *call) (any, error) {
	var body struct {
		From *string `json:"from"`
		To   *string `json:"to"`
	}
	if err := decode(c, &body); err != nil {
		return nil, err
	}
	if body.From == nil {
		return nil, badField("from", "required: an RFC 3339 time, the start of the events to replay")
	}
	from, err := time.Parse(time.RFC3339Nano, *body.From)
	if err != nil {
		return nil, badField("from", "%q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", *body.From)
	}
	var to time.Time
	if body.To != nil {
		if to, err = time.Parse(time.RFC3339Nano, *body.To); err != nil {
			return nil, badField("to", "%q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", *body.To)
		}
		if to.Before(from) {
			return nil, badField("to", "%s is before from (%s)", *body.To, *body.From)
		}
	} else if from.After(time.Now()) {
		return nil, badField("from", "%s is in the future: nothing was logged after now", *body.From)
	}
	k := keyOf(c.r)
	n, err := a.o.Engine.Replay(ctx, k, from, to)
	if err != nil {
		return nil, err
	}
	c.log.Str("action", "replay").Str("poller", k.Poller).Str("partition", k.Partition).Time("from", from).Int("replayed", n)
	return struct {
		Poller    string `json:"poller"`
		Partition string `json:"partition"`
		Replayed  int    `json:"replayed"`
	}{k.Poller, k.Partition, n}, nil
}

func (a *api) resetCursor(ctx context.Context, c *call) (any, error) {
	var body struct {
		Cursor        nullable `json:"cursor"`
		ClearSnapshot bool     `json:"clearSnapshot"`
	}
	if err := decode(c, &body); err != nil {
		return nil, err
	}
	if !body.Cursor.set {
		return nil, badField("cursor", "required: the cursor to rewind the live lane to, or null for the very beginning")
	}
	k := keyOf(c.r)
	if err := a.o.Engine.ResetCursor(ctx, k, body.Cursor.text(), body.ClearSnapshot); err != nil {
		return nil, err
	}
	c.log.Str("action", "reset-cursor").Str("poller", k.Poller).Str("partition", k.Partition).Str("cursor", body.Cursor.text()).Bool("clearSnapshot", body.ClearSnapshot)
	return a.status(ctx, k)
}

// ParkedRow is a parked row with its key.
type ParkedRow struct {
	Poller    string `json:"poller"`
	Partition string `json:"partition"`
	watukuytype.ParkedInfo
}

// kindParam reads ?kind=.
func kindParam(r *http.Request) (string, error) {
	kind := r.URL.Query().Get("kind")
	if kind != "" && kind != "poison" && kind != "invalid" {
		return "", badField("kind", "%q: want poison or invalid", kind)
	}
	return kind, nil
}

// parkedPage reads up to n of k's parked rows of kind after the id after, and whether the key
// has more after them.
func parkedPage(ctx context.Context, eng *watukuy.Engine, k watukuytype.Key, kind, after string, n int) ([]watukuytype.ParkedInfo, bool, error) {
	ps, next, err := eng.Parked().Page(ctx, k, kind, after, n)
	return ps, next != "", err
}

// pageParams reads a parked listing's ?kind= and ?limit=.
func pageParams(r *http.Request) (kind string, limit int, err error) {
	if kind, err = kindParam(r); err != nil {
		return "", 0, err
	}
	limit, err = limitParam(r)
	return kind, limit, err
}

// parkedOfKey lists a page of the path's key's parked rows in id order (poison events before
// invalid items); next is the id of the page's last row, the after of the next page.
func (a *api) parkedOfKey(ctx context.Context, c *call) (any, error) {
	kind, limit, err := pageParams(c.r)
	if err != nil {
		return nil, err
	}
	k := keyOf(c.r)
	ps, more, err := parkedPage(ctx, a.o.Engine, k, kind, c.r.URL.Query().Get("after"), limit)
	if err != nil {
		return nil, err
	}
	rows := make([]ParkedRow, len(ps))
	for i, p := range ps {
		rows[i] = ParkedRow{k.Poller, k.Partition, p}
	}
	next := ""
	if more {
		next = ps[len(ps)-1].ID
	}
	return struct {
		Rows []ParkedRow `json:"rows"`
		Next string      `json:"next"`
	}{rows, next}, nil
}

// ParkedCursor is where a page of ParkedAcross starts: after the row ID of Key, or, with
// ID "", after every row of Key. Its text is poller|partition|id: a poller's name and a
// partition hold no '|'.
type ParkedCursor struct {
	Key watukuytype.Key
	ID  string
}

func (pc ParkedCursor) String() string { return pc.Key.Poller + "|" + pc.Key.Partition + "|" + pc.ID }

// ParseParkedCursor reads a cursor of ParkedAcross, as its next gives it ("" is nil: from the
// first row); with poller set, a cursor of another poller is refused.
func ParseParkedCursor(after, poller string) (*ParkedCursor, error) {
	if after == "" {
		return nil, nil
	}
	f := strings.SplitN(after, "|", 3)
	if len(f) != 3 || f[0] == "" {
		return nil, fmt.Errorf("%q is not a cursor of this listing: pass the next of the previous page", after)
	}
	if poller != "" && f[0] != poller {
		return nil, fmt.Errorf("%q is a cursor of poller %q, not of %q", after, f[0], poller)
	}
	return &ParkedCursor{Key: watukuytype.Key{Poller: f[0], Partition: f[1]}, ID: f[2]}, nil
}

// parkedAfter reads the ?after= of GET /api/parked (nil when absent); a cursor of another
// poller than ?poller= is refused.
func parkedAfter(r *http.Request, poller string) (*ParkedCursor, error) {
	pc, err := ParseParkedCursor(r.URL.Query().Get("after"), poller)
	if err != nil {
		return nil, badField("after", "%v", err)
	}
	return pc, nil
}

// gone reports whether err says the key left the registry (a partition deleted meanwhile): a
// listing across keys skips it.
func gone(err error) bool {
	var nf *watukuytype.NotFoundError
	return errors.As(err, &nf) && nf.PartitionMissing
}

// parkedAll lists a page of the parked rows of every key of ?poller= (of every poller when
// not given): ParkedAcross.
func (a *api) parkedAll(ctx context.Context, c *call) (any, error) {
	kind, limit, err := pageParams(c.r)
	if err != nil {
		return nil, err
	}
	poller := c.r.URL.Query().Get("poller")
	from, err := parkedAfter(c.r, poller)
	if err != nil {
		return nil, err
	}
	rows, next, err := ParkedAcross(ctx, a.o.Engine, poller, kind, from, limit)
	if err != nil {
		return nil, err
	}
	return struct {
		Rows []ParkedRow `json:"rows"`
		Next string      `json:"next"`
	}{rows, next}, nil
}

// ParkedAcross lists a page of up to limit parked rows of kind ("" for both) of every key of
// poller (of every poller when ""), after from (nil: from the first), ordered by key (poller,
// then partition) and then by id, and the cursor of the next page ("" at the end). It walks
// the keys a registry page at a time and counts their parked rows in one round trip per page,
// reading rows only from keys that have some; past MaxScan keys it answers what it found
// (maybe nothing) with the cursor to go on from, so that a page costs the same however many
// keys there are. GET /api/parked and `watukuy parked ls` list with it.
func ParkedAcross(ctx context.Context, eng *watukuy.Engine, poller, kind string, from *ParkedCursor, limit int) ([]ParkedRow, string, error) {
	rows, next := []ParkedRow{}, ""
	// take adds up to the page's room of k's rows after id, and reports whether the page is
	// full; then next is set when k has more.
	take := func(k watukuytype.Key, id string) (bool, error) {
		room := limit - len(rows)
		ps, more, err := parkedPage(ctx, eng, k, kind, id, room)
		if gone(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		for _, p := range ps {
			rows = append(rows, ParkedRow{k.Poller, k.Partition, p})
		}
		if more {
			next = ParkedCursor{k, ps[len(ps)-1].ID}.String()
		}
		return len(ps) == room, nil
	}
	// The first page of keys is read even when the cursor's key fills the page: it checks that
	// poller exists, and says whether rows may follow.
	keysAfter := ""
	if from != nil {
		keysAfter = from.Key.String()
	}
	keys, nextKeys, err := eng.KeysPage(ctx, poller, keysAfter, MaxLimit)
	if err != nil {
		return nil, "", err
	}
	counts, err := eng.Parked().Counts(ctx, keys)
	if err != nil {
		return nil, "", err
	}
	// doneAt ends a full page whose last key k has no rows left: the next page starts after k
	// when a later key has rows, or may.
	doneAt := func(k watukuytype.Key, later []int64) ([]ParkedRow, string, error) {
		if next == "" && (nextKeys != "" || slices.ContainsFunc(later, func(n int64) bool { return n > 0 })) {
			next = ParkedCursor{k, ""}.String()
		}
		return rows, next, nil
	}
	if from != nil && from.ID != "" {
		full, err := take(from.Key, from.ID)
		if err != nil {
			return nil, "", err
		}
		if full {
			return doneAt(from.Key, counts)
		}
	}
	for scanned := 0; ; {
		for i, k := range keys {
			scanned++
			if counts[i] == 0 {
				continue
			}
			full, err := take(k, "")
			if err != nil {
				return nil, "", err
			}
			if full {
				return doneAt(k, counts[i+1:])
			}
		}
		if nextKeys == "" {
			return rows, next, nil
		}
		if scanned >= MaxScan {
			return rows, ParkedCursor{keys[len(keys)-1], ""}.String(), nil
		}
		if keys, nextKeys, err = eng.KeysPage(ctx, poller, nextKeys, min(MaxLimit, MaxScan-scanned)); err != nil {
			return nil, "", err
		}
		if counts, err = eng.Parked().Counts(ctx, keys); err != nil {
			return nil, "", err
		}
	}
}

// release is parked retry or discard of the path's key.
func (a *api) release(action string, fn func(watukuy.Parked, context.Context, watukuytype.Key, ...string) (int, error)) handlerFunc {
	return func(ctx context.Context, c *call) (any, error) {
		var body struct {
			IDs  []string `json:"ids"`
			All  bool     `json:"all"`
			Kind string   `json:"kind"`
		}
		if err := decode(c, &body); err != nil {
			return nil, err
		}
		switch {
		case body.Kind != "" && body.Kind != "poison" && body.Kind != "invalid":
			return nil, badField("kind", "%q: want poison or invalid", body.Kind)
		case body.All && len(body.IDs) > 0:
			return nil, badField("ids", "all and ids exclude each other: all takes every parked row")
		case body.Kind != "" && !body.All:
			return nil, badField("kind", "kind narrows all: send all true")
		case !body.All && len(body.IDs) == 0:
			return nil, badField("ids", "required (or all true): the ids of the parked rows, as GET .../parked lists them")
		}
		k := keyOf(c.r)
		have, err := a.checkParked(ctx, k, body.Kind, body.IDs, "")
		if err != nil {
			return nil, err
		}
		ids := body.IDs
		if body.All {
			ids = have
		}
		if len(ids) == 0 { // nothing to release: the engine is not asked, so say what it would
			if ki, err := a.o.Engine.Inspect(ctx, k); err == nil && ki.Status == watukuytype.StatusDeleted {
				return nil, &watukuytype.NotFoundError{Poller: k.Poller, Partition: k.Partition, PartitionMissing: true, Deleted: true,
					Hint: "the partition is deleted: `partitions add` brings it back, empty"}
			}
		}
		n := 0
		if len(ids) > 0 {
			if n, err = fn(a.o.Engine.Parked(), ctx, k, ids...); err != nil {
				return nil, a.goneSince(ctx, k, body.Kind, ids, err)
			}
		}
		c.log.Str("action", "parked "+action).Str("poller", k.Poller).Str("partition", k.Partition).Strs("ids", ids).Int("released", n)
		type keyRelease struct {
			Poller    string   `json:"poller"`
			Partition string   `json:"partition"`
			IDs       []string `json:"ids"`
			Released  int      `json:"released"`
		}
		return struct {
			Action   string       `json:"action"`
			Released int          `json:"released"`
			Keys     []keyRelease `json:"keys"`
		}{action, n, []keyRelease{{k.Poller, k.Partition, ids, n}}}, nil
	}
}

// goneSince explains a release that failed (err) after the ids were checked: when one of
// them is no longer parked, another request (or a cycle) released it in between, and that
// is a 404 naming it, not the engine's plain "no parked row" (a 500).
func (a *api) goneSince(ctx context.Context, k watukuytype.Key, kind string, ids []string, err error) error {
	var gone *Error
	if _, cerr := a.checkParked(ctx, k, kind, ids, ": another request released it meanwhile"); errors.As(cerr, &gone) {
		return gone
	}
	return err
}

// checkParked lists the ids of k's parked rows of kind, and fails with a 404 naming the first
// of ids that is not among them (why says how it may have gone).
func (a *api) checkParked(ctx context.Context, k watukuytype.Key, kind string, ids []string, why string) ([]string, error) {
	rows, err := a.o.Engine.Parked().List(ctx, k, kind)
	if err != nil {
		return nil, err
	}
	have := make([]string, len(rows))
	parked := make(map[string]bool, len(rows))
	for i, r := range rows {
		have[i] = r.ID
		parked[r.ID] = true
	}
	for _, id := range ids {
		if !parked[id] {
			return have, &Error{Status: http.StatusNotFound, Code: "not_found", Known: have,
				Message: fmt.Sprintf("no parked row %q in %s%s", id, k.Describe(), why)}
		}
	}
	return have, nil
}

func (a *api) partitions(ctx context.Context, c *call) (any, error) {
	poller := c.r.PathValue("poller")
	kis, err := a.o.Engine.InspectAll(ctx, poller)
	if err != nil {
		return nil, err
	}
	return struct {
		Poller     string                `json:"poller"`
		Partitions []watukuytype.KeyInfo `json:"partitions"`
	}{poller, kis}, nil
}

func (a *api) addPartition(ctx context.Context, c *call) (any, error) {
	var body struct {
		Partition *string `json:"partition"`
	}
	if err := decode(c, &body); err != nil {
		return nil, err
	}
	if body.Partition == nil || *body.Partition == "" {
		return nil, badField("partition", "required: the name of the partition to add")
	}
	k := watukuytype.Key{Poller: c.r.PathValue("poller"), Partition: *body.Partition}
	if err := a.o.Engine.Partitions().Add(ctx, k); err != nil {
		if ce := (*watukuytype.ConfigError)(nil); errors.As(err, &ce) && ce.Field == "partitions" {
			return nil, badField("partition", "%s", ce.Msg)
		}
		return nil, err
	}
	c.log.Str("action", "partitions add").Str("poller", k.Poller).Str("partition", k.Partition)
	return a.status(ctx, k)
}

func (a *api) removePartition(ctx context.Context, c *call) (any, error) {
	purge := false
	switch v := c.r.URL.Query().Get("purge"); v {
	case "", "false":
	case "true":
		purge = true
	default:
		return nil, badField("purge", "%q: want true or false", v)
	}
	k := keyOf(c.r)
	action, fn := "partitions remove", a.o.Engine.Partitions().Remove
	if purge {
		action, fn = "partitions delete", a.o.Engine.Partitions().Delete
	}
	if err := fn(ctx, k); err != nil {
		return nil, err
	}
	c.log.Str("action", action).Str("poller", k.Poller).Str("partition", k.Partition)
	if purge { // the key has left the registry
		return keyStatus{Poller: k.Poller, Partition: k.Partition, Status: "deleted"}, nil
	}
	return a.status(ctx, k)
}
