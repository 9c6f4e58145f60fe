package config

import (
	"fmt"
	"strings"
)

// Markers around the README's generated table of poller keys.
const (
	referenceBegin = "<!-- poller-keys: generated from internal/config/schema.go; update with go test ./internal/config -run TestReadmeReference -update -->"
	referenceEnd   = "<!-- /poller-keys -->"
)

// reference is the README's table of poller keys, one row per schema field.
func reference() string {
	var b strings.Builder
	b.WriteString("| key | type | default | allowed | strategies | meaning | sets |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, f := range schema {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %s |\n", f.path, kindNames[f.kind], cell(f.defaultText()),
			cell(f.allowedText()), cell(strings.Join(f.strategies, ", ")), cell(f.doc), cell(code(f.sets)))
	}
	return b.String()
}

// defaultText is the default column: required, required for some strategies, or the default.
func (f *field) defaultText() string {
	switch {
	case f.required && f.kind == kindBlock:
		return "required"
	case f.required:
		return "required (in its block)"
	case f.requiredFor != nil && f.def != "":
		return fmt.Sprintf("required for %s; %s", orList(f.requiredFor), f.def)
	case f.requiredFor != nil:
		return "required for " + orList(f.requiredFor)
	}
	return f.def
}

// allowedText is the allowed column: the enum, the integer bound or the field's own check.
func (f *field) allowedText() string {
	switch {
	case f.enum != nil:
		return "`" + strings.Join(f.enum, "`, `") + "`"
	case f.kind == kindInt:
		return fmt.Sprintf("≥ %d", f.min)
	case f.kind == kindDuration:
		return "> 0"
	}
	return f.allowed
}

// code quotes each comma-separated Go name.
func code(names string) string {
	if names == "" {
		return ""
	}
	return "`" + strings.ReplaceAll(names, ", ", "`, `") + "`"
}

// cell escapes a table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
