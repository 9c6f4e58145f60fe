package httppoll

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// redacted replaces every secret value in logs, errors and error body snippets.
const redacted = "[redacted]"

// sensitiveParts mark a header or query parameter name whose value is a credential.
var sensitiveParts = []string{"token", "secret", "key", "auth", "signature", "password", "passwd", "cookie", "credential"}

// sensitiveExact are short names too generic to match as substrings (Azure SAS "sig").
var sensitiveExact = []string{"sig", "pwd"}

// sensitiveName reports whether a header or query parameter named name carries a secret.
// It errs on the side of redacting: a hidden harmless value costs nothing, a leaked key does.
func sensitiveName(name string) bool {
	l := strings.ToLower(name)
	for _, p := range sensitiveParts {
		if strings.Contains(l, p) {
			return true
		}
	}
	for _, e := range sensitiveExact {
		if l == e {
			return true
		}
	}
	return false
}

// Redact returns a copy of h safe to log: Authorization, Proxy-Authorization, Cookie,
// Set-Cookie and any header whose name contains "token", "secret", "key", "auth", "signature",
// "password", "passwd", "cookie" or "credential" (case-insensitive) have each value replaced by
// "[redacted]". Other headers are copied unchanged; h itself is not modified.
func Redact(h http.Header) http.Header {
	if h == nil {
		return nil
	}
	out := make(http.Header, len(h))
	for k, vs := range h {
		if !sensitiveName(k) {
			out[k] = append([]string(nil), vs...)
			continue
		}
		r := make([]string, len(vs))
		for i := range r {
			r[i] = redacted
		}
		out[k] = r
	}
	return out
}

// RedactURL returns raw safe to log: userinfo and the fragment are dropped in favour of
// "[redacted]" markers, and the values of query parameters whose names look sensitive (the
// names Redact matches, e.g. api_key, access_token, X-Amz-Signature, sig) are replaced by
// "[redacted]". The order and encoding of the other parameters are kept. An unparseable URL
// gives "[invalid URL]", because the secret could be anywhere in it.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "[invalid URL]"
	}
	return redactURL(u)
}

func redactURL(u *url.URL) string {
	c := *u
	c.User = nil
	c.RawQuery, c.ForceQuery = "", false
	c.Fragment, c.RawFragment = "", "" // never sent, and OAuth puts tokens there
	s := c.String()
	if u.User != nil && c.Host != "" {
		// The username alone is often the API key (https://sk_live_…@api.example).
		s = strings.Replace(s, "//", "//"+redacted+"@", 1)
	}
	if u.RawQuery != "" {
		s += "?" + redactQuery(u.RawQuery)
	}
	if u.Fragment != "" {
		s += "#" + redacted
	}
	return s
}

// redactQuery rewrites a raw query string piece by piece, so nothing but the secret values
// changes.
func redactQuery(raw string) string {
	parts := strings.Split(raw, "&")
	for i, p := range parts {
		k, _, _ := strings.Cut(p, "=")
		name, err := url.QueryUnescape(k)
		if err != nil {
			name = k
		}
		if sensitiveName(name) {
			parts[i] = k + "=" + redacted
		}
	}
	return strings.Join(parts, "&")
}

// secretsOf lists the secret values a request carries (sensitive query values, sensitive
// header values and their credential part after the auth scheme, userinfo), so they can be
// scrubbed from response text an API echoes back. Values under 4 bytes are skipped: replacing
// every "1" in a body would hide more than it protects.
func secretsOf(u *url.URL, h http.Header) []string {
	var out []string
	add := func(s string) {
		s = strings.TrimSpace(s)
		if len(s) >= 4 {
			out = append(out, s)
		}
	}
	for k, vs := range u.Query() {
		if sensitiveName(k) {
			for _, v := range vs {
				add(v)
			}
		}
	}
	for _, piece := range strings.Split(u.RawQuery, "&") {
		if k, v, ok := strings.Cut(piece, "="); ok {
			if name, err := url.QueryUnescape(k); err == nil && sensitiveName(name) {
				add(v) // the raw, still-escaped form too
			}
		}
	}
	if u.User != nil {
		add(u.User.Username())
		if p, ok := u.User.Password(); ok {
			add(p)
		}
	}
	for k, vs := range h {
		if !sensitiveName(k) {
			continue
		}
		for _, v := range vs {
			add(v)
			if _, cred, ok := strings.Cut(strings.TrimSpace(v), " "); ok {
				add(cred) // "Bearer s3cr3t" → also "s3cr3t"
			}
		}
	}
	return out
}

// scrub replaces every secret in s by "[redacted]", longest first so that a secret containing
// another is replaced whole.
func scrub(s string, secrets []string) string {
	if len(secrets) == 0 {
		return s
	}
	sorted := slices.Clone(secrets)
	slices.SortStableFunc(sorted, func(a, b string) int { return len(b) - len(a) })
	for _, sec := range sorted {
		s = strings.ReplaceAll(s, sec, redacted)
	}
	return s
}
