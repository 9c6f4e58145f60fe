package natssink

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/watukuy/watukuy/httppoll"
	"github.com/watukuy/watukuy/internal/sink"
	"github.com/watukuy/watukuy/watukuytype"
)

// Defaults of Config.
const (
	// DefaultTimeout bounds one Handle (connecting included) and one Probe when
	// Config.Timeout is 0.
	DefaultTimeout = 10 * time.Second
	// DefaultDuplicateWindow is the duplicate window of a stream the sink creates when
	// Config.DuplicateWindow is 0; it is JetStream's own default.
	DefaultDuplicateWindow = 2 * time.Minute
)

// kind is the sink's name in errors and metrics.
const kind = "nats"

// JetStream error codes the client library has no constant for.
const (
	// errCodeStreamNotMatch: the Nats-Expected-Stream header names another stream than the
	// one that captured the subject.
	errCodeStreamNotMatch jetstream.ErrorCode = 10060
)

// ErrClosed is what Handle and Probe fail with (wrapped) after Close.
var ErrClosed = errors.New("the sink is closed")

// Config is a NATS JetStream sink's setting.
type Config struct {
	// URL is the server, "nats://host:port", or several separated by commas; "user:pass@"
	// or "token@" in a URL authenticates. tls://, ws:// and wss:// are accepted too.
	URL string
	// Subject is the subject each event is published to; it may name ${poller},
	// ${partition} and ${type}. Expanded, it must be a valid NATS subject: no empty token, no
	// white space, no '*' or '>'.
	Subject string
	// Stream, when set, is the stream every message must land in: each publish expects it
	// (a message another stream captures fails), Probe checks that it exists and captures
	// the subjects, and Create can create it.
	Stream string
	// Create creates Stream, when it is missing, at the first delivery: subjects the Subject
	// with each token holding a variable replaced by "*", file storage, DuplicateWindow.
	// It needs Stream.
	Create bool
	// DuplicateWindow is the duplicate window of the stream Create creates (default 2m): a
	// message whose event id the stream stored within it is dropped. It must be longer than
	// the time a worker can take to deliver an event again (lease TTL plus schedule.max).
	DuplicateWindow time.Duration
	// CredsFile is a user credentials file (JWT and seed); NKeyFile is an nkey seed file.
	// At most one of them.
	CredsFile string
	NKeyFile  string
	// Token authenticates with a token (kept out of errors like a password).
	Token string
	// CAFile verifies the server's certificate; CertFile and KeyFile are the client's
	// certificate and key (both or neither). Any of them turns TLS on.
	CAFile   string
	CertFile string
	KeyFile  string
	// Timeout bounds one Handle, from connecting to the PubAck, and one Probe (default 10s).
	Timeout time.Duration
	// Name is the connection's name, as the server's monitoring shows it (optional).
	Name string
}

// Sink publishes events to NATS JetStream. Build it with New; it is safe for concurrent use.
type Sink struct {
	cfg      Config
	subject  sink.Template
	filter   string // the subjects the template can give, as a NATS filter
	redacted string // the URL with its credentials hidden
	target   string
	secrets  []string
	opts     []nats.Option

	// lastAsync is the last error the server sent outside a reply (a permissions
	// violation): a publish it refused times out, and its error says why.
	lastAsync atomic.Pointer[asyncError]
	// ensured: the stream is known to exist (Create); reset when a publish finds no stream.
	ensured  atomic.Bool
	ensureMu sync.Mutex

	mu      sync.Mutex
	cur     *session
	dialing *dial // the connection attempt under way, shared by the Handles that wait on it
	closed  bool
}

// asyncError is an error the server sent outside a reply, scrubbed, and when it came.
type asyncError struct {
	msg string
	at  time.Time
}

// session is one connection of the sink.
type session struct {
	conn *nats.Conn
	js   jetstream.JetStream
	link link
}

// link tells the publishes in flight that the connection dropped: nats keeps their requests
// waiting through a reconnect, but the PubAck they wait for went to the lost connection, so
// they stop at once rather than at their timeout.
type link struct {
	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelFunc
}

func (l *link) up() {
	l.mu.Lock()
	if l.ctx == nil || l.ctx.Err() != nil {
		l.ctx, l.cancel = context.WithCancel(context.Background())
	}
	l.mu.Unlock()
}

func (l *link) down() {
	l.mu.Lock()
	if l.cancel != nil {
		l.cancel()
	}
	l.mu.Unlock()
}

// current is done when the connection drops.
func (l *link) current() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ctx
}

// dial is one connection attempt; done is closed when its result is set.
type dial struct {
	done chan struct{}
	ses  *session
	err  error
}

// New validates cfg, fills in its defaults and returns a Sink that has not connected yet.
func New(cfg Config) (*Sink, error) {
	if strings.TrimSpace(cfg.URL) == "" {
		return nil, errors.New("sink: nats: url is empty")
	}
	redacted, secrets, err := parseURLs(cfg.URL)
	if err != nil {
		return nil, err
	}
	if cfg.Token != "" && len(cfg.Token) >= 4 {
		secrets = append(secrets, cfg.Token)
	}
	if cfg.Subject == "" {
		return nil, errors.New("sink: nats: subject is empty")
	}
	tmpl, err := sink.ParseTemplate(cfg.Subject)
	if err != nil {
		return nil, fmt.Errorf("sink: nats: subject: %w", err)
	}
	if err := checkSubject(tmpl.Fill("x")); err != nil {
		return nil, fmt.Errorf("sink: nats: subject %q: %w", cfg.Subject, err)
	}
	if err := checkStreamName(cfg.Stream); err != nil {
		return nil, fmt.Errorf("sink: nats: stream %q: %w", cfg.Stream, err)
	}
	if cfg.Create && cfg.Stream == "" {
		return nil, errors.New("sink: nats: create needs stream: name the stream to create")
	}
	if cfg.DuplicateWindow < 0 {
		return nil, fmt.Errorf("sink: nats: negative duplicateWindow %s", cfg.DuplicateWindow)
	}
	if cfg.DuplicateWindow == 0 {
		cfg.DuplicateWindow = DefaultDuplicateWindow
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("sink: nats: negative timeout %s", cfg.Timeout)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.CredsFile != "" && cfg.NKeyFile != "" {
		return nil, errors.New("sink: nats: credsFile and nkeyFile are both set: use one")
	}
	if cfg.Token != "" && hasUserinfo(cfg.URL) {
		return nil, errors.New("sink: nats: token is set and the url holds credentials too: use one")
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, errors.New("sink: nats: certFile and keyFile go together: set both or neither")
	}
	for _, f := range []struct{ field, path string }{
		{"credsFile", cfg.CredsFile}, {"nkeyFile", cfg.NKeyFile},
		{"caFile", cfg.CAFile}, {"certFile", cfg.CertFile}, {"keyFile", cfg.KeyFile},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return nil, fmt.Errorf("sink: nats: %s: %w", f.field, err)
		}
	}

	s := &Sink{cfg: cfg, subject: tmpl, filter: filterOf(tmpl), redacted: redacted, secrets: secrets}
	s.target = redacted
	if cfg.Stream != "" {
		s.target += " stream " + cfg.Stream
	}
	s.target += " subject " + cfg.Subject

	s.opts = []nats.Option{
		nats.Timeout(cfg.Timeout),
		// Nothing is buffered while the connection is down: a publish then fails at once
		// rather than waiting for a reconnect that may not come within the Handle.
		nats.ReconnectBufSize(-1),
		nats.NoCallbacksAfterClientClose(),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if err != nil {
				s.lastAsync.Store(&asyncError{msg: sink.Scrub(err, s.secrets).Error(), at: time.Now()})
			}
		}),
	}
	if cfg.Name != "" {
		s.opts = append(s.opts, nats.Name(cfg.Name))
	}
	if cfg.Token != "" {
		s.opts = append(s.opts, nats.Token(cfg.Token))
	}
	if cfg.CredsFile != "" {
		s.opts = append(s.opts, nats.UserCredentials(cfg.CredsFile))
	}
	if cfg.NKeyFile != "" {
		opt, err := nats.NkeyOptionFromSeed(cfg.NKeyFile)
		if err != nil {
			return nil, fmt.Errorf("sink: nats: nkeyFile %s: %w", cfg.NKeyFile, err)
		}
		s.opts = append(s.opts, opt)
	}
	if cfg.CAFile != "" {
		s.opts = append(s.opts, nats.RootCAs(cfg.CAFile))
	}
	if cfg.CertFile != "" {
		s.opts = append(s.opts, nats.ClientCert(cfg.CertFile, cfg.KeyFile))
	}
	return s, nil
}

// Kind is "nats".
func (s *Sink) Kind() string { return kind }

// Target is the URL (credentials redacted), the stream when set and the subject template.
func (s *Sink) Target() string { return s.target }

// Handle publishes one event and waits for the stream's PubAck. It is safe for concurrent use.
func (s *Sink) Handle(ctx context.Context, ev watukuytype.Event) error {
	subject := s.subject.Expand(ev)
	if err := checkSubject(subject); err != nil {
		return fmt.Errorf("%s: event %s: subject %q is not a valid NATS subject: %w", s.where(s.cfg.Subject), ev.ID, subject, err)
	}
	where := s.where(subject) + ": event " + ev.ID
	body, err := sink.Envelope(ev)
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	start := time.Now()
	actx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	opts := []jetstream.PublishOpt{jetstream.WithMsgID(ev.ID)}
	if s.cfg.Stream != "" {
		opts = append(opts, jetstream.WithExpectStream(s.cfg.Stream))
	}
	// A publish whose connection dropped before its PubAck is sent once more on a new
	// connection: the stream drops it if the first one was stored (same Nats-Msg-Id).
	for attempt := 1; ; attempt++ {
		ses, err := s.connect(actx)
		if err != nil {
			return s.connectError(ctx, where, err)
		}
		if s.cfg.Create && !s.ensured.Load() {
			if err := s.ensureStream(actx, ses.js); err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("%s: %w", where, s.scrub(err))
				}
				return watukuytype.SinkUnavailable(fmt.Errorf("%s: %w", where, s.scrub(err)))
			}
		}
		msg := &nats.Msg{Subject: subject, Data: body, Header: nats.Header{}}
		lost, err := s.publish(actx, ses, msg, opts)
		switch {
		case err == nil:
			return nil
		case lost && actx.Err() == nil && attempt < 2:
			continue
		case lost && actx.Err() == nil:
			return watukuytype.SinkUnavailable(fmt.Errorf("%s: publish: connection lost before the PubAck: %w", where, s.scrub(err)))
		}
		return s.publishError(ctx, actx, ses.conn, start, where, subject, len(body), err)
	}
}

// publish sends msg on ses and waits for its PubAck; lost reports that the connection dropped
// meanwhile (or was found down), so the PubAck cannot come.
func (s *Sink) publish(ctx context.Context, ses *session, msg *nats.Msg, opts []jetstream.PublishOpt) (lost bool, err error) {
	down := ses.link.current()
	if down.Err() != nil && ses.conn.Status() == nats.CONNECTED {
		// nats reconnected and its callback has not run yet.
		ses.link.up()
		down = ses.link.current()
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(down, cancel)
	defer stop()
	_, err = ses.js.PublishMsg(pctx, msg, opts...)
	if err == nil {
		return false, nil
	}
	return down.Err() != nil || isConnLoss(err), err
}

// publishError classifies a failed publish: see the package doc.
func (s *Sink) publishError(ctx, actx context.Context, conn *nats.Conn, start time.Time, where, subject string, size int, err error) error {
	wrap := func(format string, args ...any) error {
		return fmt.Errorf("%s: publish: "+format, append([]any{where}, args...)...)
	}
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, nats.ErrMaxPayload):
		return wrap("message of %d bytes is larger than the server's max payload of %d bytes: %w", size, conn.MaxPayload(), err)
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		s.ensured.Store(false) // a stream created once may have been deleted since
		if s.cfg.Stream != "" {
			what := "create it with subjects " + s.filter + ", or set create: true"
			if s.cfg.Create {
				what = "it is created again at the next delivery"
			}
			return watukuytype.SinkUnavailable(wrap("no JetStream stream captures subject %s: stream %s does not exist or does not capture it: %s: %w",
				subject, s.cfg.Stream, what, err))
		}
		return watukuytype.SinkUnavailable(wrap("no JetStream stream captures subject %s: create a stream whose subjects cover %s: %w",
			subject, s.filter, err))
	case errors.As(err, &apiErr):
		err = s.scrub(err)
		switch apiErr.ErrorCode {
		case errCodeStreamNotMatch:
			return watukuytype.SinkUnavailable(wrap("subject %s is captured by a stream other than %s: check that %s exists with subjects covering %s and that no other stream's do: %w",
				subject, s.cfg.Stream, s.cfg.Stream, s.filter, err))
		case jetstream.JSErrCodeStreamMessageExceedsMaximum:
			return wrap("message of %d bytes is larger than the stream's max message size: %w", size, err)
		case jetstream.JSErrCodeJetStreamNotEnabled, jetstream.JSErrCodeJetStreamNotEnabledForAccount:
			return watukuytype.SinkUnavailable(wrap("%w", err))
		}
		return &watukuytype.SinkError{Err: wrap("%w", err)}
	case ctx.Err() != nil:
		return wrap("%w", s.scrub(err))
	case conn.Status() != nats.CONNECTED || isConnLoss(err):
		return watukuytype.SinkUnavailable(wrap("connection lost: %w", s.scrub(err)))
	case errors.Is(actx.Err(), context.DeadlineExceeded):
		if last := s.lastAsync.Load(); last != nil && !last.at.Before(start) {
			return &watukuytype.SinkError{Err: wrap("no PubAck within %s (the server said meanwhile: %s): %w", s.cfg.Timeout, last.msg, err)}
		}
		return &watukuytype.SinkError{Err: wrap("no PubAck within %s: %w", s.cfg.Timeout, err)}
	}
	return &watukuytype.SinkError{Err: wrap("%w", s.scrub(err))}
}

func isConnLoss(err error) bool {
	for _, e := range []error{nats.ErrConnectionClosed, nats.ErrDisconnected, nats.ErrConnectionReconnecting,
		nats.ErrReconnectBufExceeded, nats.ErrConnectionDraining, nats.ErrInvalidConnection, nats.ErrStaleConnection} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// connectError wraps a failed connection: the caller's context ending is the caller's, a
// closed Sink and everything else are the sink's, as any event would meet them.
func (s *Sink) connectError(ctx context.Context, where string, err error) error {
	if errors.Is(err, ErrClosed) {
		return watukuytype.SinkUnavailable(fmt.Errorf("%s: %w", where, err))
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s: connect: %w", where, s.scrub(err))
	}
	return watukuytype.SinkUnavailable(fmt.Errorf("%s: connect: %w", where, s.scrub(err)))
}

// connect returns the live connection, or dials one: a connection nats is still
// reconnecting is replaced at once, so an attempt never waits on nats' reconnect schedule.
// Concurrent callers share one dial; the dial runs to its own deadline (Timeout), so a
// caller that gives up does not cancel it for the others.
func (s *Sink) connect(ctx context.Context) (*session, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if s.cur != nil && s.cur.conn.Status() == nats.CONNECTED {
		ses := s.cur
		s.mu.Unlock()
		return ses, nil
	}
	var stale *nats.Conn
	if s.cur != nil {
		stale, s.cur = s.cur.conn, nil
	}
	d := s.dialing
	if d == nil {
		d = &dial{done: make(chan struct{})}
		s.dialing = d
		go s.dial(d)
	}
	s.mu.Unlock()
	if stale != nil {
		stale.Close()
	}
	select {
	case <-d.done:
		return d.ses, d.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// dial connects and publishes the result to d and, when it is a connection, to s.
func (s *Sink) dial(d *dial) {
	ses := &session{}
	ses.link.up()
	opts := append(slices.Clip(s.opts),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { ses.link.down() }),
		nats.ReconnectHandler(func(*nats.Conn) { ses.link.up() }))
	dialer := &recordingDialer{d: net.Dialer{Timeout: s.cfg.Timeout}}
	opts = append(opts, nats.SetCustomDialer(dialer))
	conn, err := nats.Connect(s.cfg.URL, opts...)
	if errors.Is(err, nats.ErrNoServers) {
		if last := dialer.last(); last != nil {
			err = fmt.Errorf("%w: %w", err, last) // nats drops "connection refused"
		}
	}
	if err == nil {
		ses.conn = conn
		ses.js, err = jetstream.New(conn)
		if err != nil {
			conn.Close()
		}
	}
	s.mu.Lock()
	s.dialing = nil
	switch {
	case err != nil:
		ses = nil
	case s.closed:
		conn.Close()
		ses, err = nil, ErrClosed
	default:
		s.cur = ses
	}
	d.ses, d.err = ses, err
	close(d.done)
	s.mu.Unlock()
}

// recordingDialer keeps the last dial error, which nats.Connect reports as "no servers
// available" without the cause.
type recordingDialer struct {
	d   net.Dialer
	mu  sync.Mutex
	err error
}

func (r *recordingDialer) Dial(network, address string) (net.Conn, error) {
	c, err := r.d.Dial(network, address)
	if err != nil {
		r.mu.Lock()
		r.err = err
		r.mu.Unlock()
	}
	return c, err
}

func (r *recordingDialer) last() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// ensureStream creates the stream when it does not exist (Create). Concurrent Handles check
// once; another worker creating it at the same moment is fine.
func (s *Sink) ensureStream(ctx context.Context, js jetstream.JetStream) error {
	s.ensureMu.Lock()
	defer s.ensureMu.Unlock()
	if s.ensured.Load() {
		return nil
	}
	_, err := js.Stream(ctx, s.cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateStream(ctx, s.streamConfig())
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			err = nil
		}
		if err != nil {
			return fmt.Errorf("create stream %s (subjects %s): %w", s.cfg.Stream, s.filter, err)
		}
	} else if err != nil {
		return fmt.Errorf("look up stream %s: %w", s.cfg.Stream, err)
	}
	s.ensured.Store(true)
	return nil
}

// streamConfig is the stream Create creates.
func (s *Sink) streamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:       s.cfg.Stream,
		Subjects:   []string{s.filter},
		Storage:    jetstream.FileStorage,
		Duplicates: s.cfg.DuplicateWindow,
	}
}

// Probe connects and says whether a stream captures the subjects: Config.Stream when set,
// else any. It publishes nothing and creates nothing.
func (s *Sink) Probe(ctx context.Context) (string, error) {
	where := s.where(s.cfg.Subject) + ": probe"
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	ses, err := s.connect(ctx)
	if err != nil {
		return "", s.connectError(ctx, where, err)
	}
	if s.cfg.Stream != "" {
		return s.probeStream(ctx, ses.js, where)
	}
	return s.probeAny(ctx, ses.js, where)
}

func (s *Sink) probeStream(ctx context.Context, js jetstream.JetStream, where string) (string, error) {
	st, err := js.Stream(ctx, s.cfg.Stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		if s.cfg.Create {
			others, err := s.streamsOver(ctx, js)
			if err != nil {
				return "", watukuytype.SinkUnavailable(fmt.Errorf("%s: list streams: %w", where, s.scrub(err)))
			}
			if len(others) > 0 {
				return "", fmt.Errorf("%s: stream %s does not exist, and creating it with subjects %s would fail: stream %s captures some of them",
					where, s.cfg.Stream, s.filter, strings.Join(others, ", "))
			}
			return fmt.Sprintf("stream %s does not exist: the first delivery creates it (subjects %s, file storage, duplicate window %s)",
				s.cfg.Stream, s.filter, s.cfg.DuplicateWindow), nil
		}
		return "", fmt.Errorf("%s: stream %s does not exist: create it with subjects %s, or set create: true", where, s.cfg.Stream, s.filter)
	}
	if err != nil {
		return "", watukuytype.SinkUnavailable(fmt.Errorf("%s: look up stream %s: %w", where, s.cfg.Stream, s.scrub(err)))
	}
	info := st.CachedInfo()
	subjects := info.Config.Subjects
	if !coveredBy(s.filter, subjects) {
		return "", fmt.Errorf("%s: stream %s exists, but its subjects (%s) do not capture %s: add %s to them",
			where, s.cfg.Stream, strings.Join(subjects, ", "), s.filter, s.filter)
	}
	return fmt.Sprintf("stream %s exists (subjects %s, duplicate window %s)", s.cfg.Stream, strings.Join(subjects, ", "), info.Config.Duplicates), nil
}

func (s *Sink) probeAny(ctx context.Context, js jetstream.JetStream, where string) (string, error) {
	overlapping, err := s.streamsOver(ctx, js)
	if err != nil {
		return "", watukuytype.SinkUnavailable(fmt.Errorf("%s: list streams: %w", where, s.scrub(err)))
	}
	for _, name := range overlapping {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return "", watukuytype.SinkUnavailable(fmt.Errorf("%s: look up stream %s: %w", where, name, s.scrub(err)))
		}
		if subjects := st.CachedInfo().Config.Subjects; coveredBy(s.filter, subjects) {
			return fmt.Sprintf("stream %s captures %s (subjects %s, duplicate window %s)",
				name, s.filter, strings.Join(subjects, ", "), st.CachedInfo().Config.Duplicates), nil
		}
	}
	if len(overlapping) > 0 {
		return "", fmt.Errorf("%s: streams %s capture only part of %s: give one of them subjects that cover it, or set stream",
			where, strings.Join(overlapping, ", "), s.filter)
	}
	return "", fmt.Errorf("%s: no JetStream stream captures %s: create one whose subjects cover it, or set stream and create: true", where, s.filter)
}

// streamsOver names the streams whose subjects overlap the sink's.
func (s *Sink) streamsOver(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	names := js.StreamNames(ctx, jetstream.WithStreamListSubject(s.filter))
	var out []string
	for name := range names.Name() {
		out = append(out, name)
	}
	return out, names.Err()
}

// Close closes the connection; Handle and Probe then fail. It is idempotent.
func (s *Sink) Close() error {
	s.mu.Lock()
	s.closed = true
	ses := s.cur
	s.cur = nil
	s.mu.Unlock()
	if ses != nil {
		ses.conn.Close()
	}
	return nil
}

// where is the start of every message: the sink, the URL, the stream and the subject.
func (s *Sink) where(subject string) string {
	w := "sink: " + kind + " " + s.redacted
	if s.cfg.Stream != "" {
		w += " stream " + s.cfg.Stream
	}
	return w + " subject " + subject
}

func (s *Sink) scrub(err error) error { return sink.Scrub(err, s.secrets) }

// parseURLs checks each of the comma-separated server URLs and returns them redacted, and
// the credentials they hold.
func parseURLs(raw string) (string, []string, error) {
	var shown, secrets []string
	for i, part := range strings.Split(raw, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		u, err := url.Parse(part)
		if err != nil {
			return "", nil, fmt.Errorf("sink: nats: url %d of %q does not parse", i+1, httppoll.RedactURL(raw))
		}
		red := httppoll.RedactURL(part)
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return "", nil, fmt.Errorf("sink: nats: url %s: scheme must be nats (or tls, ws, wss)", red)
		}
		if u.Host == "" {
			return "", nil, fmt.Errorf("sink: nats: url %s has no host", red)
		}
		shown = append(shown, red)
		secrets = append(secrets, sink.Secrets(part)...)
	}
	if len(shown) == 0 {
		return "", nil, errors.New("sink: nats: url is empty")
	}
	return strings.Join(shown, ","), secrets, nil
}

func hasUserinfo(raw string) bool {
	for _, part := range strings.Split(raw, ",") {
		if u, err := url.Parse(strings.TrimSpace(part)); err == nil && u.User != nil {
			return true
		}
	}
	return false
}

// checkSubject reports why subj cannot be published to: an empty token, white space, or a
// wildcard ('*', '>'), which a publish subject cannot hold.
func checkSubject(subj string) error {
	if subj == "" {
		return errors.New("empty")
	}
	for _, tok := range strings.Split(subj, ".") {
		if tok == "" {
			return errors.New("it has an empty token (a leading, trailing or doubled '.')")
		}
	}
	for _, r := range subj {
		switch {
		case unicode.IsSpace(r) || unicode.IsControl(r):
			return fmt.Errorf("it holds white space or a control character (%q)", r)
		case r == '*' || r == '>':
			return fmt.Errorf("it holds the wildcard %q", r)
		}
	}
	return nil
}

// checkStreamName rejects what JetStream refuses in a stream name.
func checkStreamName(name string) error {
	if strings.ContainsAny(name, ".*>/\\") || strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return errors.New("a stream name holds no '.', '*', '>', '/', '\\' or white space")
	}
	return nil
}

// filterOf is the subject filter that covers every subject t can give: each token that holds a
// variable becomes "*" ("watukuy.${poller}.${type}" gives "watukuy.*.*").
func filterOf(t sink.Template) string {
	const mark = "\x00"
	toks := strings.Split(t.Fill(mark), ".")
	for i, tok := range toks {
		if strings.Contains(tok, mark) {
			toks[i] = "*"
		}
	}
	return strings.Join(toks, ".")
}

// coveredBy reports whether every subject that filter matches is captured by one of a
// stream's subjects.
func coveredBy(filter string, subjects []string) bool {
	for _, s := range subjects {
		if covers(s, filter) {
			return true
		}
	}
	return false
}

// covers reports whether pattern (a stream subject, wildcards allowed) matches every subject
// that filter matches.
func covers(pattern, filter string) bool {
	p, f := strings.Split(pattern, "."), strings.Split(filter, ".")
	for i, pt := range p {
		if pt == ">" {
			return len(f) > i
		}
		if i >= len(f) || f[i] == ">" {
			return false
		}
		if pt != "*" && pt != f[i] {
			return false
		}
	}
	return len(p) == len(f)
}
