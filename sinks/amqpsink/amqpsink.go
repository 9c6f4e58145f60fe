// Package amqpsink publishes events to a RabbitMQ exchange (AMQP 0-9-1): each event is one
// message whose body is the envelope every sink emits (sink.Envelope), published with
// publisher confirms and the mandatory flag, so Handle acks an event only once the broker
// confirmed it and a queue took it.
//
// What "once" means here: at least once. The message's message_id property is the event id
// (the same on every retry), delivery mode is persistent, content type application/json,
// type the event type and timestamp its observedAt; the headers watukuy-poller,
// watukuy-partition and watukuy-identity repeat the envelope's fields for routing by headers.
// A worker that dies after the broker confirmed a message and before the engine acked the
// event sends it again: a second message with the same message_id. RabbitMQ keeps no memory
// of message ids (only a plugin could), so consumers deduplicate by message_id.
//
// Decisions written down here:
//
//   - The exchange must exist: the sink never declares it (its type, durability and bindings
//     are the operator's). Probe checks it with a passive declare; with the default exchange
//     ("") the routing key names a queue, and Probe checks that queue when the key is fixed.
//   - A message no queue is bound for comes back (basic.return, before the broker's ack):
//     it is a failed attempt (a *watukuytype.SinkError naming exchange and routing key),
//     never an ack, because nobody received it. It is not SinkUnavailable: with a routing
//     key per poller or type, other events may still find their queue.
//   - Classification: no connection, refused credentials or vhost, a missing exchange, a
//     connection lost mid-publish and a closed sink are watukuytype.SinkUnavailable (the
//     key's delivery blocks and retries); unroutable, a nack, a timeout and other channel
//     errors are a *watukuytype.SinkError; the broker's refusal of the one message (406,
//     e.g. larger than its max_message_size), a routing key over 255 bytes and the caller's
//     context ending are plain errors.
//   - One connection per Sink, dialled by the first Handle and again after it closed. Each
//     Handle publishes on a channel of its own, taken from a small pool of channels in
//     confirm mode, so a basic.return or a nack on that channel is known to be its
//     message's; a channel the broker closed (a missing exchange) is dropped, the
//     connection and the other channels go on.
//   - Timeout (default 10s) bounds one Handle, from connecting to the confirm; a channel
//     whose confirm did not come in time is dropped (a late confirm or return would be taken
//     for the next message's).
package amqpsink

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"sync"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/watukuy/watukuy/httppoll"
	"github.com/watukuy/watukuy/internal/sink"
	"github.com/watukuy/watukuy/watukuytype"
)

// DefaultTimeout bounds one Handle when Config.Timeout is 0.
const DefaultTimeout = 10 * time.Second

// The message headers that repeat the envelope's poller, partition and identity, for
// consumers and headers exchanges that route by them.
const (
	HeaderPoller    = "watukuy-poller"
	HeaderPartition = "watukuy-partition"
	HeaderIdentity  = "watukuy-identity"
)

// maxIdleChannels bounds the channels kept open between Handles; a burst beyond it opens
// channels that are closed after their message.
const maxIdleChannels = 32

// maxName is AMQP's limit on an exchange name or a routing key (a short string).
const maxName = 255

// ErrClosed is what Handle and Probe return (wrapped) once Close was called.
var ErrClosed = errors.New("the sink is closed")

// Config is a sink setting.
type Config struct {
	// URL is the broker: amqp:// or amqps://, with user:password@ and the vhost as its path
	// (amqp://user:pass@host:5672/vhost). Credentials never appear in a message.
	URL string
	// Exchange is where events are published; "" is the default exchange, which routes to
	// the queue the routing key names. Any other exchange must exist.
	Exchange string
	// RoutingKey is the routing key, a template: ${poller}, ${partition} and ${type} are
	// replaced per event (e.g. "watukuy.${poller}.${type}" on a topic exchange).
	RoutingKey string
	// CAFile, CertFile and KeyFile are PEM files for amqps://: the CA that signs the
	// server's certificate (default: the system's roots), and the client's certificate and
	// key (set both or neither). They are read by New.
	CAFile, CertFile, KeyFile string
	// Timeout bounds one Handle, from connecting to the broker's confirm (default 10s).
	Timeout time.Duration
}

// Sink publishes events to a RabbitMQ exchange; build it with New. It is safe for concurrent
// use.
type Sink struct {
	url      string
	redacted string
	exchange string
	key      sink.Template
	timeout  time.Duration
	tls      *tls.Config // nil for amqp://
	secrets  []string
	// life ends with Close, and with it a dial under way.
	life context.Context
	stop context.CancelFunc

	mu     sync.Mutex
	closed bool
	sess   *session  // nil until the first Handle, and after its connection closed
	dialed *dialCall // the dial under way, if any
}

// dialCall is one dial that every Handle needing a connection meanwhile waits for, each
// with its own context: a broker that is slow to refuse (RabbitMQ holds a refused login
// for seconds) costs one wait, not one per waiting Handle.
type dialCall struct {
	done chan struct{}
	sess *session
	err  error
}

// session is one connection and its idle channels (guarded by Sink.mu).
type session struct {
	conn *amqp.Connection
	free []*pubChannel
}

// pubChannel is a channel in confirm mode, used by one Handle at a time.
type pubChannel struct {
	ch      *amqp.Channel
	sess    *session
	returns chan amqp.Return
	closes  chan *amqp.Error
}

// New validates cfg, reads the TLS files and connects nothing: the first Handle does.
func New(cfg Config) (*Sink, error) {
	if cfg.URL == "" {
		return nil, errors.New("sink: amqp: URL is empty: want amqp://user:password@host:5672/vhost")
	}
	redacted := httppoll.RedactURL(cfg.URL)
	secrets := sink.Secrets(cfg.URL)
	uri, err := amqp.ParseURI(cfg.URL)
	if err != nil {
		// A *url.Error repeats the raw URL, and a URL that does not parse yields no secrets
		// to scrub: keep only its reason.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("sink: amqp: URL %s: %w", redacted, sink.Scrub(err, secrets))
	}
	if cfg.Exchange != "" && len(cfg.Exchange) > maxName {
		return nil, fmt.Errorf("sink: amqp: Exchange is %d bytes long, at most %d", len(cfg.Exchange), maxName)
	}
	if cfg.RoutingKey == "" {
		return nil, errors.New("sink: amqp: RoutingKey is empty: set the routing key (with the default exchange, the queue's name; a fanout exchange ignores it)")
	}
	key, err := sink.ParseTemplate(cfg.RoutingKey)
	if err != nil {
		return nil, fmt.Errorf("sink: amqp: RoutingKey: %w", err)
	}
	if len(key.Fill("")) > maxName {
		return nil, fmt.Errorf("sink: amqp: RoutingKey %q is longer than %d bytes", cfg.RoutingKey, maxName)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("sink: amqp: Timeout is negative (%s)", cfg.Timeout)
	}
	s := &Sink{url: cfg.URL, redacted: redacted, exchange: cfg.Exchange, key: key, timeout: cfg.Timeout,
		secrets: secrets}
	s.life, s.stop = context.WithCancel(context.Background())
	if s.timeout == 0 {
		s.timeout = DefaultTimeout
	}
	tlsFiles := cfg.CAFile != "" || cfg.CertFile != "" || cfg.KeyFile != ""
	switch {
	case uri.Scheme == "amqps":
		if s.tls, err = tlsConfig(cfg); err != nil {
			return nil, err
		}
	case tlsFiles:
		return nil, fmt.Errorf("sink: amqp: CAFile, CertFile or KeyFile is set but URL %s is not amqps://", redacted)
	}
	return s, nil
}

// tlsConfig reads the TLS files of cfg.
func tlsConfig(cfg Config) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("sink: amqp: CAFile: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("sink: amqp: CAFile %s holds no PEM certificate", cfg.CAFile)
		}
	}
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, errors.New("sink: amqp: CertFile and KeyFile go together: set both or neither")
	}
	if cfg.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("sink: amqp: CertFile %s and KeyFile %s: %w", cfg.CertFile, cfg.KeyFile, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Kind is "amqp".
func (s *Sink) Kind() string { return "amqp" }

// Target is the URL (credentials redacted), the exchange and the routing key template.
func (s *Sink) Target() string { return s.redacted + " " + s.where(s.key.String()) }

// where names the exchange and a routing key.
func (s *Sink) where(key string) string {
	if s.exchange == "" {
		return "the default exchange routing key " + key
	}
	return "exchange " + s.exchange + " routing key " + key
}

// scrub hides the URL's credentials in a client library's error.
func (s *Sink) scrub(err error) error { return sink.Scrub(err, s.secrets) }

// Handle publishes the event's envelope and returns once the broker confirmed it. An error
// that any event would meet (no connection, refused credentials, a missing exchange) is a
// watukuytype.SinkUnavailable; an unroutable message, a nack or a timeout is a
// *watukuytype.SinkError; the caller's context ending is a plain error.
func (s *Sink) Handle(ctx context.Context, ev watukuytype.Event) error {
	body, err := sink.Envelope(ev)
	if err != nil {
		return err
	}
	key := s.key.Expand(ev)
	what := fmt.Sprintf("sink: amqp %s %s: event %s", s.redacted, s.where(key), ev.ID)
	if len(key) > maxName {
		return fmt.Errorf("%s: the routing key is %d bytes long, at most %d", what, len(key), maxName)
	}
	actx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()

	sess, err := s.session(actx)
	if err != nil {
		return s.connectFailure(ctx, what, err)
	}
	pc, err := s.acquire(actx, sess)
	if err != nil {
		return s.stepFailure(ctx, what, "open a channel", sess, err)
	}
	msg := amqp.Publishing{
		Headers:      amqp.Table{HeaderPoller: ev.Poller, HeaderPartition: ev.Partition, HeaderIdentity: ev.Identity},
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    ev.ID,
		Timestamp:    ev.ObservedAt,
		Type:         string(ev.Type),
		AppId:        "watukuy",
		Body:         body,
	}
	dc, err := await(actx, func() (*amqp.DeferredConfirmation, error) {
		return pc.ch.PublishWithDeferredConfirm(s.exchange, key, true, false, msg)
	}, func(*amqp.DeferredConfirmation, error) { s.release(pc, false) })
	if err != nil {
		if err != actx.Err() { // the publish failed (await releases pc when the wait ends first)
			s.release(pc, false)
		}
		if brokenLink(err) {
			// A write cut short leaves the connection unusable (and the client only closes it
			// for some of its writes): close it, so the next Handle dials again.
			go func() { _ = sess.conn.CloseDeadline(time.Now().Add(s.timeout)) }()
		}
		return s.stepFailure(ctx, what, "publish", sess, err)
	}
	acked, err := dc.WaitContext(actx)
	if err != nil {
		// A confirm or a return may still come: nobody may take them for another message's.
		s.release(pc, false)
		return s.stepFailure(ctx, what, "publish", sess, fmt.Errorf("no confirm: %w", err))
	}
	if !acked {
		err := s.unconfirmed(what, pc, key) // before release closes pc: a nack must not read as a close
		s.release(pc, false)
		return err
	}
	// RabbitMQ sends basic.return before the basic.ack of the same message, and the client
	// hands both over in order: a return is on pc.returns by now, and it is this message's.
	select {
	case r := <-pc.returns:
		s.release(pc, true)
		return &watukuytype.SinkError{Err: fmt.Errorf("%s: unroutable (%d %s): %s", what, r.ReplyCode, r.ReplyText, s.noRoute(key))}
	default:
	}
	s.release(pc, true)
	return nil
}

// noRoute says why a message came back.
func (s *Sink) noRoute(key string) string {
	if s.exchange == "" {
		return fmt.Sprintf("no queue named %q exists (the default exchange routes to the queue the routing key names)", key)
	}
	return fmt.Sprintf("no queue is bound to exchange %s for routing key %s", s.exchange, key)
}

// unconfirmed explains a publish the broker did not ack: the channel was closed (by the
// broker for a missing exchange, or with its connection), or the broker nacked it.
func (s *Sink) unconfirmed(what string, pc *pubChannel, key string) error {
	var cerr *amqp.Error
	select {
	case cerr = <-pc.closes:
	default:
	}
	switch {
	case cerr != nil:
		return s.closedBy(what, "publish", pc.sess, cerr)
	case pc.ch.IsClosed():
		return s.closedBy(what, "publish", pc.sess, amqp.ErrClosed)
	default:
		return &watukuytype.SinkError{Err: fmt.Errorf("%s: publish: the broker refused the message (basic.nack) for %s", what, s.where(key))}
	}
}

// closedBy classifies the error a channel or its connection was closed with.
func (s *Sink) closedBy(what, step string, sess *session, cerr *amqp.Error) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return watukuytype.SinkUnavailable(fmt.Errorf("%s: %w", what, ErrClosed))
	}
	switch {
	case cerr.Code == amqp.NotFound && s.exchange != "":
		return watukuytype.SinkUnavailable(fmt.Errorf("%s: %s: exchange %s does not exist: declare it (the sink never declares it), or fix the exchange setting: %w",
			what, step, s.exchange, s.scrub(cerr)))
	case cerr.Code == amqp.AccessRefused:
		return watukuytype.SinkUnavailable(fmt.Errorf("%s: %s: access refused: grant the user write permission on the exchange: %w", what, step, s.scrub(cerr)))
	case sess.conn.IsClosed():
		return watukuytype.SinkUnavailable(fmt.Errorf("%s: %s: the connection closed: %w", what, step, s.scrub(cerr)))
	case !cerr.Server:
		return &watukuytype.SinkError{Err: fmt.Errorf("%s: %s: the channel closed: %w", what, step, s.scrub(cerr))}
	case cerr.Code == amqp.PreconditionFailed:
		// RabbitMQ refuses this one message (e.g. larger than its max_message_size).
		return fmt.Errorf("%s: %s: the broker refused the message: %w", what, step, s.scrub(cerr))
	default:
		return &watukuytype.SinkError{Err: fmt.Errorf("%s: %s: the broker closed the channel: %w", what, step, s.scrub(cerr))}
	}
}

// connectFailure classifies a failure to get a connection: unreachable, unless the sink is
// closed or the caller's context ended.
func (s *Sink) connectFailure(ctx context.Context, what string, err error) error {
	switch {
	case errors.Is(err, ErrClosed):
		return watukuytype.SinkUnavailable(fmt.Errorf("%s: %w", what, err))
	case ctx.Err() != nil:
		return fmt.Errorf("%s: connect: %w", what, ctx.Err())
	case errors.Is(err, context.DeadlineExceeded):
		return watukuytype.SinkUnavailable(fmt.Errorf("%s: connect: timed out after %s: %w", what, s.timeout, err))
	}
	return watukuytype.SinkUnavailable(fmt.Errorf("%s: connect: %w", what, s.describeDial(err)))
}

// describeDial adds what to do to the broker's refusals of a connection.
func (s *Sink) describeDial(err error) error {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case amqp.AccessRefused:
			return fmt.Errorf("the broker refused the credentials: check the user and password in the URL: %w", s.scrub(err))
		case amqp.NotAllowed:
			return fmt.Errorf("the user may not use this vhost: check the URL's path and the user's permissions: %w", s.scrub(err))
		}
	}
	return s.scrub(err)
}

// stepFailure classifies a failure of a step on an open connection.
func (s *Sink) stepFailure(ctx context.Context, what, step string, sess *session, err error) error {
	var ae *amqp.Error
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("%s: %s: %w", what, step, err)
	case errors.Is(err, context.DeadlineExceeded):
		return &watukuytype.SinkError{Err: fmt.Errorf("%s: %s: timed out after %s: %w", what, step, s.timeout, err)}
	case errors.As(err, &ae):
		return s.closedBy(what, step, sess, ae)
	case sess.conn.IsClosed() || brokenLink(err):
		return watukuytype.SinkUnavailable(fmt.Errorf("%s: %s: the connection closed: %w", what, step, s.scrub(err)))
	}
	return &watukuytype.SinkError{Err: fmt.Errorf("%s: %s: %w", what, step, s.scrub(err))}
}

// brokenLink reports an error of the socket itself: the connection is lost. A context's
// deadline is a net.Error too, and no such error.
func brokenLink(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}

// session returns the open connection, dialling it when there is none. The dial runs on
// its own, bounded by Timeout and ended by Close; the caller waits for it within ctx.
func (s *Sink) session(ctx context.Context) (*session, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if s.sess != nil && !s.sess.conn.IsClosed() {
		sess := s.sess
		s.mu.Unlock()
		return sess, nil
	}
	c := s.dialed
	if c == nil {
		c = &dialCall{done: make(chan struct{})}
		s.dialed = c
		go s.connect(c)
	}
	s.mu.Unlock()
	select {
	case <-c.done:
		return c.sess, c.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// connect dials for c and installs the new session.
func (s *Sink) connect(c *dialCall) {
	ctx, cancel := context.WithTimeout(s.life, s.timeout)
	defer cancel()
	conn, err := s.dial(ctx)
	var closes chan *amqp.Error
	if err == nil {
		closes = conn.NotifyClose(make(chan *amqp.Error, 1))
	}
	s.mu.Lock()
	s.dialed = nil
	switch {
	case err != nil:
		if s.closed {
			err = ErrClosed
		}
		c.err = err
	case s.closed:
		c.err = ErrClosed
	default:
		c.sess = &session{conn: conn}
		s.sess = c.sess
	}
	s.mu.Unlock()
	close(c.done)
	switch {
	case c.sess != nil:
		s.watch(c.sess, closes)
	case conn != nil:
		_ = conn.Close()
	}
}

// watch forgets sess when its connection closes, so the next Handle dials again; its
// channels closed with it.
func (s *Sink) watch(sess *session, closes chan *amqp.Error) {
	for range closes { // an error, then the channel is closed; a clean close only closes it
	}
	s.mu.Lock()
	if s.sess == sess {
		s.sess = nil
	}
	sess.free = nil
	s.mu.Unlock()
}

// dial opens a connection within ctx: the dialler and the TLS and AMQP handshakes share its
// deadline, and its cancellation ends them.
func (s *Sink) dial(ctx context.Context) (*amqp.Connection, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(s.timeout)
	}
	var mu sync.Mutex
	var raw net.Conn
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if raw != nil {
			_ = raw.SetDeadline(time.Unix(1, 0)) // ends the handshake at once
		}
	})
	props := amqp.NewConnectionProperties()
	props["connection_name"] = "watukuy"
	cfg := amqp.Config{
		Properties: props,
		Dial: func(network, addr string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			// The handshakes' deadline; the client clears it once the connection is open.
			_ = c.SetDeadline(deadline)
			mu.Lock()
			raw = c
			mu.Unlock()
			return c, nil
		},
	}
	if s.tls != nil {
		cfg.TLSClientConfig = s.tls.Clone() // the client fills in ServerName
	}
	conn, err := amqp.DialConfig(s.url, cfg)
	if !stop() {
		// ctx ended during the dial: the connection may hold a deadline in the past.
		if err == nil {
			_ = conn.Close()
		}
		return nil, ctx.Err()
	}
	if err != nil {
		// The client reports a handshake cut short by the deadline as a read error, or as
		// refused credentials when it happened after the credentials were sent.
		var ne net.Error
		if (errors.As(err, &ne) && ne.Timeout()) || !time.Now().Before(deadline) {
			return nil, fmt.Errorf("%w (%s)", context.DeadlineExceeded, s.scrub(err))
		}
		return nil, err
	}
	return conn, nil
}

// acquire takes an idle channel of sess, or opens one.
func (s *Sink) acquire(ctx context.Context, sess *session) (*pubChannel, error) {
	s.mu.Lock()
	for len(sess.free) > 0 {
		pc := sess.free[len(sess.free)-1]
		sess.free = sess.free[:len(sess.free)-1]
		if !pc.ch.IsClosed() {
			s.mu.Unlock()
			return pc, nil
		}
	}
	s.mu.Unlock()
	return await(ctx, func() (*pubChannel, error) {
		ch, err := sess.conn.Channel()
		if err != nil {
			return nil, err
		}
		pc := &pubChannel{ch: ch, sess: sess,
			returns: ch.NotifyReturn(make(chan amqp.Return, 1)),
			closes:  ch.NotifyClose(make(chan *amqp.Error, 1))}
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			return nil, err
		}
		return pc, nil
	}, func(pc *pubChannel, err error) {
		if err == nil {
			_ = pc.ch.Close()
		}
	})
}

// release gives pc back to its session's idle channels when it can take the next message
// (reuse), and closes it otherwise.
func (s *Sink) release(pc *pubChannel, reuse bool) {
	if reuse && !pc.ch.IsClosed() {
		s.mu.Lock()
		if !s.closed && s.sess == pc.sess && len(pc.sess.free) < maxIdleChannels {
			pc.sess.free = append(pc.sess.free, pc)
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
	}
	// Closing waits for the broker's answer: the Handle need not.
	go func() { _ = pc.ch.Close() }()
}

// await runs f on a goroutine of its own and waits for it or for ctx. The client's writes and
// channel requests take no context, and a broker that stops reading (a resource alarm blocks
// publishers) would hold the caller past its Timeout. When ctx ends first, undo gets f's
// result once f returns, to release what f made.
func await[T any](ctx context.Context, f func() (T, error), undo func(T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		go func() {
			r := <-done
			undo(r.v, r.err)
		}()
		var zero T
		return zero, ctx.Err()
	}
}

// Probe connects and checks that the exchange exists (a passive declare, on a channel of its
// own: a failed one closes the channel); with the default exchange and a fixed routing key,
// that the queue it names exists. It publishes and declares nothing.
func (s *Sink) Probe(ctx context.Context) (string, error) {
	what := "sink: amqp " + s.Target()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	sess, err := s.session(ctx)
	if err != nil {
		switch {
		case errors.Is(err, ErrClosed):
			return "", fmt.Errorf("%s: %w", what, err)
		case errors.Is(err, context.DeadlineExceeded):
			return "", fmt.Errorf("%s: connect: timed out after %s: %w", what, s.timeout, err)
		}
		return "", fmt.Errorf("%s: connect: %w", what, s.describeDial(err))
	}
	type answer struct {
		sentence string
		err      error
	}
	a, err := await(ctx, func() (answer, error) {
		ch, err := sess.conn.Channel()
		if err != nil {
			return answer{}, err
		}
		defer ch.Close()
		if s.exchange == "" {
			if s.key.Uses(sink.VarPoller) || s.key.Uses(sink.VarPartition) || s.key.Uses(sink.VarType) {
				return answer{sentence: fmt.Sprintf("the default exchange routes each event to the queue its routing key %s names (not checked: the key varies per event)", s.key)}, nil
			}
			q, err := ch.QueueDeclarePassive(s.key.String(), false, false, false, false, nil)
			if err != nil {
				return answer{err: err}, nil
			}
			return answer{sentence: fmt.Sprintf("queue %s exists (%d messages, %d consumers); the default exchange routes to it", q.Name, q.Messages, q.Consumers)}, nil
		}
		// A passive declare only checks existence: kind and flags are ignored.
		if err := ch.ExchangeDeclarePassive(s.exchange, amqp.ExchangeTopic, false, false, false, false, nil); err != nil {
			return answer{err: err}, nil
		}
		return answer{sentence: "exchange " + s.exchange + " exists"}, nil
	}, func(answer, error) {})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return "", fmt.Errorf("%s: timed out after %s: %w", what, s.timeout, err)
		}
		return "", fmt.Errorf("%s: open a channel: %w", what, s.scrub(err))
	}
	if a.err != nil {
		var ae *amqp.Error
		switch {
		case errors.As(a.err, &ae) && ae.Code == amqp.NotFound && s.exchange != "":
			return "", fmt.Errorf("%s: exchange %s does not exist: declare it (the sink never declares it), or fix the exchange setting", what, s.exchange)
		case errors.As(a.err, &ae) && ae.Code == amqp.NotFound:
			return "", fmt.Errorf("%s: queue %s does not exist: declare it, or publish to an exchange (the default exchange routes to the queue the routing key names)", what, s.key)
		case errors.As(a.err, &ae) && ae.Code == amqp.AccessRefused:
			return "", fmt.Errorf("%s: access refused: check the user's permissions on the vhost: %w", what, s.scrub(a.err))
		}
		return "", fmt.Errorf("%s: %w", what, s.scrub(a.err))
	}
	return a.sentence, nil
}

// Close closes the connection; Handle and Probe fail afterwards. It is idempotent.
func (s *Sink) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.stop()
	sess := s.sess
	s.sess = nil
	s.mu.Unlock()
	if sess == nil {
		return nil
	}
	// A broker that stopped answering would hold a plain Close until the heartbeat gives up.
	if err := sess.conn.CloseDeadline(time.Now().Add(s.timeout)); err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("sink: amqp %s: close: %w", s.redacted, s.scrub(err))
	}
	return nil
}
