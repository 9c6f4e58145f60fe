package app

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// exampleRedisURL is the URL a refused one is told to look like when it holds no address to
// build a better one from.
const exampleRedisURL = "redis://localhost:6379"

// checkRedisScheme refuses a Redis URL without a scheme ("localhost:6379") and says what to
// write instead: go-redis fails on it with a URL parser error about a colon in the first path
// segment. The suggestion is never a URL that is itself malformed: the input with redis://
// added when that makes a host[:port][/db] URL, a socket path with unix://, the input with
// its scheme's "://" mended when only that was amiss ("redis:/h:6379", "redis//h"), and
// otherwise an example. A password in the input is not repeated.
func checkRedisScheme(rawURL string) error {
	if strings.Contains(rawURL, "://") {
		return nil
	}
	const others = "rediss:// for TLS, unix:///path/to/redis.sock for a socket"
	if fixed, ok := withScheme(rawURL); ok {
		return fmt.Errorf("redis URL %q has no scheme: write %s (redis://host:port[/db]), or %s",
			redactBare(rawURL), redactURL(fixed), others)
	}
	return fmt.Errorf("redis URL %q has no scheme and is no host:port: write redis://host:port[/db] (e.g. %s), or %s",
		redactBare(rawURL), exampleRedisURL, others)
}

// withScheme is the input made a URL, when one is plain to see: see checkRedisScheme.
func withScheme(raw string) (string, bool) {
	if u := "redis://" + raw; hostPortURL(u) {
		return u, true
	}
	if strings.HasPrefix(raw, "/") && !strings.HasSuffix(raw, "/") {
		return "unix://" + raw, true
	}
	for _, scheme := range []string{"rediss", "redis", "unix"} {
		rest, ok := strings.CutPrefix(raw, scheme)
		if !ok || rest == "" || !strings.ContainsAny(rest[:1], ":/") {
			continue
		}
		rest = strings.TrimLeft(rest, ":/")
		if scheme == "unix" {
			return "unix:///" + rest, rest != "" && !strings.HasSuffix(rest, "/")
		}
		u := scheme + "://" + rest
		return u, hostPortURL(u)
	}
	return "", false
}

// redactBare hides the password of a URL given without a scheme: everything before its last
// '@'.
func redactBare(raw string) string {
	if at := strings.LastIndex(raw, "@"); at >= 0 {
		return "[redacted]@" + raw[at+1:]
	}
	return raw
}

// hostPortURL reports whether u is a redis(s)://[user:password@]host[:port][/db] URL with a
// plain host name or IP address, a numeric port and a numeric database, and nothing else.
func hostPortURL(u string) bool {
	p, err := url.Parse(u)
	if err != nil || p.Host == "" || p.Opaque != "" || p.RawQuery != "" || p.Fragment != "" {
		return false
	}
	host, port := p.Host, ""
	if h, pt, err := net.SplitHostPort(p.Host); err == nil {
		host, port = h, pt
	}
	if port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return false
		}
	}
	if net.ParseIP(strings.Trim(host, "[]")) == nil && !hostName(host) {
		return false
	}
	if db := strings.TrimPrefix(p.Path, "/"); db != "" {
		if n, err := strconv.Atoi(db); err != nil || n < 0 {
			return false
		}
	}
	return true
}

// hostName reports whether s is a DNS host name: dot-separated labels of letters, digits and
// hyphens, the last not all digits (6379 alone is a port, not a host).
func hostName(s string) bool {
	if s == "" || len(s) > 253 || strings.Trim(s[strings.LastIndex(s, ".")+1:], "0123456789") == "" {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}
