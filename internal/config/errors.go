package config

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Error is every config error: it names the file, the line (and column when known) and the
// field path, e.g. "pollers[0].cursor.strategy".
type Error struct {
	File   string
	Line   int // 1-based; 0 when unknown (e.g. the file cannot be read)
	Column int // 1-based; 0 when unknown
	Field  string
	Msg    string
	// Err is the underlying error, when there is one (e.g. a *fs.PathError from Load).
	Err error
}

// Error formats "file:line:column: field: message"; missing parts are left out.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the underlying error, if any.
func (e *Error) Unwrap() error { return e.Err }

// joinErrors sorts errs by position and returns nil, the single *Error, or an errors.Join of
// them all.
func joinErrors(errs []*Error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return errs[0]
	}
	slices.SortStableFunc(errs, func(a, b *Error) int {
		if a.Line != b.Line {
			return a.Line - b.Line
		}
		return a.Column - b.Column
	})
	all := make([]error, len(errs))
	for i, e := range errs {
		all[i] = e
	}
	return errors.Join(all...)
}

// suggest returns the candidate closest to s when it is a likely typo, or "".
func suggest(s string, candidates []string) string {
	norm := func(x string) string {
		return strings.NewReplacer("_", "", "-", "", " ", "").Replace(strings.ToLower(x))
	}
	ns := norm(s)
	best, bestD := "", -1
	for _, c := range candidates {
		if norm(c) == ns {
			return c
		}
		d := levenshtein(ns, norm(c))
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	limit := 2
	if len(ns) <= 4 {
		limit = 1
	}
	if bestD >= 0 && bestD <= limit && bestD < len(ns) {
		return best
	}
	return ""
}

func levenshtein(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(rb)]
}

// orList formats ["a","b","c"] as "a, b or c".
func orList(xs []string) string {
	switch len(xs) {
	case 0:
		return ""
	case 1:
		return xs[0]
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " or " + xs[len(xs)-1]
}
