package sink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/propagation"

	"github.com/watukuy/watukuy/httppoll"
	"github.com/watukuy/watukuy/watukuytype"
	"github.com/watukuy/watukuy/webhook"
)

// Defaults and limits of the webhook sink; the format's names and limits are package
// webhook's.
const (
	// DefaultWebhookTimeout bounds one delivery attempt (connect, request, response headers
	// and the part of the body that is read) when Webhook.Timeout is 0.
	DefaultWebhookTimeout = 10 * time.Second
	// drainLimit bounds what is read of a response body so the connection can be reused.
	drainLimit = 64 << 10
	// snippetLen is the size of StatusError.Body.
	snippetLen = 256
	userAgent  = "watukuy-webhook"
)

// Webhook POSTs the envelope per the Standard Webhooks spec (https://www.standardwebhooks.com/):
//
//	webhook-id: <event id>
//	webhook-timestamp: <unix seconds>
//	webhook-signature: v1,<base64(HMAC-SHA256(key, "<id>.<timestamp>.<body>"))>  (one per secret, space-separated)
//	Content-Type: application/json
//	traceparent: <W3C trace context>  (only when the handler attempt is traced)
//
// Secrets are "whsec_<base64>"; the HMAC key is the decoded part. With several secrets every
// one signs, so a receiver can rotate its secret without downtime. A 2xx status acks; any
// other status (redirects included), a transport error or a timeout is an error.
//
// Build it with NewWebhook; the fields of the returned value show the effective settings and
// must not be changed afterwards (URL and Secrets are parsed once).
type Webhook struct {
	URL     string
	Secrets []string
	// Timeout bounds one attempt (default 10s).
	Timeout time.Duration
	// Client sends the requests; nil means a client that does not follow redirects. A
	// client of your own keeps its redirect policy: make it return http.ErrUseLastResponse,
	// because a 301/302 turns the POST into a GET whose 2xx would ack an undelivered event.
	Client *http.Client
	// Now is the clock of webhook-timestamp (default time.Now).
	Now func() time.Time

	u        *url.URL
	redacted string
	signer   *webhook.Signer
}

// NewWebhook validates the URL (absolute http or https) and the secrets (at least one, each
// "whsec_" + standard base64 of at least 24 bytes) and fills in the defaults. Errors name the
// secret by position, never by value.
func NewWebhook(w Webhook) (*Webhook, error) {
	if strings.TrimSpace(w.URL) == "" {
		return nil, errors.New("sink: webhook: url is empty")
	}
	u, err := url.Parse(w.URL)
	if err != nil {
		return nil, fmt.Errorf("sink: webhook: url %s does not parse", httppoll.RedactURL(w.URL))
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("sink: webhook: url %s: scheme must be http or https", httppoll.RedactURL(w.URL))
	}
	if u.Host == "" {
		return nil, fmt.Errorf("sink: webhook: url %s has no host", httppoll.RedactURL(w.URL))
	}
	signer, err := webhook.NewSigner(w.Secrets)
	if err != nil {
		return nil, fmt.Errorf("sink: %w", err)
	}
	if w.Timeout < 0 {
		return nil, fmt.Errorf("sink: webhook: negative timeout %s", w.Timeout)
	}
	out := &Webhook{
		URL:      w.URL,
		Secrets:  append([]string(nil), w.Secrets...),
		Timeout:  w.Timeout,
		Client:   w.Client,
		Now:      w.Now,
		u:        u,
		redacted: httppoll.RedactURL(w.URL),
		signer:   signer,
	}
	if out.Timeout == 0 {
		out.Timeout = DefaultWebhookTimeout
	}
	if out.Client == nil {
		out.Client = &http.Client{
			// A transport of its own: whoever closes the default one's idle connections
			// (httptest.Server.Close does) must not break a delivery in flight.
			Transport:     http.DefaultTransport.(*http.Transport).Clone(),
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if out.Now == nil {
		out.Now = time.Now
	}
	return out, nil
}

// StatusError is a non-2xx answer of the webhook receiver.
type StatusError struct {
	StatusCode int
	// Body is the start of the response body (at most 256 bytes, whole UTF-8 characters).
	Body string
}

func (e *StatusError) Error() string {
	if e.Body == "" {
		return fmt.Sprintf("HTTP %d", e.StatusCode)
	}
	return fmt.Sprintf("HTTP %d: %q", e.StatusCode, e.Body)
}

// Handle delivers one event. It is safe for concurrent use.
func (w *Webhook) Handle(ctx context.Context, ev watukuytype.Event) error {
	if w == nil || w.u == nil {
		return errors.New("sink: webhook: not initialized (build it with NewWebhook)")
	}
	body, err := Envelope(ev)
	if err != nil {
		return err
	}
	ts := w.Now().Unix()
	actx, cancel := context.WithTimeout(ctx, w.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(actx, http.MethodPost, w.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("sink: webhook %s: event %s: build request: %w", w.redacted, ev.ID, unwrapURLError(err))
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set(webhook.HeaderID, ev.ID)
	req.Header.Set(webhook.HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(webhook.HeaderSignature, w.signer.Sign(ev.ID, ts, body))
	// The handler attempt's span (a traced cycle) goes along as traceparent, so the receiver's
	// trace joins the cycle's; without a span nothing is added.
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))

	// A failure any event would meet is the sink's (watukuytype.SinkError): a receiver that
	// cannot be reached blocks the key's delivery at once; timeouts and 5xx block it when two
	// events in a row meet them and none is delivered.
	resp, err := w.Client.Do(req)
	if err != nil {
		err = unwrapURLError(err)
		if ctx.Err() != nil {
			return fmt.Errorf("sink: webhook %s: event %s: %w", w.redacted, ev.ID, err)
		}
		if errors.Is(actx.Err(), context.DeadlineExceeded) {
			return &watukuytype.SinkError{Err: fmt.Errorf("sink: webhook %s: event %s: timed out after %s: %w", w.redacted, ev.ID, w.Timeout, err)}
		}
		return &watukuytype.SinkError{Err: fmt.Errorf("sink: webhook %s: event %s: %w", w.redacted, ev.ID, err), Unreachable: true}
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
		return nil
	}
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, snippetLen))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainLimit))
	err = fmt.Errorf("sink: webhook %s: event %s: %w", w.redacted, ev.ID,
		&StatusError{StatusCode: resp.StatusCode, Body: strings.TrimSpace(cutUTF8(snippet))})
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusRequestTimeout {
		return &watukuytype.SinkError{Err: err}
	}
	return err
}

// unwrapURLError drops *url.Error, whose message repeats the raw URL (query tokens included).
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// cutUTF8 drops a character cut in half at the end of b and replaces other invalid bytes.
func cutUTF8(b []byte) string {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				b = b[:i]
			}
			break
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}
