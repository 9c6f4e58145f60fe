package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/watukuy/watukuy/internal/humantime"
)

// table writes aligned columns (text/tabwriter). Empty cells print as "-", so a column never
// collapses and an unpartitioned key's partition "" is visible.
type table struct{ tw *tabwriter.Writer }

// newTable starts a table on w; a header, when given, is its first row.
func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

// row adds one row.
func (t *table) row(cells ...string) {
	for i, c := range cells {
		if i > 0 {
			_, _ = io.WriteString(t.tw, "\t")
		}
		_, _ = io.WriteString(t.tw, cell(c))
	}
	_, _ = io.WriteString(t.tw, "\n")
}

// flush writes the aligned table out.
func (t *table) flush() error { return t.tw.Flush() }

// cell makes a value safe for one cell: "-" when empty, and no tab or newline to break the
// columns (error messages may carry both).
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.NewReplacer("\t", " ", "\r", " ", "\n", " ").Replace(s)
}

// writeJSON prints v as one JSON line: the one document of --json, or one line of a stream.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // URLs and cursors stay readable
	return enc.Encode(v)
}

// clip shortens s to n runes for a table column; the detailed views print it whole.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// when renders a time for humans: RFC 3339 in UTC and how far it is from now.
func when(t *time.Time, now time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339) + " (" + humantime.Relative(*t, now) + ")"
}

// yesNo renders a flag for a table.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// itoa renders a counter for a table.
func itoa[T ~int | ~int64](n T) string { return fmt.Sprint(n) }

// plural is n and noun, with an s when n is not 1: "1 page", "2 pages".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
