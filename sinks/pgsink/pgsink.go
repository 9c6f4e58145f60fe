// Package pgsink is the PostgreSQL sink: each event becomes a row of a table, for consumers
// that read their events with SQL. A Sink's Handle is a watukuytype.Handler.
//
// The table, as Config.Create makes it (operators who would rather create it themselves run
// this, with their own name; the role the sink connects as then needs INSERT on it and SELECT
// on its id column, which ON CONFLICT (id) reads: GRANT INSERT, SELECT (id) ON … TO …):
//
//	CREATE SCHEMA IF NOT EXISTS watukuy;  -- for a qualified name
//	CREATE TABLE IF NOT EXISTS watukuy.events (
//	    id          text PRIMARY KEY,
//	    poller      text NOT NULL,
//	    partition   text NOT NULL,
//	    type        text NOT NULL,
//	    identity    text NOT NULL,
//	    seq         text,
//	    observed_at timestamptz NOT NULL,
//	    envelope    jsonb NOT NULL,
//	    inserted_at timestamptz NOT NULL DEFAULT now()
//	);
//
// More columns (with defaults) and indexes of the operator's are fine; id must stay the
// primary key (or carry a unique index of its own), which the insert's ON CONFLICT (id) needs.
// Config.Table is taken as written and quoted, so "Events" and "events" are two tables.
//
// Handle runs, in a transaction of its own,
//
//	INSERT INTO <table> (id, poller, partition, type, identity, seq, observed_at, envelope)
//	VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING
//
// and returns nil only once PostgreSQL has committed it. The columns hold the event's fields
// (seq is NULL for an event without one) and envelope holds sink.Envelope(ev): the same JSON
// value the other sinks send as bytes, stored as jsonb, so key order and whitespace are
// PostgreSQL's (and of a key repeated in an item it keeps the last) and envelope::text is not
// the envelope byte for byte.
//
// What "once" means here: the event id is the primary key, so an event sent again (an insert
// whose answer was lost and is retried, a redelivery after a worker died, a replay) is stored
// once, however long after the first send, and the first row stays as it was. That holds while
// the row is kept: a consumer that deletes the rows it has read lets a later resend of the same
// event in again, so such a consumer keeps the ids it has seen (or marks rows instead).
//
// Errors name the sink, the URL (credentials redacted: a URL's userinfo and its user and
// password-like query values, a key=value DSN's user= and password=) and the table, and are
// classified for the engine:
//
//   - any event would meet it (the server cannot be reached, the connection broke, credentials
//     refused, the database, schema or table missing or of another shape, permission denied, a
//     read-only server, the sink closed): watukuytype.SinkUnavailable, so the key's delivery
//     blocks and retries and no good event is parked;
//   - a timeout (Config.Timeout) or a failure of the server (serialization, deadlock, lock
//     timeout, statement cancelled, out of resources, an internal error): a
//     *watukuytype.SinkError;
//   - PostgreSQL refused this row (class 22, data exceptions: a NUL byte, which neither text nor
//     jsonb holds, a value too long; class 23, a constraint of the operator's; class 54, a row
//     over a limit): a plain error, counted against the event; so is the failure of an attempt
//     whose caller's context ended first.
//
// With Create, a table dropped while the sink runs is created again at the next attempt.
package pgsink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/watukuy/watukuy/httppoll"
	"github.com/watukuy/watukuy/internal/sink"
	"github.com/watukuy/watukuy/watukuytype"
)

// Defaults of Config.
const (
	// DefaultTimeout bounds one Handle or Probe, from connecting to the commit.
	DefaultTimeout = 10 * time.Second
	// DefaultMaxConns is the pool's size: at most this many inserts run at once.
	DefaultMaxConns = 4
)

// kind names the sink in messages and metrics.
const kind = "postgres"

// Config is a PostgreSQL sink's setting.
type Config struct {
	// URL is a postgres:// (or postgresql://) URL or a key=value DSN, as pgx takes them, with
	// pgx's environment variables and ~/.pgpass as defaults. Its pool_max_conns is overridden
	// by MaxConns.
	URL string
	// Table is "name" or "schema.name", taken as written (quoted: case matters); an
	// unqualified name is looked up on the role's search_path.
	Table string
	// Create makes the first connection create the schema (when named) and the table when
	// they are missing (the DDL is in the package doc); without it a missing table is an
	// outage of the sink.
	Create bool
	// MaxConns is the pool's size (default 4): more Handles at once wait for a connection,
	// within Timeout.
	MaxConns int32
	// Timeout bounds one Handle or Probe, from connecting to the commit (default 10s); the
	// caller's context applies too.
	Timeout time.Duration
}

// Sink inserts events into a PostgreSQL table. Build it with New; it is safe for concurrent
// use.
type Sink struct {
	cfg     Config
	pool    *pgxpool.Config
	schema  string // "" for an unqualified table
	quoted  string // the table as an SQL identifier
	insert  string
	target  string // URL redacted, and the table
	secrets []string

	mu     sync.Mutex
	p      *pgxpool.Pool
	closed bool

	// createMu lets one Handle run the DDL while the others wait for it.
	createMu sync.Mutex
	created  atomic.Bool
}

// New validates cfg and fills in the defaults. It connects nothing: the first Handle (or
// Probe) does, so a worker starts while PostgreSQL is down.
func New(cfg Config) (*Sink, error) {
	if strings.TrimSpace(cfg.URL) == "" {
		return nil, errors.New("sink: postgres: url is empty")
	}
	redacted, dsnSecrets, err := redactConnString(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("sink: postgres: url %s: %w", redacted, err)
	}
	secrets := append(urlSecrets(cfg.URL), dsnSecrets...)
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("sink: postgres: url %s does not parse: %w", redacted, sink.Scrub(parseCause(err), secrets))
	}
	if pw := pc.ConnConfig.Password; len(pw) >= 4 { // also from PGPASSWORD or ~/.pgpass
		secrets = append(secrets, pw)
	}
	schema, name, err := splitTable(cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("sink: postgres %s: table: %w", redacted, err)
	}
	if cfg.MaxConns < 0 {
		return nil, fmt.Errorf("sink: postgres %s: negative maxConns %d", redacted, cfg.MaxConns)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("sink: postgres %s: negative timeout %s", redacted, cfg.Timeout)
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	pc.MaxConns = cfg.MaxConns
	if pc.ConnConfig.ConnectTimeout == 0 {
		// pgxpool finishes a connection attempt in the background after its caller gave up;
		// this keeps such an attempt as short as a Handle.
		pc.ConnConfig.ConnectTimeout = cfg.Timeout
	}
	ident := pgx.Identifier{name}
	if schema != "" {
		ident = pgx.Identifier{schema, name}
	}
	quoted := ident.Sanitize()
	return &Sink{
		cfg:    cfg,
		pool:   pc,
		schema: schema,
		quoted: quoted,
		insert: "INSERT INTO " + quoted + " (id, poller, partition, type, identity, seq, observed_at, envelope) " +
			"VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (id) DO NOTHING",
		target:  redacted + " table " + cfg.Table,
		secrets: secrets,
	}, nil
}

// splitTable checks "name" or "schema.name".
func splitTable(t string) (schema, name string, err error) {
	if t == "" {
		return "", "", errors.New(`empty: want "name" or "schema.name"`)
	}
	parts := strings.Split(t, ".")
	if len(parts) > 2 {
		return "", "", fmt.Errorf(`%q has %d dots: want "name" or "schema.name"`, t, len(parts)-1)
	}
	for _, p := range parts {
		if strings.TrimSpace(p) == "" || strings.IndexByte(p, 0) >= 0 {
			return "", "", fmt.Errorf(`%q: want "name" or "schema.name", each part non-empty`, t)
		}
	}
	if len(parts) == 1 {
		return "", parts[0], nil
	}
	return parts[0], parts[1], nil
}

// Kind is "postgres".
func (s *Sink) Kind() string { return kind }

// Target is the URL, credentials redacted, and the table: "postgres://[redacted]@db:5432/app
// table watukuy.events".
func (s *Sink) Target() string { return s.target }

// errClosed is the cause of every Handle and Probe after Close.
var errClosed = errors.New("the sink is closed")

// getPool returns the pool, made at the first call (pgxpool connects on demand and replaces
// broken connections, so one pool serves the sink's whole life).
func (s *Sink) getPool() (*pgxpool.Pool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errClosed
	}
	if s.p == nil {
		p, err := pgxpool.NewWithConfig(context.Background(), s.pool.Copy())
		if err != nil {
			return nil, err
		}
		s.p = p
	}
	return s.p, nil
}

// Handle inserts one event and returns once the insert has committed.
func (s *Sink) Handle(ctx context.Context, ev watukuytype.Event) error {
	body, err := sink.Envelope(ev)
	if err != nil {
		return err
	}
	what := "event " + ev.ID
	pool, err := s.getPool()
	if err != nil {
		return watukuytype.SinkUnavailable(s.errorf(what, err))
	}
	actx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	if err := s.ensureTable(actx, pool); err != nil {
		return s.fail(ctx, actx, what+": create table", err, false)
	}
	var seq any
	if ev.Seq != "" {
		seq = ev.Seq
	}
	_, err = pool.Exec(actx, s.insert, ev.ID, ev.Poller, ev.Partition, string(ev.Type), ev.Identity, seq,
		ev.ObservedAt, json.RawMessage(body))
	if err != nil {
		if s.cfg.Create && (sqlState(err) == "42P01" || sqlState(err) == "3F000") {
			s.created.Store(false) // dropped under the sink: the next attempt creates it again
		}
		return s.fail(ctx, actx, what+": insert", err, true)
	}
	return nil
}

// ensureTable runs the DDL once per Sink, when Create is set.
func (s *Sink) ensureTable(ctx context.Context, pool *pgxpool.Pool) error {
	if !s.cfg.Create || s.created.Load() {
		return nil
	}
	s.createMu.Lock()
	defer s.createMu.Unlock()
	if s.created.Load() {
		return nil
	}
	for attempt := 1; ; attempt++ {
		err := s.create(ctx, pool)
		if err == nil {
			s.created.Store(true)
			return nil
		}
		// IF NOT EXISTS checks the catalog before it writes, so two sessions creating at once
		// can both pass the check and one then fails on the catalog's unique index (23505) or
		// as a duplicate (42P06, 42P07). Once the other committed, running it again finds it.
		switch sqlState(err) {
		case "23505", "42P06", "42P07":
			if attempt < 5 {
				continue
			}
		}
		return err
	}
}

// create runs the DDL for what is missing. It looks first: PostgreSQL checks the privilege
// to create before IF NOT EXISTS, so a role that may only insert into a table an operator made
// would fail on a CREATE it does not need.
func (s *Sink) create(ctx context.Context, pool *pgxpool.Pool) error {
	var schema any
	if s.schema != "" {
		schema = pgx.Identifier{s.schema}.Sanitize()
	}
	var tableFound, schemaFound bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1::text) IS NOT NULL, $2::text IS NULL OR to_regnamespace($2::text) IS NOT NULL",
		s.quoted, schema).Scan(&tableFound, &schemaFound); err != nil {
		return err
	}
	if tableFound {
		return nil
	}
	if !schemaFound {
		if _, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{s.schema}.Sanitize()); err != nil {
			return err
		}
	}
	_, err := pool.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+s.quoted+` (
	id          text PRIMARY KEY,
	poller      text NOT NULL,
	partition   text NOT NULL,
	type        text NOT NULL,
	identity    text NOT NULL,
	seq         text,
	observed_at timestamptz NOT NULL,
	envelope    jsonb NOT NULL,
	inserted_at timestamptz NOT NULL DEFAULT now()
)`)
	return err
}

// columns are those the insert writes, which Probe looks for.
var columns = []string{"id", "poller", "partition", "type", "identity", "seq", "observed_at", "envelope"}

// probeSQL reads, in one row, whether the table exists, its schema and name, whether the role
// may insert (INSERT, and SELECT on id for ON CONFLICT (id)), its columns, whether id has a unique index of its own (ON CONFLICT (id) needs
// one), and whether the schema named ($2, NULL for none) exists.
const probeSQL = `SELECT c.oid IS NOT NULL, coalesce(n.nspname, ''), coalesce(c.relname, ''),
	coalesce(has_table_privilege(c.oid, 'INSERT'), false) AND coalesce((SELECT has_column_privilege(c.oid, a.attnum, 'SELECT') FROM pg_attribute a
			WHERE a.attrelid = c.oid AND a.attname = 'id' AND NOT a.attisdropped), false),
	coalesce((SELECT array_agg(a.attname::text) FROM pg_attribute a
		WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '{}'),
	EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
		WHERE i.indrelid = c.oid AND i.indisunique AND i.indnkeyatts = 1 AND i.indpred IS NULL AND a.attname = 'id'),
	$2::text IS NULL OR to_regnamespace($2::text) IS NOT NULL
FROM (SELECT to_regclass($1::text) AS oid) r
LEFT JOIN pg_class c ON c.oid = r.oid
LEFT JOIN pg_namespace n ON n.oid = c.relnamespace`

// Probe connects and checks that the table exists with the columns the insert writes, a unique
// id and INSERT allowed: "table public.events exists". With Create, a missing table is what
// the first event creates, which the sentence says; Probe itself inserts and creates nothing.
func (s *Sink) Probe(ctx context.Context) (string, error) {
	pool, err := s.getPool()
	if err != nil {
		return "", watukuytype.SinkUnavailable(s.errorf("probe", err))
	}
	actx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	var schema any
	if s.schema != "" {
		schema = pgx.Identifier{s.schema}.Sanitize()
	}
	var (
		found, canInsert, uniqueID, schemaFound bool
		nsp, rel                                string
		cols                                    []string
	)
	err = pool.QueryRow(actx, probeSQL, s.quoted, schema).Scan(&found, &nsp, &rel, &canInsert, &cols, &uniqueID, &schemaFound)
	if err != nil {
		return "", s.fail(ctx, actx, "probe", err, false)
	}
	unusable := func(format string, args ...any) error {
		return watukuytype.SinkUnavailable(s.errorf("probe", fmt.Errorf(format, args...)))
	}
	switch {
	case !found && s.cfg.Create && !schemaFound:
		return fmt.Sprintf("schema %s and table %s do not exist: the first event creates them (create: true)", s.schema, s.cfg.Table), nil
	case !found && s.cfg.Create:
		return fmt.Sprintf("table %s does not exist: the first event creates it (create: true)", s.cfg.Table), nil
	case !found && !schemaFound:
		return "", unusable("schema %s does not exist: create it and the table (the DDL is in package pgsink's doc), or set create: true", s.schema)
	case !found:
		return "", unusable("table %s does not exist: create it (the DDL is in package pgsink's doc), or set create: true", s.cfg.Table)
	}
	qualified := nsp + "." + rel
	var missing []string
	for _, c := range columns {
		if !contains(cols, c) {
			missing = append(missing, c)
		}
	}
	switch {
	case len(missing) > 0:
		return "", unusable("table %s lacks the column(s) %s: compare it with the DDL in package pgsink's doc", qualified, strings.Join(missing, ", "))
	case !uniqueID:
		return "", unusable("table %s has no primary key or unique index on id alone, which the insert's ON CONFLICT (id) needs", qualified)
	case !canInsert:
		return "", unusable("the role the sink connects as may not insert into table %s: GRANT INSERT, SELECT (id) ON it (ON CONFLICT (id) reads id)", qualified)
	}
	return "table " + qualified + " exists", nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Close closes the pool's connections, after the inserts under way finish; Handle and Probe
// then fail. Calling it again does nothing.
func (s *Sink) Close() error {
	s.mu.Lock()
	p := s.p
	s.p, s.closed = nil, true
	s.mu.Unlock()
	if p != nil {
		p.Close()
	}
	return nil
}

// errorf is the sink's message for a failed step (what), the cause's text scrubbed of
// credentials.
func (s *Sink) errorf(what string, cause error) error {
	return fmt.Errorf("sink: %s %s: %s: %w", kind, s.target, what, s.clean(cause))
}

// clean drops *pgconn.ConnectError's prefix, which repeats the user and database, and
// scrubs the credentials from what pgx and the server wrote.
func (s *Sink) clean(err error) error {
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) && ce.Unwrap() != nil {
		err = ce.Unwrap()
	}
	return sink.Scrub(err, s.secrets)
}

// fail classifies the failure of a step (see the package doc). ctx is the caller's, actx the
// attempt's (bounded by Timeout); row says the step carried the event's data, so a data
// exception is the event's (the DDL's or the probe's is the server's).
func (s *Sink) fail(ctx, actx context.Context, what string, err error, row bool) error {
	if ctx.Err() != nil { // the caller gave up: nothing is known about the sink
		return s.errorf(what, err)
	}
	if errors.Is(actx.Err(), context.DeadlineExceeded) || pgconn.Timeout(err) {
		return &watukuytype.SinkError{Err: s.errorf(fmt.Sprintf("%s: timed out after %s", what, s.cfg.Timeout), err)}
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		// No answer from the server: it cannot be reached, the connection broke, or pgx
		// refused to go on with it (a closed pool).
		return watukuytype.SinkUnavailable(s.errorf(what, err))
	}
	code := pe.Code
	switch {
	case row && (strings.HasPrefix(code, "22") || strings.HasPrefix(code, "23") || strings.HasPrefix(code, "54")):
		// This row's data: invalid text or JSON, a constraint of the operator's, too large.
		return s.errorf(what, err)
	case code == "42P01":
		return watukuytype.SinkUnavailable(s.errorf(what+": table "+s.cfg.Table+" does not exist: create it (the DDL is in package pgsink's doc), or set create: true", err))
	case code == "3F000":
		return watukuytype.SinkUnavailable(s.errorf(what+": schema "+s.schema+" of table "+s.cfg.Table+" does not exist: create it and the table, or set create: true", err))
	case code == "42501":
		return watukuytype.SinkUnavailable(s.errorf(what+": permission denied on table "+s.cfg.Table+": grant the role INSERT and SELECT (id) on it (ON CONFLICT (id) reads id), and USAGE on its schema (with create, CREATE)", err))
	case strings.HasPrefix(code, "28"):
		return watukuytype.SinkUnavailable(s.errorf(what+": the server refused the credentials", err))
	case strings.HasPrefix(code, "42"):
		// The statement does not fit the table (a missing column, no unique index on id, a
		// column of another type): every event meets it.
		return watukuytype.SinkUnavailable(s.errorf(what+": table "+s.cfg.Table+" does not fit the insert: compare it with the DDL in package pgsink's doc", err))
	case strings.HasPrefix(code, "08"), // connection exception
		strings.HasPrefix(code, "3D"),                     // the database does not exist
		code == "25006",                                   // a read-only server (a standby)
		code == "53300",                                   // too many connections
		code == "57P01", code == "57P02", code == "57P03": // shutting down, starting up
		return watukuytype.SinkUnavailable(s.errorf(what, err))
	default:
		// Serialization failure, deadlock, lock timeout, statement cancelled, out of memory or
		// disk, an internal error: the server's failure.
		return &watukuytype.SinkError{Err: s.errorf(what, err)}
	}
}

// sqlState is the SQLSTATE of a PostgreSQL error in err's chain, or "".
func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// parseCause is pgx's reason why a connection string does not parse, without the string
// (pgx's message quotes it, redacting only the password).
func parseCause(err error) error {
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return err
	}
	msg := pe.Error()
	if i := strings.LastIndex(msg, "`: "); i >= 0 {
		msg = msg[i+3:]
	}
	return errors.New(msg)
}

// redactConnString returns raw safe to show, and the secret values of a key=value DSN. A URL
// goes through httppoll.RedactURL; in a DSN the values of user, password, sslpassword and any
// key that names a secret are replaced by "[redacted]", everything else kept as written.
func redactConnString(raw string) (string, []string, error) {
	if strings.HasPrefix(raw, "postgres://") || strings.HasPrefix(raw, "postgresql://") {
		return redactURL(raw)
	}
	var b strings.Builder
	var secrets []string
	s := raw
	for {
		// Copy the whitespace and the key with its '=' as written.
		rest := strings.TrimLeft(s, " \t\n\r\v\f")
		b.WriteString(s[:len(s)-len(rest)])
		s = rest
		if s == "" {
			break
		}
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return "[invalid DSN]", secrets, errors.New(`not a URL (postgres://…) nor a key=value DSN: a part has no "="`)
		}
		key := strings.TrimSpace(s[:eq])
		afterEq := strings.TrimLeft(s[eq+1:], " \t\n\r\v\f")
		b.WriteString(s[:len(s)-len(afterEq)])
		s = afterEq
		// The value: quoted ('…' with backslash escapes) or up to the next space.
		end := 0
		if s != "" && s[0] == '\'' {
			end = 1
			for ; end < len(s) && s[end] != '\''; end++ {
				if s[end] == '\\' {
					end++
				}
			}
			if end >= len(s) {
				return "[invalid DSN]", secrets, errors.New("unterminated quoted value in the DSN")
			}
			end++ // the closing quote
		} else {
			for ; end < len(s) && !strings.ContainsRune(" \t\n\r\v\f", rune(s[end])); end++ {
				if s[end] == '\\' {
					end++
				}
			}
			end = min(end, len(s))
		}
		val := s[:end]
		s = s[end:]
		if secretKey(key) {
			b.WriteString(redacted)
			if v := unquote(val); len(v) >= 4 {
				secrets = append(secrets, v, val)
			}
			continue
		}
		b.WriteString(val)
	}
	return b.String(), secrets, nil
}

// redactURL is httppoll.RedactURL, which hides the userinfo and the secret query values, with
// the user given as a query parameter hidden too (and returned as a secret).
func redactURL(raw string) (string, []string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.RawQuery == "" {
		return httppoll.RedactURL(raw), nil, nil
	}
	var secrets []string
	parts := strings.Split(u.RawQuery, "&")
	for i, p := range parts {
		k, v, _ := strings.Cut(p, "=")
		if name, err := url.QueryUnescape(k); err == nil && name == "user" {
			parts[i] = k + "=" + redacted
			if uv, err := url.QueryUnescape(v); err == nil && len(uv) >= 4 {
				secrets = append(secrets, uv)
			}
		}
	}
	u.RawQuery = strings.Join(parts, "&")
	return httppoll.RedactURL(u.String()), secrets, nil
}

// redacted replaces a credential in a message.
const redacted = "[redacted]"

// secretKey reports whether a DSN key's value must not be shown.
func secretKey(key string) bool {
	k := strings.ToLower(key)
	return k == "user" || strings.Contains(k, "pass") || strings.Contains(k, "token") || strings.Contains(k, "secret")
}

// unquote is a DSN value as the server receives it.
func unquote(v string) string {
	if len(v) >= 2 && v[0] == '\'' && v[len(v)-1] == '\'' {
		v = v[1 : len(v)-1]
	}
	if !strings.Contains(v, `\`) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// urlSecrets lists the credentials of a postgres:// URL: sink.Secrets's, and the userinfo as
// pgx reads it (up to the first '@' before any '/'), which also covers URLs net/url refuses.
func urlSecrets(raw string) []string {
	p, ok := strings.CutPrefix(raw, "postgresql://")
	if !ok {
		if p, ok = strings.CutPrefix(raw, "postgres://"); !ok {
			return nil
		}
	}
	out := sink.Secrets(raw)
	if i := strings.IndexAny(p, "@/"); i >= 0 && p[i] == '@' {
		user, pw, _ := strings.Cut(p[:i], ":")
		for _, v := range []string{user, pw} {
			if len(v) >= 4 {
				out = append(out, v)
			}
		}
	}
	return out
}
