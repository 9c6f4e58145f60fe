package httppoll

import (
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/watukuy/watukuy/watukuytype"
)

// MaxRetryAfter caps what ParseRetryAfter returns: a server asking for days is broken or
// hostile, and the key would look dead; a day still throttles hard.
const MaxRetryAfter = 24 * time.Hour

// ParseRetryAfter parses a Retry-After value relative to now: delay-seconds (1*DIGIT, so
// "-5" and "1.5" are malformed) or an HTTP-date in any of the three forms of RFC 9110 §5.6.7
// (IMF-fixdate "Sun, 06 Nov 1994 08:49:37 GMT", the obsolete RFC 850
// "Sunday, 06-Nov-94 08:49:37 GMT" and asctime "Sun Nov  6 08:49:37 1994").
//
// It returns (d, true) for a valid value: a date in the past means "retry now", (0, true), and
// anything longer than MaxRetryAfter (24h) is capped. A missing or malformed value gives
// (0, false). An RFC 850 two-digit year is read as the year nearest now (never more than 50
// years ahead), as RFC 9110 asks.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if isDigits(v) {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n > int64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter, true // only overflow fails on all-digit input: huge
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := time.Parse(time.RFC850, v)
	if err == nil {
		t = nearestCentury(t, now)
	} else if t, err = http.ParseTime(v); err != nil {
		return 0, false
	}
	d := t.Sub(now)
	switch {
	case d < 0:
		return 0, true
	case d > MaxRetryAfter:
		return MaxRetryAfter, true
	}
	return d, true
}

// nearestCentury moves a two-digit-year date into the century that puts it no more than 50
// years after now (RFC 9110 §5.6.7); time.Parse's fixed 1969 pivot would not age well.
func nearestCentury(t, now time.Time) time.Time {
	y := now.Year() - now.Year()%100 + t.Year()%100
	switch {
	case y > now.Year()+50:
		y -= 100
	case y < now.Year()-49:
		y += 100
	}
	return t.AddDate(y-t.Year(), 0, 0)
}

// ParseRateLimit reads a response's rate-limit headers. It tries, in this order, and takes
// the first family that gives a usable result (at least a remaining count and a reset):
//
//  1. The IETF draft's structured fields (draft-ietf-httpapi-ratelimit-headers 07+):
//     `RateLimit: "default";r=50;t=30` (r = remaining, t = seconds to reset) and
//     `RateLimit-Policy: "default";q=100;w=60` (q = quota, the Limit of the policy with the
//     same name). With several items (several policies, in one field or several field
//     lines) the most restrictive wins: the one that asks for the widest spacing, t / max(r, 1)
//     (a burst window of r=5;t=1 loses to a daily r=500;t=80000), and on a tie the lowest r. The
//     earlier drafts' dictionary form `RateLimit: limit=100, remaining=50, reset=30` is
//     accepted too.
//  2. `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset` (older drafts); only the
//     first list member counts, so `RateLimit-Limit: 10, 10;w=1` gives 10.
//  3. `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset` (and the
//     `X-Rate-Limit-*` spelling).
//
// Reset values, in every family, follow one magnitude rule, because APIs disagree on what
// "reset" is and a delta of more than 31 years is never meant:
//
//   - v < 1e9: seconds from now (a delta);
//   - 1e9 ≤ v < 1e12: a Unix epoch in seconds;
//   - v ≥ 1e12: a Unix epoch in milliseconds;
//   - an epoch in the past gives a reset of 0.
//
// Fractions ("1.5", "1700000000.250") are allowed in resets; counts must be non-negative
// integers. Malformed fields are ignored, never fatal: a family with a malformed remaining
// or reset falls through to the next, a malformed limit leaves Limit 0 (unknown). It returns
// nil when nothing is usable. Header names are case-insensitive.
func ParseRateLimit(h http.Header, now time.Time) *watukuytype.RateLimit {
	if rl := structuredRateLimit(h, now); rl != nil {
		return rl
	}
	for _, prefix := range []string{"RateLimit-", "X-RateLimit-", "X-Rate-Limit-"} {
		if rl := splitRateLimit(h, prefix, now); rl != nil {
			return rl
		}
	}
	return nil
}

// splitRateLimit reads one family of separate Limit/Remaining/Reset headers.
func splitRateLimit(h http.Header, prefix string, now time.Time) *watukuytype.RateLimit {
	remaining, ok := countValue(firstMember(headerValue(h, prefix+"Remaining")))
	if !ok {
		return nil
	}
	reset, ok := resetValue(firstMember(headerValue(h, prefix+"Reset")), now)
	if !ok {
		return nil
	}
	limit, _ := countValue(firstMember(headerValue(h, prefix+"Limit")))
	return &watukuytype.RateLimit{Limit: limit, Remaining: remaining, Reset: reset}
}

// structuredRateLimit reads the draft's RateLimit field in either of its shapes.
// pace is the request spacing a window asks for: what is left of it per remaining request.
func pace(rl *watukuytype.RateLimit) time.Duration {
	return rl.Reset / time.Duration(max(rl.Remaining, 1))
}

func structuredRateLimit(h http.Header, now time.Time) *watukuytype.RateLimit {
	vals := headerValues(h, "RateLimit")
	if len(vals) == 0 {
		return nil
	}
	var best *watukuytype.RateLimit
	var bestName string
	dict := map[string]string{}
	for _, m := range sfMembers(strings.Join(vals, ",")) {
		if !m.quoted {
			if k, v, ok := strings.Cut(m.head, "="); ok { // dictionary form: limit=100
				dict[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
				continue
			}
		}
		r, okR := countValue(m.params["r"])
		t, okT := resetValue(m.params["t"], now)
		if !okR || !okT {
			continue
		}
		cand := &watukuytype.RateLimit{Remaining: r, Reset: t}
		if best == nil || pace(cand) > pace(best) || (pace(cand) == pace(best) && r < best.Remaining) {
			best, bestName = cand, m.head
		}
	}
	if best != nil {
		for _, p := range sfMembers(strings.Join(headerValues(h, "RateLimit-Policy"), ",")) {
			if p.head == bestName {
				if q, ok := countValue(p.params["q"]); ok {
					best.Limit = q
				}
				break
			}
		}
		return best
	}
	remaining, okR := countValue(dict["remaining"])
	reset, okT := resetValue(dict["reset"], now)
	if !okR || !okT {
		return nil
	}
	limit, _ := countValue(dict["limit"])
	return &watukuytype.RateLimit{Limit: limit, Remaining: remaining, Reset: reset}
}

// sfMember is one list member of a structured field (RFC 9651), parsed leniently: its head
// (an item's bare value, or a dictionary member's "key=value") and its parameters.
type sfMember struct {
	head   string
	quoted bool // head was an sf-string; a quoted head is a name, never key=value
	params map[string]string
}

// sfMembers splits a structured-field list or dictionary into members. It is a tolerant
// reader, not a validator: what it cannot make sense of turns into members whose values
// later fail to parse and are ignored.
func sfMembers(v string) []sfMember {
	var out []sfMember
	for _, m := range splitOutsideQuotes(v, ',') {
		parts := splitOutsideQuotes(m, ';')
		head := strings.TrimSpace(parts[0])
		if head == "" && len(parts) == 1 {
			continue
		}
		mem := sfMember{head: head, params: map[string]string{}}
		if strings.HasPrefix(head, `"`) {
			mem.head, mem.quoted = unquote(head), true
		}
		for _, p := range parts[1:] {
			k, val, ok := strings.Cut(strings.TrimSpace(p), "=")
			if !ok {
				val = "?1" // a bare parameter is boolean true
			}
			k = strings.ToLower(strings.TrimSpace(k))
			if _, dup := mem.params[k]; !dup { // the first occurrence counts
				mem.params[k] = strings.TrimSpace(val)
			}
		}
		out = append(out, mem)
	}
	return out
}

// splitOutsideQuotes splits s at every sep that is not inside a double-quoted string.
func splitOutsideQuotes(s string, sep byte) []string {
	var out []string
	start, inQuote := 0, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case inQuote && c == '\\':
			i++
		case c == '"':
			inQuote = !inQuote
		case !inQuote && c == sep:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// unquote returns the content of a quoted string, undoing backslash escapes; an unterminated
// string keeps what follows the opening quote.
func unquote(s string) string {
	s = strings.TrimPrefix(s, `"`)
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		case c == '"':
			return b.String()
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// firstMember returns the first comma/semicolon-separated member of a header value.
func firstMember(v string) string {
	if i := strings.IndexAny(v, ",;"); i >= 0 {
		v = v[:i]
	}
	return strings.TrimSpace(v)
}

// countValue parses a non-negative integer count.
func countValue(v string) (int, bool) {
	v = strings.TrimSpace(v)
	if !isDigits(v) || len(v) > 18 {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	return n, err == nil
}

// resetValue parses a reset by the magnitude rule documented on ParseRateLimit.
func resetValue(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	whole, frac, hasFrac := strings.Cut(v, ".")
	if !isDigits(whole) || (hasFrac && !isDigits(frac)) {
		return 0, false
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsInf(f, 0) || f >= 1e16 { // ≥1e16 ms is past year 318000: nonsense
		return 0, false
	}
	if f < 1e9 {
		return time.Duration(f * float64(time.Second)), true
	}
	if f >= 1e12 {
		f /= 1000 // epoch milliseconds
	}
	sec, fr := math.Modf(f)
	return max(time.Unix(int64(sec), int64(fr*1e9)).Sub(now), 0), true
}

// isDigits reports whether s is one or more ASCII digits.
func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// headerValues is h.Values(name), also finding keys a hand-built map did not canonicalize.
func headerValues(h http.Header, name string) []string {
	if vs := h.Values(name); len(vs) > 0 {
		return vs
	}
	for k, vs := range h {
		if strings.EqualFold(k, name) {
			return vs
		}
	}
	return nil
}

// headerValue is the first value of headerValues.
func headerValue(h http.Header, name string) string {
	if vs := headerValues(h, name); len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// NextLink returns the absolute URL of the first Link target whose rel includes "next"
// (RFC 8288: several links per field and several Link fields, quoted or bare rel values,
// space-separated rel lists like rel="next last", relation types compared case-insensitively,
// commas and semicolons inside <…> and quoted strings), resolved against base (the URL the
// response came from). It returns "" when there is no next link, and for a relative target
// when base is nil. Malformed links are skipped.
func NextLink(h http.Header, base *url.URL) string {
	for _, v := range headerValues(h, "Link") {
		for _, l := range parseLinks(v) {
			if !relHas(l.rel, "next") {
				continue
			}
			u, err := url.Parse(strings.TrimSpace(l.target))
			if err != nil {
				continue
			}
			if base != nil {
				return base.ResolveReference(u).String()
			}
			if u.IsAbs() {
				return u.String()
			}
		}
	}
	return ""
}

// link is one link-value of a Link field.
type link struct {
	target string
	rel    string
}

// parseLinks reads `<target>; param=value; param="quoted", <target2>; …`.
func parseLinks(s string) []link {
	var out []link
	i := 0
	skipSpace := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
			i++
		}
	}
	// skipMember moves past the next comma outside quotes and angle brackets.
	skipMember := func() {
		inQuote, inAngle := false, false
		for ; i < len(s); i++ {
			switch c := s[i]; {
			case inQuote && c == '\\':
				i++
			case c == '"' && !inAngle:
				inQuote = !inQuote
			case c == '<' && !inQuote:
				inAngle = true
			case c == '>' && !inQuote:
				inAngle = false
			case c == ',' && !inQuote && !inAngle:
				i++
				return
			}
		}
	}
	for i < len(s) {
		skipSpace()
		if i < len(s) && s[i] == ',' {
			i++
			continue
		}
		if i >= len(s) {
			break
		}
		if s[i] != '<' {
			skipMember()
			continue
		}
		end := strings.IndexByte(s[i:], '>')
		if end < 0 {
			break
		}
		l := link{target: s[i+1 : i+end]}
		i += end + 1
		relSeen, ok := false, true
		for ok {
			skipSpace()
			if i >= len(s) || s[i] == ',' {
				break
			}
			if s[i] != ';' {
				ok = false
				break
			}
			i++
			skipSpace()
			start := i
			for i < len(s) && !strings.ContainsRune("=;, \t", rune(s[i])) {
				i++
			}
			name := strings.ToLower(s[start:i])
			skipSpace()
			val := ""
			if i < len(s) && s[i] == '=' {
				i++
				skipSpace()
				if i < len(s) && s[i] == '"' {
					j := i + 1
					for j < len(s) && s[j] != '"' {
						if s[j] == '\\' {
							j++
						}
						j++
					}
					val = unquote(s[i:min(j+1, len(s))])
					i = min(j+1, len(s))
				} else {
					start := i
					for i < len(s) && !strings.ContainsRune(";, \t", rune(s[i])) {
						i++
					}
					val = s[start:i]
				}
			}
			if name == "rel" && !relSeen { // RFC 8288 §3.3: later rel parameters are ignored
				l.rel, relSeen = val, true
			}
		}
		if !ok {
			skipMember()
			continue
		}
		out = append(out, l)
	}
	return out
}

// relHas reports whether the space-separated relation list rel contains want.
func relHas(rel, want string) bool {
	for _, r := range strings.Fields(rel) {
		if strings.EqualFold(r, want) {
			return true
		}
	}
	return false
}
