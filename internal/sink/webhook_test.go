package sink

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
	"github.com/watukuy/watukuy/webhook"
)

func vecHeader(sig string) http.Header {
	h := http.Header{}
	h.Set(webhook.HeaderID, vecID)
	h.Set(webhook.HeaderTimestamp, strconv.FormatInt(vecTimestamp, 10))
	h.Set(webhook.HeaderSignature, sig)
	return h
}

func TestStandardWebhooksVector(t *testing.T) {
	got, err := webhook.Sign([]string{vecSecret}, vecID, vecTimestamp, []byte(vecPayload))
	if err != nil {
		t.Fatal(err)
	}
	if got != vecSignature {
		t.Fatalf("Sign = %q, want %q", got, vecSignature)
	}
	if err := verify([]string{vecSecret}, vecHeader(vecSignature), []byte(vecPayload), time.Unix(vecTimestamp, 0), 0); err != nil {
		t.Fatalf("verify(vector) = %v", err)
	}
}

// received is one request a test receiver saw.
type received struct {
	method string
	header http.Header
	body   []byte
}

func receiver(t *testing.T, status int) (*httptest.Server, <-chan received) {
	t.Helper()
	ch := make(chan received, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ch <- received{method: r.Method, header: r.Header.Clone(), body: b}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, "receiver says "+http.StatusText(status))
	}))
	t.Cleanup(srv.Close)
	return srv, ch
}

func newWebhook(t *testing.T, w Webhook) *Webhook {
	t.Helper()
	wh, err := NewWebhook(w)
	if err != nil {
		t.Fatalf("NewWebhook: %v", err)
	}
	return wh
}

func TestWebhookHeadersAndSignature(t *testing.T) {
	t.Parallel()
	for _, status := range []int{200, 201, 202, 204, 299} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			srv, got := receiver(t, status)
			now := time.Unix(1_800_000_000, 0)
			wh := newWebhook(t, Webhook{URL: srv.URL + "/hooks/watukuy", Secrets: []string{vecSecret}, Now: func() time.Time { return now }})
			ev := testEvent("ev_0123456789abcdef0123456789abcdef")
			if err := wh.Handle(context.Background(), ev); err != nil {
				t.Fatalf("Handle with %d = %v, want ack", status, err)
			}
			r := <-got
			want, _ := Envelope(ev)
			if r.method != http.MethodPost {
				t.Errorf("method %s", r.method)
			}
			if string(r.body) != string(want) {
				t.Errorf("body\n got %s\nwant %s", r.body, want)
			}
			for name, v := range map[string]string{
				"Content-Type":          "application/json",
				webhook.HeaderID:        ev.ID,
				webhook.HeaderTimestamp: "1800000000",
			} {
				if g := r.header.Get(name); g != v {
					t.Errorf("header %s = %q, want %q", name, g, v)
				}
			}
			sig := r.header.Get(webhook.HeaderSignature)
			wantSig, _ := webhook.Sign([]string{vecSecret}, ev.ID, now.Unix(), want)
			if sig != wantSig || !strings.HasPrefix(sig, "v1,") || strings.Contains(sig, " ") {
				t.Errorf("signature %q, want %q", sig, wantSig)
			}
			if err := verify([]string{vecSecret}, r.header, r.body, now.Add(time.Minute), 0); err != nil {
				t.Errorf("receiver Verify: %v", err)
			}
			for _, vs := range r.header {
				for _, v := range vs {
					if strings.Contains(v, "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") {
						t.Errorf("the secret went over the wire: %q", v)
					}
				}
			}
		})
	}
}

func TestWebhookSeveralSecrets(t *testing.T) {
	t.Parallel()
	srv, got := receiver(t, http.StatusNoContent)
	wh := newWebhook(t, Webhook{URL: srv.URL, Secrets: []string{vecSecret, secondSecret}})
	ev := testEvent("ev_rotation")
	if err := wh.Handle(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	r := <-got
	entries := strings.Split(r.header.Get(webhook.HeaderSignature), " ")
	if len(entries) != 2 || !strings.HasPrefix(entries[0], "v1,") || !strings.HasPrefix(entries[1], "v1,") || entries[0] == entries[1] {
		t.Fatalf("signature header %q: want two different v1 entries", r.header.Get(webhook.HeaderSignature))
	}
	now := time.Now()
	// A receiver that knows only one of the secrets accepts the message, whichever it knows.
	for _, s := range []string{vecSecret, secondSecret} {
		if err := verify([]string{s}, r.header, r.body, now, 0); err != nil {
			t.Errorf("Verify with one secret: %v", err)
		}
	}
	// Each entry alone verifies under its own secret and not under the other.
	for i, s := range []string{vecSecret, secondSecret} {
		h := r.header.Clone()
		h.Set(webhook.HeaderSignature, entries[i])
		if err := verify([]string{s}, h, r.body, now, 0); err != nil {
			t.Errorf("entry %d under its secret: %v", i, err)
		}
		other := []string{secondSecret, vecSecret}[i]
		if err := verify([]string{other}, h, r.body, now, 0); !errors.Is(err, webhook.ErrSignature) {
			t.Errorf("entry %d under the other secret = %v, want webhook.ErrSignature", i, err)
		}
	}
}

func TestWebhookNon2xx(t *testing.T) {
	t.Parallel()
	for _, status := range []int{301, 302, 303, 307, 308, 400, 404, 410, 429, 500, 503} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			var followed atomic.Int64
			mux := http.NewServeMux()
			mux.HandleFunc("/ok", func(w http.ResponseWriter, r *http.Request) { followed.Add(1) })
			mux.HandleFunc("/hook", func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if status/100 == 3 {
					http.Redirect(w, r, "/ok", status)
					return
				}
				http.Error(w, "nope é", status)
			})
			srv := httptest.NewServer(mux)
			defer srv.Close()
			url := srv.URL + "/hook?token=tok_SECRET"
			wh := newWebhook(t, Webhook{URL: url, Secrets: []string{vecSecret}})
			err := wh.Handle(context.Background(), testEvent("ev_status"))
			var se *StatusError
			if !errors.As(err, &se) || se.StatusCode != status {
				t.Fatalf("Handle = %v, want a StatusError %d", err, status)
			}
			if status/100 != 3 && !strings.HasPrefix(se.Body, "nope é") {
				t.Errorf("StatusError.Body = %q", se.Body)
			}
			msg := err.Error()
			for _, want := range []string{"ev_status", srv.URL + "/hook", strconv.Itoa(status)} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not name %q", msg, want)
				}
			}
			for _, leak := range []string{"tok_SECRET", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"} {
				if strings.Contains(msg, leak) {
					t.Errorf("error %q leaks %q", msg, leak)
				}
			}
			if followed.Load() != 0 {
				t.Errorf("the redirect was followed")
			}
		})
	}
}

func TestWebhookTimeout(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // the server notices a closed connection only after the body
		<-r.Context().Done()               // never answers; returns once the client gives up
	}))
	defer srv.Close()
	wh := newWebhook(t, Webhook{URL: srv.URL, Secrets: []string{vecSecret}, Timeout: 50 * time.Millisecond})
	err := wh.Handle(context.Background(), testEvent("ev_slow"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Handle = %v, want DeadlineExceeded", err)
	}
	for _, want := range []string{"ev_slow", srv.URL, "timed out after 50ms"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

func TestWebhookCallerCancel(t *testing.T) {
	t.Parallel()
	arrived := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		close(arrived)
		<-r.Context().Done()
	}))
	defer srv.Close()
	wh := newWebhook(t, Webhook{URL: srv.URL, Secrets: []string{vecSecret}})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-arrived; cancel() }()
	err := wh.Handle(ctx, testEvent("ev_cancel"))
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "ev_cancel") {
		t.Fatalf("Handle = %v, want Canceled naming the event", err)
	}
}

func TestWebhookTransportError(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL + "/hook?api_key=k_SECRET"
	srv.Close() // nothing listens any more
	wh := newWebhook(t, Webhook{URL: url, Secrets: []string{vecSecret}})
	err := wh.Handle(context.Background(), testEvent("ev_down"))
	if err == nil {
		t.Fatal("Handle to a closed port succeeded")
	}
	msg := err.Error()
	if !strings.Contains(msg, "ev_down") || !strings.Contains(msg, srv.URL+"/hook") {
		t.Errorf("error %q does not name the event and the URL", msg)
	}
	if strings.Contains(msg, "k_SECRET") {
		t.Errorf("error %q leaks the URL's key", msg)
	}
}

func TestWebhookBadItemSendsNothing(t *testing.T) {
	t.Parallel()
	srv, got := receiver(t, 200)
	wh := newWebhook(t, Webhook{URL: srv.URL, Secrets: []string{vecSecret}})
	ev := testEvent("ev_bad")
	ev.Item = []byte(`{"broken":`)
	if err := wh.Handle(context.Background(), ev); err == nil || !strings.Contains(err.Error(), "ev_bad") {
		t.Fatalf("Handle = %v, want an envelope error naming the event", err)
	}
	select {
	case r := <-got:
		t.Fatalf("a request was sent: %s", r.body)
	default:
	}
}

func TestWebhookNotInitialized(t *testing.T) {
	t.Parallel()
	for _, wh := range []*Webhook{nil, {URL: "http://example.com", Secrets: []string{vecSecret}}} {
		if err := wh.Handle(context.Background(), testEvent("ev_x")); err == nil || !strings.Contains(err.Error(), "NewWebhook") {
			t.Errorf("Handle = %v, want a hint at NewWebhook", err)
		}
	}
}

func TestNewWebhookValidation(t *testing.T) {
	t.Parallel()
	short := "whsec_c2hvcnQta2V5" // "short-key", 9 bytes
	cases := []struct {
		name string
		w    Webhook
		want string
	}{
		{"empty url", Webhook{Secrets: []string{vecSecret}}, "url is empty"},
		{"bad scheme", Webhook{URL: "ftp://example.com/x", Secrets: []string{vecSecret}}, "scheme must be http or https"},
		{"relative", Webhook{URL: "/hooks", Secrets: []string{vecSecret}}, "scheme must be http or https"},
		{"no host", Webhook{URL: "https:///hooks", Secrets: []string{vecSecret}}, "has no host"},
		{"unparseable", Webhook{URL: "http://exa mple.com/%zz", Secrets: []string{vecSecret}}, "does not parse"},
		{"no secrets", Webhook{URL: "https://example.com"}, "no secret"},
		{"no prefix", Webhook{URL: "https://example.com", Secrets: []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}}, `secret 1 of 1: must start with "whsec_"`},
		{"not base64", Webhook{URL: "https://example.com", Secrets: []string{vecSecret, "whsec_not*base64!"}}, "secret 2 of 2: the part after \"whsec_\" is not standard base64"},
		{"too short", Webhook{URL: "https://example.com", Secrets: []string{short}}, "key is too short: want at least 24 bytes"},
		{"empty key", Webhook{URL: "https://example.com", Secrets: []string{"whsec_"}}, "key is too short"},
		{"negative timeout", Webhook{URL: "https://example.com", Secrets: []string{vecSecret}, Timeout: -time.Second}, "negative timeout"},
	}
	for _, c := range cases {
		_, err := NewWebhook(c.w)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
			continue
		}
		for _, s := range c.w.Secrets {
			if len(s) > len(webhook.SecretPrefix) && strings.Contains(err.Error(), strings.TrimPrefix(s, webhook.SecretPrefix)) {
				t.Errorf("%s: error %q leaks a secret", c.name, err)
			}
		}
	}

	wh, err := NewWebhook(Webhook{URL: "https://user:pw@example.com/hook", Secrets: []string{" " + vecSecret + "\n"}})
	if err != nil {
		t.Fatalf("valid webhook (secret with surrounding whitespace): %v", err)
	}
	if wh.Timeout != DefaultWebhookTimeout || wh.Client == nil || wh.Now == nil {
		t.Errorf("defaults not filled: %+v", wh)
	}
	if wh.Client.CheckRedirect == nil {
		t.Error("the default client follows redirects")
	}
	if strings.Contains(wh.redacted, "pw") {
		t.Errorf("redacted URL %q keeps the password", wh.redacted)
	}
}

func TestVerifyRejects(t *testing.T) {
	t.Parallel()
	body := []byte(vecPayload)
	at := time.Unix(vecTimestamp, 0)
	with := func(name, value string) http.Header {
		h := vecHeader(vecSignature)
		if value == "" {
			h.Del(name)
		} else {
			h.Set(name, value)
		}
		return h
	}
	cases := []struct {
		name    string
		secrets []string
		header  http.Header
		body    []byte
		now     time.Time
		tol     time.Duration
		want    error
	}{
		{"wrong secret", []string{secondSecret}, vecHeader(vecSignature), body, at, 0, webhook.ErrSignature},
		{"tampered body", []string{vecSecret}, vecHeader(vecSignature), []byte(`{"test": 2432232315}`), at, 0, webhook.ErrSignature},
		{"body with extra whitespace", []string{vecSecret}, vecHeader(vecSignature), []byte(`{"test": 2432232314} `), at, 0, webhook.ErrSignature},
		{"tampered id", []string{vecSecret}, with(webhook.HeaderID, "msg_other"), body, at, 0, webhook.ErrSignature},
		{"re-dated message", []string{vecSecret}, with(webhook.HeaderTimestamp, strconv.FormatInt(vecTimestamp+1, 10)), body, at, 0, webhook.ErrSignature},
		{"old timestamp", []string{vecSecret}, vecHeader(vecSignature), body, at.Add(5*time.Minute + time.Second), 0, webhook.ErrTimestamp},
		{"old under a custom tolerance", []string{vecSecret}, vecHeader(vecSignature), body, at.Add(31 * time.Second), 30 * time.Second, webhook.ErrTimestamp},
		{"future timestamp", []string{vecSecret}, vecHeader(vecSignature), body, at.Add(-5*time.Minute - time.Second), 0, webhook.ErrTimestamp},
		{"malformed timestamp", []string{vecSecret}, with(webhook.HeaderTimestamp, "2021-02-26T10:02:10Z"), body, at, 0, webhook.ErrTimestamp},
		{"absurd timestamp", []string{vecSecret}, with(webhook.HeaderTimestamp, "9223372036854775807"), body, at, 0, webhook.ErrTimestamp},
		{"no id", []string{vecSecret}, with(webhook.HeaderID, ""), body, at, 0, webhook.ErrMissingHeader},
		{"no timestamp", []string{vecSecret}, with(webhook.HeaderTimestamp, ""), body, at, 0, webhook.ErrMissingHeader},
		{"no signature", []string{vecSecret}, with(webhook.HeaderSignature, ""), body, at, 0, webhook.ErrMissingHeader},
		{"other version only", []string{vecSecret}, with(webhook.HeaderSignature, "v1a,"+strings.TrimPrefix(vecSignature, "v1,")), body, at, 0, webhook.ErrSignature},
		{"garbage entries", []string{vecSecret}, with(webhook.HeaderSignature, "v1 v1, v1,!!! g0hM9SsE"), body, at, 0, webhook.ErrSignature},
	}
	for _, c := range cases {
		err := verify(c.secrets, c.header, c.body, c.now, c.tol)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: Verify = %v, want %v", c.name, err, c.want)
		}
	}

	// Accepted: the edges of the tolerance, a matching entry among others, several secrets.
	for _, now := range []time.Time{at.Add(5 * time.Minute), at.Add(-5 * time.Minute)} {
		if err := verify([]string{vecSecret}, vecHeader(vecSignature), body, now, 0); err != nil {
			t.Errorf("at the tolerance edge: %v", err)
		}
	}
	mixed := vecHeader("v1a,AAAA v1,bm90LWl0 " + vecSignature)
	if err := verify([]string{secondSecret, vecSecret}, mixed, body, at, 0); err != nil {
		t.Errorf("matching entry among others: %v", err)
	}
	// Bad secrets are a clear error, not a silent mismatch.
	if err := verify(nil, vecHeader(vecSignature), body, at, 0); err == nil || errors.Is(err, webhook.ErrSignature) {
		t.Errorf("no secrets: %v", err)
	}
	if err := verify([]string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, vecHeader(vecSignature), body, at, 0); err == nil || !strings.Contains(err.Error(), "whsec_") {
		t.Errorf("secret without prefix: %v", err)
	}
}

// Compile-time check: every sink's Handle is a watukuytype.Handler.
var _ = []watukuytype.Handler{(*Webhook)(nil).Handle, (*Stream)(nil).Handle, (*Stdout)(nil).Handle}

// A failure any event would meet is the sink's (watukuytype.SinkError), so the engine blocks
// the key's delivery instead of counting it against the event: unreachable for a refused
// connection, failing for a 5xx, a 429 or a timeout; a 4xx is the event's.
func TestWebhookSinkFailures(t *testing.T) {
	ev := watukuytype.Event{ID: "ev_1", Type: watukuytype.Created}
	kind := func(err error) string {
		var se *watukuytype.SinkError
		switch {
		case err == nil:
			return "delivered"
		case !errors.As(err, &se):
			return "event"
		case se.Unreachable:
			return "unreachable"
		}
		return "failing"
	}
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	for _, tc := range []struct {
		name string
		url  func(t *testing.T) string
		want string
	}{
		{"refused", func(*testing.T) string { return downURL }, "unreachable"},
		{"503", func(t *testing.T) string { srv, _ := receiver(t, 503); return srv.URL }, "failing"},
		{"429", func(t *testing.T) string { srv, _ := receiver(t, 429); return srv.URL }, "failing"},
		{"400", func(t *testing.T) string { srv, _ := receiver(t, 400); return srv.URL }, "event"},
		{"204", func(t *testing.T) string { srv, _ := receiver(t, 204); return srv.URL }, "delivered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wh := newWebhook(t, Webhook{URL: tc.url(t), Secrets: []string{vecSecret}})
			if got := kind(wh.Handle(t.Context(), ev)); got != tc.want {
				t.Fatalf("%s, want %s", got, tc.want)
			}
		})
	}
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(time.Second):
		}
	}))
	defer slow.Close()
	wh := newWebhook(t, Webhook{URL: slow.URL, Secrets: []string{vecSecret}, Timeout: 50 * time.Millisecond})
	if got := kind(wh.Handle(t.Context(), ev)); got != "failing" {
		t.Fatalf("a timeout: %s, want failing", got)
	}
}

// verify checks a received webhook at the time now, as a receiver does with package webhook.
func verify(secrets []string, header http.Header, body []byte, now time.Time, tolerance time.Duration) error {
	v, err := webhook.NewVerifier(secrets, webhook.Options{Tolerance: tolerance, Now: func() time.Time { return now }})
	if err != nil {
		return err
	}
	return v.Verify(header, body)
}
