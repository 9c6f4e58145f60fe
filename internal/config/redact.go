package config

import (
	"cmp"
	"slices"
	"strings"

	"github.com/watukuy/watukuy/webhook"
)

// minPiece is the shortest part of a variable's value that a message may not quote: a
// message about a field that holds ${VAR} never carries this many characters of the value in
// a row.
const minPiece = 4

// minAnywhere is the length from which a variable's value is taken out of every message, not
// only those about the fields it was expanded into: long enough not to match by chance.
const minAnywhere = 8

// redactor remembers what each ${VAR} expanded to and where, so that no error message quotes
// a value that came from the environment: a secret put in the wrong field would otherwise be
// printed by the error about that field.
type redactor struct {
	values map[string]string   // variable → its value
	fields map[string][]string // field path → the variables expanded into it
}

// note records that name, whose value is value, was expanded into field.
func (r *redactor) note(field, name, value string) {
	if r.values == nil {
		r.values, r.fields = map[string]string{}, map[string][]string{}
	}
	r.values[name] = value
	if !slices.Contains(r.fields[field], name) {
		r.fields[field] = append(r.fields[field], name)
	}
}

// vars is the variables expanded into field, as ${NAME}; nil when it holds none.
func (r *redactor) vars(field string) []string {
	if r == nil {
		return nil
	}
	var out []string
	for _, name := range r.fields[field] {
		out = append(out, "${"+name+"}")
	}
	return out
}

// redact is msg, about field, with every value of a variable expanded into field (and every
// long value of any variable) written as ${NAME}. When a piece of such a value is still in the
// message (a check that quoted part of it), the message only says where the value came from.
func (r *redactor) redact(field, msg string) string {
	if r == nil || len(r.values) == 0 {
		return msg
	}
	own := r.fields[field]
	names := make([]string, 0, len(r.values))
	for name := range r.values {
		names = append(names, name)
	}
	// Longer values first, so that a value holding another is replaced whole.
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(len(r.values[b]), len(r.values[a])), strings.Compare(a, b))
	})
	for _, name := range names {
		v := r.values[name]
		switch {
		case v == "":
		case slices.Contains(own, name):
			msg = replaceWords(msg, v, "${"+name+"}")
		case len(v) >= minAnywhere:
			msg = strings.ReplaceAll(msg, v, "${"+name+"}")
		}
	}
	for _, name := range own {
		if sharesPiece(msg, r.values[name], minPiece) {
			return "not valid here; the value comes from " + orList(r.vars(field)) + " and is not shown"
		}
	}
	return msg
}

// replaceWords replaces each occurrence of old in s that is not part of a longer word (a
// letter, digit or _ on either side), so that a short value such as "1" is replaced in
// "got 1" but not in "at least 10".
func replaceWords(s, old, repl string) string {
	var b strings.Builder
	for {
		i := strings.Index(s, old)
		if i < 0 {
			b.WriteString(s)
			return b.String()
		}
		end := i + len(old)
		if (i > 0 && wordByte(s[i-1]) && wordByte(old[0])) || (end < len(s) && wordByte(s[end]) && wordByte(old[len(old)-1])) {
			b.WriteString(s[:i+1])
			s = s[i+1:]
			continue
		}
		b.WriteString(s[:i])
		b.WriteString(repl)
		s = s[end:]
	}
}

func wordByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

// sharesPiece reports whether s holds n bytes in a row of v, in any case (a check may have
// lowercased it, as url.Parse does a scheme). A webhook secret's "whsec_" is no secret: the
// message that asks for it says it.
func sharesPiece(s, v string, n int) bool {
	s, v = strings.ToLower(s), strings.ToLower(v)
	skip := 0
	if strings.HasPrefix(v, webhook.SecretPrefix) {
		skip = len(webhook.SecretPrefix)
	}
	for i := 0; i+n <= len(v); i++ {
		if i+n <= skip {
			continue
		}
		if strings.Contains(s, v[i:i+n]) {
			return true
		}
	}
	return false
}
