package webhook

import (
	"errors"
	"go/build"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The official Standard Webhooks test vector.
const (
	vecSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vecID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vecTimestamp = int64(1614265330)
	vecPayload   = `{"test": 2432232314}`
	vecSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
)

// secondSecret is another valid secret (24 bytes), for rotation.
const secondSecret = "whsec_c2Vjb25kLXNlY3JldC1rZXktMjQtYnl0ZXM="

// signed returns the headers of a message signed now (vecTimestamp) under secrets.
func signed(t *testing.T, secrets []string, id string, body string) http.Header {
	t.Helper()
	sig, err := Sign(secrets, id, vecTimestamp, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(vecTimestamp, 10))
	h.Set(HeaderSignature, sig)
	return h
}

func verifier(t *testing.T, secrets []string, opts Options) *Verifier {
	t.Helper()
	v, err := NewVerifier(secrets, opts)
	if err != nil {
		t.Fatalf("NewVerifier: %v", err)
	}
	return v
}

func TestSignStandardWebhooksVector(t *testing.T) {
	t.Parallel()
	got, err := Sign([]string{vecSecret}, vecID, vecTimestamp, []byte(vecPayload))
	if err != nil || got != vecSignature {
		t.Fatalf("Sign = %q, %v; want %q", got, err, vecSignature)
	}
	// Several secrets: one entry each, in order, each the signature of that secret alone.
	both, err := Sign([]string{vecSecret, " " + secondSecret + "\n"}, vecID, vecTimestamp, []byte(vecPayload))
	if err != nil {
		t.Fatal(err)
	}
	second, _ := Sign([]string{secondSecret}, vecID, vecTimestamp, []byte(vecPayload))
	if want := vecSignature + " " + second; both != want {
		t.Fatalf("Sign with two secrets = %q, want %q", both, want)
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	at := time.Unix(vecTimestamp, 0)
	vector := func() http.Header { return signed(t, []string{vecSecret}, vecID, vecPayload) }
	with := func(name, value string) http.Header {
		h := vector()
		if value == "" {
			h.Del(name)
		} else {
			h.Set(name, value)
		}
		return h
	}
	bothSigs := signed(t, []string{secondSecret, vecSecret}, vecID, vecPayload)
	cases := []struct {
		name    string
		secrets []string
		header  http.Header
		body    string
		now     time.Time
		tol     time.Duration
		want    error // nil: accepted
	}{
		{"valid", []string{vecSecret}, vector(), vecPayload, at, 0, nil},
		{"valid at the old edge", []string{vecSecret}, vector(), vecPayload, at.Add(DefaultTolerance), 0, nil},
		{"valid at the new edge", []string{vecSecret}, vector(), vecPayload, at.Add(-DefaultTolerance), 0, nil},
		{"rotated: receiver knows old and new", []string{secondSecret, vecSecret}, vector(), vecPayload, at, 0, nil},
		{"several signatures, receiver knows one", []string{vecSecret}, bothSigs, vecPayload, at, 0, nil},
		{"several signatures, receiver knows the other", []string{secondSecret}, bothSigs, vecPayload, at, 0, nil},
		{"matching entry among others", []string{vecSecret}, with(HeaderSignature, "v1a,AAAA v1,bm90LWl0 "+vecSignature), vecPayload, at, 0, nil},
		{"tampered body", []string{vecSecret}, vector(), `{"test": 2432232315}`, at, 0, ErrSignature},
		{"body with extra whitespace", []string{vecSecret}, vector(), vecPayload + " ", at, 0, ErrSignature},
		{"wrong secret", []string{secondSecret}, vector(), vecPayload, at, 0, ErrSignature},
		{"tampered id", []string{vecSecret}, with(HeaderID, "msg_other"), vecPayload, at, 0, ErrSignature},
		{"re-dated message", []string{vecSecret}, with(HeaderTimestamp, strconv.FormatInt(vecTimestamp+1, 10)), vecPayload, at, 0, ErrSignature},
		{"other version only", []string{vecSecret}, with(HeaderSignature, "v1a,"+strings.TrimPrefix(vecSignature, "v1,")), vecPayload, at, 0, ErrSignature},
		{"garbage entries", []string{vecSecret}, with(HeaderSignature, "v1 v1, v1,!!! g0hM9SsE"), vecPayload, at, 0, ErrSignature},
		{"old timestamp", []string{vecSecret}, vector(), vecPayload, at.Add(DefaultTolerance + time.Second), 0, ErrTooOld},
		{"old under a custom tolerance", []string{vecSecret}, vector(), vecPayload, at.Add(31 * time.Second), 30 * time.Second, ErrTooOld},
		{"new timestamp", []string{vecSecret}, vector(), vecPayload, at.Add(-DefaultTolerance - time.Second), 0, ErrTooNew},
		{"absurd timestamp", []string{vecSecret}, with(HeaderTimestamp, "9223372036854775807"), vecPayload, at, 0, ErrTooNew},
		{"malformed timestamp", []string{vecSecret}, with(HeaderTimestamp, "2021-02-26T10:02:10Z"), vecPayload, at, 0, ErrTimestamp},
		{"no id", []string{vecSecret}, with(HeaderID, ""), vecPayload, at, 0, ErrMissingHeader},
		{"no timestamp", []string{vecSecret}, with(HeaderTimestamp, ""), vecPayload, at, 0, ErrMissingHeader},
		{"no signature", []string{vecSecret}, with(HeaderSignature, ""), vecPayload, at, 0, ErrMissingHeader},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := verifier(t, c.secrets, Options{Tolerance: c.tol, Now: func() time.Time { return c.now }})
			err := v.Verify(c.header, []byte(c.body))
			if c.want == nil {
				if err != nil {
					t.Fatalf("Verify = %v, want accepted", err)
				}
				return
			}
			if !errors.Is(err, c.want) {
				t.Fatalf("Verify = %v, want %v", err, c.want)
			}
			if errors.Is(c.want, ErrTimestamp) != errors.Is(err, ErrTimestamp) {
				t.Errorf("Verify = %v: errors.Is(ErrTimestamp) is %t", err, errors.Is(err, ErrTimestamp))
			}
		})
	}
}

func TestTimestampErrorsAreDistinct(t *testing.T) {
	t.Parallel()
	if errors.Is(ErrTooOld, ErrTooNew) || errors.Is(ErrTooNew, ErrTooOld) {
		t.Fatal("ErrTooOld and ErrTooNew match each other")
	}
	for _, err := range []error{ErrTooOld, ErrTooNew} {
		if !errors.Is(err, ErrTimestamp) {
			t.Errorf("%v does not match ErrTimestamp", err)
		}
	}
}

func TestBadSecrets(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		secrets []string
		want    string
	}{
		{"none", nil, "no secret"},
		{"no prefix", []string{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"}, `secret 1 of 1: must start with "whsec_"`},
		{"not base64", []string{vecSecret, "whsec_not*base64!"}, `secret 2 of 2: the part after "whsec_" is not standard base64`},
		{"too short", []string{"whsec_c2hvcnQta2V5"}, "key is too short: want at least 24 bytes"},
		{"empty key", []string{"whsec_"}, "key is too short"},
	}
	for _, c := range cases {
		_, verr := NewVerifier(c.secrets, Options{})
		_, serr := NewSigner(c.secrets)
		for _, err := range []error{verr, serr} {
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
				continue
			}
			for _, s := range c.secrets {
				if rest := strings.TrimPrefix(s, SecretPrefix); len(rest) > 0 && strings.Contains(err.Error(), rest) {
					t.Errorf("%s: error %q leaks a secret", c.name, err)
				}
			}
		}
	}
}

// CheckSecret is the rule NewSigner and NewVerifier apply to each secret, for callers that
// check a secret where it is written (the config file).
func TestCheckSecret(t *testing.T) {
	t.Parallel()
	cases := []struct{ secret, want string }{
		{"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", `must start with "whsec_"`},
		{"whsec_not*base64!", `the part after "whsec_" is not standard base64`},
		{"whsec_c2hvcnQta2V5", "key is too short: want at least 24 bytes"},
	}
	for _, c := range cases {
		err := CheckSecret(c.secret)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckSecret(%q) = %v, want %q", c.secret, err, c.want)
		}
		if _, serr := NewSigner([]string{c.secret}); serr == nil || !strings.Contains(serr.Error(), err.Error()) {
			t.Errorf("NewSigner(%q) = %v, want the same rule as CheckSecret", c.secret, serr)
		}
	}
	if err := CheckSecret(" " + vecSecret + "\n"); err != nil {
		t.Errorf("a good secret with surrounding whitespace: %v", err)
	}
}

func TestMiddleware(t *testing.T) {
	t.Parallel()
	at := time.Unix(vecTimestamp, 0)
	v := verifier(t, []string{vecSecret}, Options{MaxBodyBytes: int64(len(vecPayload)), Now: func() time.Time { return at }})
	var got []byte
	h := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	cases := []struct {
		name          string
		header        http.Header
		body          string
		contentLength int64 // -1: unknown, as with a chunked body
		status        int
	}{
		{"valid, body at the limit", signed(t, []string{vecSecret}, vecID, vecPayload), vecPayload, int64(len(vecPayload)), http.StatusNoContent},
		{"valid, length unknown", signed(t, []string{vecSecret}, vecID, vecPayload), vecPayload, -1, http.StatusNoContent},
		{"tampered body", signed(t, []string{vecSecret}, vecID, vecPayload), `{"test": 2432232315}`, 20, http.StatusUnauthorized},
		{"wrong secret", signed(t, []string{secondSecret}, vecID, vecPayload), vecPayload, 20, http.StatusUnauthorized},
		{"no headers", http.Header{}, vecPayload, 20, http.StatusUnauthorized},
		{"declared too large", signed(t, []string{vecSecret}, vecID, vecPayload+" "), vecPayload + " ", 21, http.StatusRequestEntityTooLarge},
		{"too large, length unknown", signed(t, []string{vecSecret}, vecID, vecPayload+" "), vecPayload + " ", -1, http.StatusRequestEntityTooLarge},
	}
	for _, c := range cases {
		got = nil
		req := httptest.NewRequest(http.MethodPost, "/hooks", strings.NewReader(c.body))
		req.ContentLength = c.contentLength
		req.Header = c.header
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.status {
			t.Errorf("%s: status %d (%s), want %d", c.name, rec.Code, strings.TrimSpace(rec.Body.String()), c.status)
			continue
		}
		switch {
		case c.status == http.StatusNoContent && string(got) != c.body:
			t.Errorf("%s: next read %q, want the verified body %q", c.name, got, c.body)
		case c.status != http.StatusNoContent && got != nil:
			t.Errorf("%s: a rejected request reached next", c.name)
		}
	}
}

func TestVerifyRequestReadError(t *testing.T) {
	t.Parallel()
	v := verifier(t, []string{vecSecret}, Options{})
	req := httptest.NewRequest(http.MethodPost, "/hooks", io.MultiReader(strings.NewReader("{"), errReader{}))
	req.Header = signed(t, []string{vecSecret}, vecID, vecPayload)
	if _, err := v.VerifyRequest(req); !errors.Is(err, errBroken) {
		t.Fatalf("VerifyRequest = %v, want the read error", err)
	}
	rec := httptest.NewRecorder()
	v.Middleware(http.NotFoundHandler()).ServeHTTP(rec, req)
	if rec.Code != http.StatusBadRequest {
		t.Fatalf("Middleware status %d, want 400", rec.Code)
	}
}

var errBroken = errors.New("connection broke")

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errBroken }

// Receivers import this package into their own modules: it must pull in nothing but the
// standard library (no other package of watukuy, no third-party module).
func TestImportsOnlyTheStandardLibrary(t *testing.T) {
	t.Parallel()
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkg.Imports) == 0 {
		t.Fatal("no imports found")
	}
	for _, imp := range pkg.Imports {
		std, err := build.Import(imp, ".", build.FindOnly)
		if err != nil || !std.Goroot {
			t.Errorf("package webhook imports %s, which is not in the standard library", imp)
		}
	}
}
