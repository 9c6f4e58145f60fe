package config

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// PartitionVar is the placeholder that is never read from the environment: it stays in the
// value and is replaced by the key's partition when a request is built.
const PartitionVar = "${partition}"

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// expandEnv replaces ${VAR} with lookup(VAR). ${partition} stays literal, $${X} is a literal
// ${X}; any other $ is kept as it is. It returns the names of the variables that are not set
// and a syntax error for a malformed reference.
func expandEnv(s string, lookup func(string) (string, bool)) (string, []string, error) {
	if !strings.Contains(s, "$") {
		return s, nil, nil
	}
	var b strings.Builder
	var missing []string
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${") // escaped: the rest up to "}" is copied as plain text below
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				return "", nil, fmt.Errorf("unterminated %q (write $${ for a literal ${)", s[i:])
			}
			name := s[i+2 : i+2+end]
			i += 2 + end + 1
			if name == "partition" {
				b.WriteString(PartitionVar)
				continue
			}
			if !envNameRE.MatchString(name) {
				return "", nil, fmt.Errorf("invalid environment variable name %q in ${%s} (write $${ for a literal ${)", name, name)
			}
			v, ok := lookup(name)
			if !ok {
				missing = append(missing, name)
				continue
			}
			b.WriteString(v)
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	return b.String(), missing, nil
}

// ParseDuration reads Go duration syntax ("10s", "5m", "1h30m") with an optional leading day
// count ("7d", "1d12h", "1.5d"); a day is 24 hours.
func ParseDuration(s string) (time.Duration, error) {
	bad := fmt.Errorf("bad duration %q: want Go syntax like 10s, 5m, 1h30m, or days like 7d, 1d12h", s)
	t := strings.TrimSpace(s)
	i := strings.IndexByte(t, 'd')
	if i < 0 {
		d, err := time.ParseDuration(t)
		if err != nil {
			return 0, bad
		}
		return d, nil
	}
	neg := false
	num := t[:i]
	if strings.HasPrefix(num, "-") || strings.HasPrefix(num, "+") {
		neg = num[0] == '-'
		num = num[1:]
	}
	if num == "" || strings.ContainsAny(num, "+-eE") {
		return 0, bad
	}
	days, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsInf(days, 0) || math.IsNaN(days) {
		return 0, bad
	}
	total := days * float64(24*time.Hour)
	if rest := t[i+1:]; rest != "" {
		if rest[0] == '-' || rest[0] == '+' {
			return 0, bad
		}
		r, err := time.ParseDuration(rest)
		if err != nil {
			return 0, bad
		}
		total += float64(r)
	}
	if total >= math.MaxInt64 {
		return 0, fmt.Errorf("bad duration %q: too long", s)
	}
	d := time.Duration(total)
	if neg {
		d = -d
	}
	return d, nil
}
