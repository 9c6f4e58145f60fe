package config

import (
	"fmt"
	"slices"
	"strings"
)

// Markers around docs/configuration.md's generated table of poller keys.
const (
	referenceBegin = "<!-- poller-keys: generated from internal/config/schema.go; update with go test ./internal/config -run TestReadmeReference -update -->"
	referenceEnd   = "<!-- /poller-keys -->"
)

// reference is docs/configuration.md's table of poller keys, one row per schema field, after a line
// that says which keys are required.
func reference() string {
	var b strings.Builder
	b.WriteString(requiredText() + "\n\n")
	b.WriteString("| key | type | default | allowed | strategies | meaning | sets |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- |\n")
	for _, f := range schema {
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s | %s | %s |\n", f.path, kindNames[f.kind], cell(f.defaultText()),
			cell(f.allowedText()), cell(strings.Join(f.strategies, ", ")), cell(f.doc), cell(code(f.sets)))
	}
	return b.String()
}

// requiredText says what every entry needs, what a strategy needs and what a block needs
// once it is given.
func requiredText() string {
	var always, strategy, inBlock []string
	for _, f := range schema {
		switch {
		case f.required && f.kind == kindBlock && alwaysGiven(f.parent()) && !slices.ContainsFunc(keysOf(f.path), func(c *field) bool { return c.required }):
			always = append(always, "`"+f.path+"`"+f.note) // a block of alternatives (delivery)
		case f.required && f.kind != kindBlock && alwaysGiven(f.parent()):
			always = append(always, "`"+f.path+"`")
		case f.required && f.kind != kindBlock:
			inBlock = append(inBlock, "`"+f.path+"`")
		case f.requiredFor != nil:
			strategy = append(strategy, fmt.Sprintf("`%s` (%s)", f.path, orList(f.requiredFor)))
		}
	}
	return fmt.Sprintf("**Required** in every poller entry: %s; by its cursor strategy: %s; once their block is given: %s. "+
		"Everything else has a default.", strings.Join(always, ", "), strings.Join(strategy, ", "), strings.Join(inBlock, ", "))
}

// alwaysGiven reports whether the block at path must be in every entry ("" is the entry).
func alwaysGiven(path string) bool {
	for path != "" {
		i := slices.IndexFunc(schema, func(f *field) bool { return f.path == path })
		if i < 0 || !schema[i].required {
			return false
		}
		path = schema[i].parent()
	}
	return true
}

// defaultText is the default column: required, required for some strategies, or the default.
func (f *field) defaultText() string {
	switch {
	case f.required && f.kind == kindBlock:
		return "required"
	case f.required && alwaysGiven(f.parent()):
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
	case f.allowed != "":
		return f.allowed
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
