package config

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"

	"github.com/watukuy/watukuy/internal/sink"
)

// pos is a place in the file (1-based; zero when unknown).
type pos struct{ line, col int }

// decoder walks the YAML AST, converting values and collecting every error with its position.
type decoder struct {
	file    string
	lookup  func(string) (string, bool)
	anchors map[string]ast.Node
	files   bool // compile the schema files the pollers name
	errs    []*Error
	// deferSecrets: a variable missing in a delivery or admin field is recorded in unset, not
	// an error (the operator commands read neither).
	deferSecrets bool
	unset        []*Error
	// red keeps what ${VAR}s expanded to, which no message may quote.
	red *redactor
	// inTemplate: the string being read is a broker's subject or routing key, where ${poller}
	// and ${type} (like ${partition}) name the event's, not the environment's.
	inTemplate bool
}

// errAt reports an error at p in field. The message never quotes the value of a ${VAR}: a
// secret put in the wrong field would otherwise be printed (and logged by a failed reload).
func (d *decoder) errAt(p pos, field, format string, a ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: p.line, Column: p.col, Field: field, Msg: d.red.redact(field, fmt.Sprintf(format, a...))})
}

// notA reports a string that held a ${...} reference but is not want once expanded: it names
// the variables, never their values.
func (d *decoder) notA(p pos, field, want, expanded string) {
	if vars := d.fromVars(field); vars != "" {
		d.errAt(p, field, "want %s, but the value from %s is not (the value is not shown)", want, vars)
		return
	}
	d.errAt(p, field, "want %s, got %q", want, expanded) // only ${partition}: nothing from the environment
}

// fromVars is the ${VAR}s expanded into field, as an "${A}" or "${A} or ${B}" to name in a
// message instead of the value; "" when the field's value came from the file alone.
func (d *decoder) fromVars(field string) string { return orList(d.red.vars(field)) }

func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

func index(field string, i int) string { return fmt.Sprintf("%s[%d]", field, i) }

// posOf is where a node starts: a block mapping starts at its first key.
func posOf(n ast.Node) pos {
	switch v := n.(type) {
	case nil:
		return pos{}
	case *ast.MappingNode:
		if v.IsFlowStyle && v.Start != nil && v.Start.Position != nil {
			return pos{v.Start.Position.Line, v.Start.Position.Column}
		}
		if len(v.Values) > 0 {
			return posOf(v.Values[0].Key)
		}
	case *ast.MappingValueNode:
		return posOf(v.Key)
	}
	if tk := n.GetToken(); tk != nil && tk.Position != nil {
		return pos{tk.Position.Line, tk.Position.Column}
	}
	return pos{}
}

// collectAnchors records every &anchor so aliases can be resolved.
type anchorVisitor map[string]ast.Node

func (a anchorVisitor) Visit(n ast.Node) ast.Visitor {
	if an, ok := n.(*ast.AnchorNode); ok && an.Name != nil {
		a[nodeText(an.Name)] = an.Value
	}
	return a
}

func nodeText(n ast.Node) string {
	switch v := n.(type) {
	case *ast.StringNode:
		return v.Value
	case *ast.LiteralNode:
		if v.Value != nil {
			return v.Value.Value
		}
		return ""
	}
	if tk := n.GetToken(); tk != nil {
		return tk.Value
	}
	return n.String()
}

// resolve follows anchors, aliases and tags to the value node; nil means null.
func (d *decoder) resolve(n ast.Node, field string) (ast.Node, bool) {
	for range 64 {
		switch v := n.(type) {
		case *ast.AnchorNode:
			n = v.Value
		case *ast.TagNode:
			n = v.Value
		case *ast.AliasNode:
			name := ""
			if v.Value != nil {
				name = nodeText(v.Value)
			}
			target, ok := d.anchors[name]
			if !ok {
				d.errAt(posOf(v), field, "unknown alias *%s", name)
				return nil, false
			}
			n = target
		case *ast.NullNode:
			return nil, true
		default:
			return n, true
		}
	}
	d.errAt(posOf(n), field, "aliases nested too deeply")
	return nil, false
}

func kindOf(n ast.Node) string {
	switch n.(type) {
	case nil, *ast.NullNode:
		return "null"
	case *ast.StringNode, *ast.LiteralNode:
		return "string"
	case *ast.IntegerNode:
		return "integer"
	case *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		return "float"
	case *ast.BoolNode:
		return "boolean"
	case *ast.MappingNode, *ast.MappingValueNode:
		return "mapping"
	case *ast.SequenceNode:
		return "sequence"
	}
	return n.Type().String()
}

// typeErr reports "want <want>, got <kind> <text>".
func (d *decoder) typeErr(n ast.Node, field, want string) {
	got := kindOf(n)
	switch n.(type) {
	case *ast.StringNode, *ast.LiteralNode, *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		t := nodeText(n)
		if len(t) > 40 {
			t = t[:40] + "…"
		}
		got += fmt.Sprintf(" %q", t)
	}
	d.errAt(posOf(n), field, "want %s, got %s", want, got)
}

// entry is one key of a mapping.
type entry struct {
	key   string
	at    pos // the key's position
	value ast.Node
}

// entries lists the keys of a mapping, with merge keys (<<: *anchor) applied. A null value is
// an empty mapping.
func (d *decoder) entries(n ast.Node, field string, depth int) ([]entry, bool) {
	n, ok := d.resolve(n, field)
	if !ok {
		return nil, false
	}
	var mvs []*ast.MappingValueNode
	switch v := n.(type) {
	case nil:
		return nil, true
	case *ast.MappingNode:
		mvs = v.Values
	case *ast.MappingValueNode:
		mvs = []*ast.MappingValueNode{v}
	default:
		d.typeErr(n, field, "a mapping")
		return nil, false
	}
	var out, merged []entry
	seen := map[string]bool{}
	for _, mv := range mvs {
		if mv.Key != nil && mv.Key.IsMergeKey() {
			if depth > 16 {
				d.errAt(posOf(mv.Key), field, "merge keys nested too deeply")
				continue
			}
			src, ok := d.resolve(mv.Value, field)
			if !ok {
				continue
			}
			srcs := []ast.Node{src}
			if seq, isSeq := src.(*ast.SequenceNode); isSeq {
				srcs = seq.Values
			}
			for _, s := range srcs {
				if es, ok := d.entries(s, field, depth+1); ok {
					merged = append(merged, es...)
				}
			}
			continue
		}
		k := nodeText(mv.Key)
		seen[k] = true
		out = append(out, entry{key: k, at: posOf(mv.Key), value: mv.Value})
	}
	for _, e := range merged { // explicit keys win; among merged mappings the first wins
		if !seen[e.key] {
			seen[e.key] = true
			out = append(out, e)
		}
	}
	return out, true
}

// extensionPrefix starts top-level keys that are ignored, so that shared settings can be
// defined once with an anchor and merged into pollers with <<: *anchor.
const extensionPrefix = "x-"

// object decodes a mapping with a fixed set of keys: it calls f for every known key (null
// values included) and reports unknown keys with a suggestion. It returns the known keys that
// have a non-null value, with their positions.
func (d *decoder) object(n ast.Node, field string, known []string, f func(key string, at pos, v ast.Node, fp string)) map[string]pos {
	present := map[string]pos{}
	es, ok := d.entries(n, field, 0)
	if !ok {
		return present
	}
	for _, e := range es {
		fp := join(field, e.key)
		if field == "" && strings.HasPrefix(e.key, extensionPrefix) {
			continue // a place for anchors (x-defaults: &defaults …), ignored
		}
		if !slices.Contains(known, e.key) {
			if len(known) == 0 {
				d.errAt(e.at, fp, "unknown key %q (%s takes no keys)", e.key, field[strings.LastIndexByte(field, '.')+1:])
			} else if s := suggest(e.key, known); s != "" {
				d.errAt(e.at, fp, "unknown key %q (did you mean %q?)", e.key, s)
			} else {
				d.errAt(e.at, fp, "unknown key %q (want one of %s)", e.key, strings.Join(known, ", "))
			}
			continue
		}
		if v, ok := d.resolve(e.value, fp); ok && v != nil {
			present[e.key] = e.at
		}
		f(e.key, e.at, e.value, fp)
	}
	return present
}

// list calls f for each element of a sequence; null is an empty sequence.
func (d *decoder) list(n ast.Node, field string, f func(i int, v ast.Node, fp string)) bool {
	n, ok := d.resolve(n, field)
	if !ok {
		return false
	}
	switch v := n.(type) {
	case nil:
		return true
	case *ast.SequenceNode:
		for i, x := range v.Values {
			f(i, x, index(field, i))
		}
		return true
	}
	d.typeErr(n, field, "a list")
	return false
}

// expand applies ${VAR} expansion to a string value and reports problems at p.
func (d *decoder) expand(s string, p pos, field string) (string, bool) {
	out, missing, err := expandEnv(s, func(name string) (string, bool) {
		if d.inTemplate && (name == sink.VarPoller || name == sink.VarType) {
			return "${" + name + "}", true
		}
		v, ok := d.lookup(name)
		if ok {
			d.red.note(field, name, v)
		}
		return v, ok
	})
	if err != nil {
		d.errAt(p, field, "%v", err)
		return "", false
	}
	for _, name := range missing {
		e := &Error{File: d.file, Line: p.line, Column: p.col, Field: field, Msg: fmt.Sprintf("environment variable %q is not set", name)}
		if d.deferSecrets && secretField(field) {
			d.unset = append(d.unset, e)
			continue
		}
		d.errs = append(d.errs, e)
	}
	return out, len(missing) == 0
}

// secretField reports whether field is where the processes that deliver or serve keep their
// secrets: a poller's delivery, the admin tokens.
func secretField(field string) bool {
	return strings.HasPrefix(field, "admin.") || strings.Contains(field, ".delivery.")
}

// str reads a string; other scalars (numbers, booleans) give their text. ok is false for null
// and for errors (already reported).
func (d *decoder) str(n ast.Node, field string) (string, bool) {
	n, ok := d.resolve(n, field)
	if !ok || n == nil {
		return "", false
	}
	switch v := n.(type) {
	case *ast.StringNode:
		return d.expand(v.Value, posOf(v), field)
	case *ast.LiteralNode:
		return d.expand(nodeText(v), posOf(v), field)
	case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
		return nodeText(v), true
	}
	d.typeErr(n, field, "a string")
	return "", false
}

// template reads a string like str, keeping the template's ${poller} and ${type}.
func (d *decoder) template(n ast.Node, field string) (string, bool) {
	d.inTemplate = true
	defer func() { d.inTemplate = false }()
	return d.str(n, field)
}

// fromEnv reads a string node that holds a ${VAR} reference, for a typed field: "${N}" may
// fill an integer, but a quoted "4" is still a string.
func (d *decoder) fromEnv(n ast.Node, field string) (string, bool) {
	if s, isStr := n.(*ast.StringNode); isStr && strings.Contains(s.Value, "${") {
		return d.expand(s.Value, posOf(s), field)
	}
	return "", false
}

func (d *decoder) int64(n ast.Node, field string) (int64, bool) {
	n, ok := d.resolve(n, field)
	if !ok || n == nil {
		return 0, false
	}
	switch v := n.(type) {
	case *ast.IntegerNode:
		switch x := v.Value.(type) {
		case int64:
			return x, true
		case uint64:
			if x <= math.MaxInt64 {
				return int64(x), true
			}
		}
		d.errAt(posOf(n), field, "integer %s is out of range", nodeText(n))
		return 0, false
	case *ast.StringNode:
		if strings.Contains(v.Value, "${") {
			s, ok := d.fromEnv(v, field)
			if !ok {
				return 0, false
			}
			i, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
			if err != nil {
				d.notA(posOf(n), field, "an integer", s)
				return 0, false
			}
			return i, true
		}
	}
	d.typeErr(n, field, "an integer")
	return 0, false
}

func (d *decoder) int(n ast.Node, field string) (int, bool) {
	i, ok := d.int64(n, field)
	if ok && (i > math.MaxInt || i < math.MinInt) {
		d.errAt(posOf(n), field, "integer %d is out of range", i)
		return 0, false
	}
	return int(i), ok
}

func (d *decoder) float(n ast.Node, field string) (float64, bool) {
	n, ok := d.resolve(n, field)
	if !ok || n == nil {
		return 0, false
	}
	switch v := n.(type) {
	case *ast.FloatNode:
		return v.Value, true
	case *ast.IntegerNode:
		if i, ok := d.int64(v, field); ok {
			return float64(i), true
		}
		return 0, false
	case *ast.StringNode:
		if strings.Contains(v.Value, "${") {
			s, ok := d.fromEnv(v, field)
			if !ok {
				return 0, false
			}
			f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				d.notA(posOf(n), field, "a number", s)
				return 0, false
			}
			return f, true
		}
	}
	d.typeErr(n, field, "a number")
	return 0, false
}

func (d *decoder) bool(n ast.Node, field string) (bool, bool) {
	n, ok := d.resolve(n, field)
	if !ok || n == nil {
		return false, false
	}
	switch v := n.(type) {
	case *ast.BoolNode:
		return v.Value, true
	case *ast.StringNode:
		if strings.Contains(v.Value, "${") {
			s, ok := d.fromEnv(v, field)
			if !ok {
				return false, false
			}
			switch strings.TrimSpace(s) {
			case "true":
				return true, true
			case "false":
				return false, true
			}
			d.notA(posOf(n), field, "true or false", s)
			return false, false
		}
	}
	d.typeErr(n, field, "true or false")
	return false, false
}

// duration reads a positive duration ("10s", "1h30m", "7d").
func (d *decoder) duration(n ast.Node, field string) (time.Duration, bool) {
	r, ok := d.resolve(n, field)
	if !ok || r == nil {
		return 0, false
	}
	var text string
	switch v := r.(type) {
	case *ast.StringNode:
		if text, ok = d.expand(v.Value, posOf(v), field); !ok {
			return 0, false
		}
	case *ast.IntegerNode, *ast.FloatNode:
		text = nodeText(v)
	default:
		d.typeErr(r, field, "a duration like 10s")
		return 0, false
	}
	dur, err := ParseDuration(text)
	if err != nil {
		if vars := d.fromVars(field); vars != "" {
			d.errAt(posOf(r), field, "want a duration like 10s, 5m or 7d, but the value from %s is not (the value is not shown)", vars)
		} else {
			d.errAt(posOf(r), field, "%v", err)
		}
		return 0, false
	}
	if dur <= 0 {
		if vars := d.fromVars(field); vars != "" {
			d.errAt(posOf(r), field, "the duration from %s must be positive (the value is not shown)", vars)
		} else {
			d.errAt(posOf(r), field, "duration %q must be positive", text)
		}
		return 0, false
	}
	return dur, true
}

// strMap reads a mapping of strings (query parameters, headers).
func (d *decoder) strMap(n ast.Node, field string, f func(key, value string, at pos)) map[string]string {
	es, ok := d.entries(n, field, 0)
	if !ok || len(es) == 0 {
		return nil
	}
	m := make(map[string]string, len(es))
	for _, e := range es {
		fp := join(field, e.key)
		if e.key == "" {
			d.errAt(e.at, fp, "empty name")
			continue
		}
		v, ok := d.str(e.value, fp)
		if !ok {
			if r, rok := d.resolve(e.value, fp); rok && r == nil {
				m[e.key] = "" // a null value is an empty string
			}
			continue
		}
		m[e.key] = v
		if f != nil {
			f(e.key, v, posOf(e.value))
		}
	}
	return m
}

// enum checks a value against its allowed set.
func (d *decoder) enum(n ast.Node, field, what string, allowed []string) (string, bool) {
	s, ok := d.str(n, field)
	if !ok {
		return "", false
	}
	if slices.Contains(allowed, s) {
		return s, true
	}
	if vars := d.fromVars(field); vars != "" { // no suggestion either: it would tell what the value is like
		d.errAt(posOf(n), field, "unknown %s: %s is none of %s (the value is not shown)", what, vars, orList(allowed))
		return "", false
	}
	msg := fmt.Sprintf("unknown %s %q (want %s)", what, s, orList(allowed))
	if sug := suggest(s, allowed); sug != "" {
		msg += fmt.Sprintf("; did you mean %q?", sug)
	}
	d.errAt(posOf(n), field, "%s", msg)
	return "", false
}

// strList reads a list of non-empty strings; check, when set, checks each one.
func (d *decoder) strList(n ast.Node, field, what string, check func(s string, at pos, ip string)) []string {
	var out []string
	d.list(n, field, func(i int, item ast.Node, ip string) {
		s, ok := d.str(item, ip)
		if !ok {
			if r, rok := d.resolve(item, ip); rok && r == nil {
				d.errAt(posOf(item), ip, "empty %s", what)
			}
			return
		}
		if s == "" {
			d.errAt(posOf(item), ip, "empty %s", what)
			return
		}
		if check != nil {
			check(s, posOf(item), ip)
		}
		out = append(out, s)
	})
	return out
}
