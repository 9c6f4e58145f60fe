// Package webhook signs and verifies webhooks in the Standard Webhooks format
// (https://www.standardwebhooks.com/), the format watukuy's webhook sink sends. A receiver
// needs only this package and the standard library:
//
//	v, err := webhook.NewVerifier([]string{os.Getenv("WEBHOOK_SECRET")}, webhook.Options{})
//	...
//	http.Handle("/hooks/watukuy", v.Middleware(handleEvent))
//
// Every request carries three headers:
//
//	webhook-id: <event id>            the same on every retry: the idempotency key
//	webhook-timestamp: <unix seconds> the time of this attempt
//	webhook-signature: v1,<base64(HMAC-SHA256(key, "<id>.<timestamp>.<body>"))> ...
//
// A watukuy that traces its cycles (OpenTelemetry) also sends traceparent, the W3C trace
// context of the handler attempt: a receiver that traces extracts it (propagation.TraceContext)
// to continue the cycle's trace. It is not signed, and this package ignores it.
//
// The signature header holds one space-separated entry per secret the sender signs with, so a
// secret is rotated without downtime: the sender signs with old and new, receivers switch to
// the new one, then the sender drops the old. A Verifier given several secrets accepts a
// message that matches any of them, which covers the same rotation from the receiver's side.
//
// A secret is "whsec_" followed by the standard base64 of at least 24 bytes (the spec asks
// for 24 to 64 random bytes); the HMAC key is the decoded part. Surrounding whitespace, such
// as the trailing newline of a secret file, is ignored. Errors name a secret by its position,
// never by any part of its value.
//
// The body of a watukuy webhook is the event envelope, a JSON object with the fields id,
// poller, partition, type (created, updated or deleted), lane, identity, version, seq,
// observedAt, schemaVersion and item (the third-party item as the API sent it). Delivery is at
// least once: deduplicate by the id.
package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names, secret format and defaults of the Standard Webhooks spec as watukuy uses it.
const (
	// HeaderID carries the message id (watukuy's event id).
	HeaderID = "webhook-id"
	// HeaderTimestamp carries the time of the attempt in unix seconds.
	HeaderTimestamp = "webhook-timestamp"
	// HeaderSignature carries the space-separated "v1,<base64>" signatures.
	HeaderSignature = "webhook-signature"

	// SecretPrefix starts every secret.
	SecretPrefix = "whsec_"
	// MinSecretBytes is the shortest decoded key accepted.
	MinSecretBytes = 24

	// DefaultTolerance is how far webhook-timestamp may be from the receiver's clock, in
	// either direction, when Options.Tolerance is 0.
	DefaultTolerance = 5 * time.Minute
	// DefaultMaxBodyBytes is the largest body VerifyRequest and Middleware read when
	// Options.MaxBodyBytes is 0.
	DefaultMaxBodyBytes = 1 << 20
)

// Errors of verification, for errors.Is. ErrTooOld and ErrTooNew also match ErrTimestamp.
var (
	// ErrMissingHeader: webhook-id, webhook-timestamp or webhook-signature is absent.
	ErrMissingHeader = errors.New("webhook: missing header")
	// ErrTimestamp: webhook-timestamp is not unix seconds or is outside the tolerance.
	ErrTimestamp = errors.New("webhook: bad timestamp")
	// ErrTooOld: webhook-timestamp is further in the past than the tolerance (a replay, or a
	// message that waited too long).
	ErrTooOld = fmt.Errorf("%w: too old", ErrTimestamp)
	// ErrTooNew: webhook-timestamp is further in the future than the tolerance (a skewed or
	// forged clock).
	ErrTooNew = fmt.Errorf("%w: too new", ErrTimestamp)
	// ErrSignature: no v1 entry of webhook-signature matches any of the secrets.
	ErrSignature = errors.New("webhook: no matching signature")
	// ErrBodyTooLarge: the request body is longer than Options.MaxBodyBytes.
	ErrBodyTooLarge = errors.New("webhook: body too large")
)

// Signer computes webhook-signature values. It is safe for concurrent use.
type Signer struct {
	keys [][]byte
}

// NewSigner parses the secrets ("whsec_<base64>", at least one); every one of them signs.
func NewSigner(secrets []string) (*Signer, error) {
	keys, err := parseSecrets(secrets)
	if err != nil {
		return nil, err
	}
	return &Signer{keys: keys}, nil
}

// Sign returns the webhook-signature value of a message: one "v1,<base64>" entry per secret,
// in the order of the secrets, space-separated. body is the exact bytes sent.
func (s *Signer) Sign(id string, timestamp int64, body []byte) string {
	var b strings.Builder
	for i, k := range s.keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("v1,")
		b.WriteString(base64.StdEncoding.EncodeToString(mac(k, id, timestamp, body)))
	}
	return b.String()
}

// Sign is NewSigner(secrets) followed by Signer.Sign, for one message.
func Sign(secrets []string, id string, timestamp int64, body []byte) (string, error) {
	s, err := NewSigner(secrets)
	if err != nil {
		return "", err
	}
	return s.Sign(id, timestamp, body), nil
}

// Options tune a Verifier; the zero value gives the defaults.
type Options struct {
	// Tolerance is how far webhook-timestamp may be from Now in either direction;
	// <= 0 means DefaultTolerance.
	Tolerance time.Duration
	// MaxBodyBytes caps what VerifyRequest and Middleware read; <= 0 means
	// DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Now is the receiver's clock; nil means time.Now.
	Now func() time.Time
}

// Verifier checks received webhooks. It is safe for concurrent use.
type Verifier struct {
	keys      [][]byte
	tolerance time.Duration
	maxBody   int64
	now       func() time.Time
}

// NewVerifier parses the secrets (at least one; a message signed under any of them is
// accepted) and applies the defaults of opts.
func NewVerifier(secrets []string, opts Options) (*Verifier, error) {
	keys, err := parseSecrets(secrets)
	if err != nil {
		return nil, err
	}
	v := &Verifier{keys: keys, tolerance: opts.Tolerance, maxBody: opts.MaxBodyBytes, now: opts.Now}
	if v.tolerance <= 0 {
		v.tolerance = DefaultTolerance
	}
	if v.maxBody <= 0 {
		v.maxBody = DefaultMaxBodyBytes
	}
	if v.now == nil {
		v.now = time.Now
	}
	return v, nil
}

// Verify checks a message: the three headers are present, webhook-timestamp is within the
// tolerance of the clock, and at least one "v1,<sig>" entry of webhook-signature is the
// HMAC of "<id>.<timestamp>.<body>" under one of the secrets, compared in constant time.
// body must be the raw request body, byte for byte: verify before decoding. Entries of other
// versions (v1a) are ignored. The error wraps ErrMissingHeader, ErrTimestamp (ErrTooOld,
// ErrTooNew) or ErrSignature.
func (v *Verifier) Verify(header http.Header, body []byte) error {
	id, tsText, sigs := header.Get(HeaderID), header.Get(HeaderTimestamp), header.Get(HeaderSignature)
	for _, h := range []struct{ name, value string }{{HeaderID, id}, {HeaderTimestamp, tsText}, {HeaderSignature, sigs}} {
		if h.value == "" {
			return fmt.Errorf("%w %s", ErrMissingHeader, h.name)
		}
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s %q is not unix seconds", ErrTimestamp, HeaderTimestamp, tsText)
	}
	// Compare in seconds: a time.Duration overflows for absurd timestamps.
	tol := int64(v.tolerance / time.Second)
	now := v.now().Unix()
	if ts < now-tol {
		return fmt.Errorf("%w: message %s timestamp %d is more than %s older than now (%d)", ErrTooOld, id, ts, v.tolerance, now)
	}
	if ts > now+tol {
		return fmt.Errorf("%w: message %s timestamp %d is more than %s ahead of now (%d)", ErrTooNew, id, ts, v.tolerance, now)
	}
	expected := make([][]byte, len(v.keys))
	for i, k := range v.keys {
		expected[i] = mac(k, id, ts, body)
	}
	for _, entry := range strings.Fields(sigs) {
		version, sig, ok := strings.Cut(entry, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(sig)
		if err != nil {
			continue
		}
		for _, e := range expected {
			if hmac.Equal(got, e) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w for message %s", ErrSignature, id)
}

// VerifyRequest reads the body of r, at most Options.MaxBodyBytes of it, and verifies it
// with the request's headers. It returns the body, which is what was signed, only when the
// message is genuine. Besides the errors of Verify it returns one wrapping ErrBodyTooLarge,
// or the read error.
func (v *Verifier) VerifyRequest(r *http.Request) ([]byte, error) {
	if r.ContentLength > v.maxBody {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", ErrBodyTooLarge, r.ContentLength, v.maxBody)
	}
	// One byte more than the limit tells a body at the limit from a longer one.
	body, err := io.ReadAll(io.LimitReader(r.Body, v.maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("webhook: read body: %w", err)
	}
	if int64(len(body)) > v.maxBody {
		return nil, fmt.Errorf("%w: more than %d bytes", ErrBodyTooLarge, v.maxBody)
	}
	if err := v.Verify(r.Header, body); err != nil {
		return nil, err
	}
	return body, nil
}

// Middleware passes only verified requests to next, with r.Body replaced by the verified
// bytes. It answers 413 to a body over the limit, 401 to a missing header, a bad timestamp or
// a bad signature, and 400 when the body cannot be read; the answer's text is the error.
func (v *Verifier) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := v.VerifyRequest(r)
		if err != nil {
			status := http.StatusBadRequest
			switch {
			case errors.Is(err, ErrBodyTooLarge):
				status = http.StatusRequestEntityTooLarge
			case errors.Is(err, ErrMissingHeader), errors.Is(err, ErrTimestamp), errors.Is(err, ErrSignature):
				status = http.StatusUnauthorized
			}
			http.Error(w, err.Error(), status)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

func mac(key []byte, id string, ts int64, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write(strconv.AppendInt(nil, ts, 10))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// parseSecrets decodes "whsec_<base64>" secrets. Errors name a secret by its position
// (1-based) and never repeat any part of it.
func parseSecrets(secrets []string) ([][]byte, error) {
	if len(secrets) == 0 {
		return nil, errors.New("webhook: no secret: give at least one \"whsec_...\" secret")
	}
	keys := make([][]byte, 0, len(secrets))
	for i, s := range secrets {
		k, err := decodeSecret(s)
		if err != nil {
			return nil, fmt.Errorf("webhook: secret %d of %d: %w", i+1, len(secrets), err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// CheckSecret reports why secret is not a usable secret: "whsec_" followed by the standard
// base64 of at least MinSecretBytes bytes, surrounding whitespace ignored. The error never
// holds any part of the secret. Make one with
//
//	echo whsec_$(head -c 32 /dev/urandom | base64)
func CheckSecret(secret string) error {
	_, err := decodeSecret(secret)
	return err
}

// decodeSecret is the HMAC key of a secret.
func decodeSecret(secret string) ([]byte, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(secret), SecretPrefix)
	if !ok {
		return nil, fmt.Errorf("must start with %q", SecretPrefix)
	}
	k, err := base64.StdEncoding.DecodeString(rest)
	if err != nil {
		return nil, fmt.Errorf("the part after %q is not standard base64", SecretPrefix)
	}
	if len(k) < MinSecretBytes {
		return nil, fmt.Errorf("key is too short: want at least %d bytes (Standard Webhooks: 24 to 64 random bytes)", MinSecretBytes)
	}
	return k, nil
}
