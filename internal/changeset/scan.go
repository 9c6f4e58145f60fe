package changeset

import (
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
)

// The walk reads documents gjson has checked, so these readers trust their input: they find
// where a value ends, never whether it is well formed.

// isSpace reports JSON's insignificant white space.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// trimSpace is s without the white space around it.
func trimSpace(s string) string {
	i, j := 0, len(s)
	for i < j && isSpace(s[i]) {
		i++
	}
	for j > i && isSpace(s[j-1]) {
		j--
	}
	return s[i:j]
}

// skip returns the index of the first byte from i on that is not white space.
func skip(s string, i int) int {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

// valueEnd returns the index just past the value that starts at s[i].
func valueEnd(s string, i int) int {
	switch s[i] {
	case '"':
		return stringEnd(s, i)
	case '{', '[':
		depth := 0
		for ; i < len(s); i++ {
			switch s[i] {
			case '"':
				i = stringEnd(s, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return i
	}
	for i < len(s) && s[i] != ',' && s[i] != '}' && s[i] != ']' && !isSpace(s[i]) {
		i++
	}
	return i
}

// stringEnd returns the index just past the string that opens at s[i].
func stringEnd(s string, i int) int {
	for i++; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// scanner reads the members of an object or the elements of an array in turn.
type scanner struct {
	s string
	i int
}

// objectScanner reads the members of object o.
func objectScanner(o string) scanner { return scanner{o, 1} }

// next returns the next member's name as written (quoted) and its value; ok is false past the
// last one.
func (sc *scanner) next() (name, v string, ok bool) {
	i := skip(sc.s, sc.i)
	if sc.s[i] == ',' {
		i = skip(sc.s, i+1)
	}
	if sc.s[i] == '}' {
		return "", "", false
	}
	end := stringEnd(sc.s, i)
	name = sc.s[i:end]
	i = skip(sc.s, skip(sc.s, end)+1) // past the colon
	end = valueEnd(sc.s, i)
	sc.i = end
	return name, sc.s[i:end], true
}

// elements returns the elements of array a.
func elements(a string) []string {
	var out []string
	for i := skip(a, 1); a[i] != ']'; {
		end := valueEnd(a, i)
		out = append(out, a[i:end])
		if i = skip(a, end); a[i] == ',' {
			i = skip(a, i+1)
		}
	}
	return out
}

// plainSameNames reports whether objects a and b name the same members in the same order,
// each written without an escape, in valid UTF-8, and none twice: then the names are their
// bytes, and the members pair up in order.
func plainSameNames(a, b string) bool {
	var seen [32]string
	ia, ib := objectScanner(a), objectScanner(b)
	for n := 0; ; n++ {
		na, _, okA := ia.next()
		nb, _, okB := ib.next()
		if okA != okB || na != nb {
			return false
		}
		if !okA {
			return true
		}
		if n == len(seen) {
			return false // a large object: members() and a map tell
		}
		if strings.IndexByte(na, '\\') >= 0 || !utf8.ValidString(na) {
			return false
		}
		for _, s := range seen[:n] {
			if s == na {
				return false
			}
		}
		seen[n] = na
	}
}

// unquote is a member's name decoded from its quoted form, each byte of invalid UTF-8 read as
// U+FFFD, as decoders read it (two names written with different such bytes are one name).
func unquote(q string) string {
	name := q[1 : len(q)-1]
	if strings.IndexByte(name, '\\') >= 0 {
		name = gjson.Parse(q).Str
	}
	if utf8.ValidString(name) {
		return name
	}
	var b strings.Builder
	for _, r := range name { // ranging yields U+FFFD for each invalid byte
		b.WriteRune(r)
	}
	return b.String()
}
