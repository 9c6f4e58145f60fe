// Package changeset makes the change sets of updated events (Poller.Changes): the RFC 6902
// JSON Patch from an item as last emitted to the item now, and the item without the fields
// whose changes alone make no event. The diff is github.com/wI2L/jsondiff's.
package changeset

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
	"github.com/wI2L/jsondiff"
)

// Patch returns the JSON Patch (add, remove and replace operations) that turns prev into
// next: applied to prev, it gives next exactly, numbers as written (they are compared and
// copied as their text). Arrays are diffed by their longest common subsequence, so an
// element inserted or removed is one operation, not a replacement of every element after it.
// An empty patch is [].
//
// Documents are walked on their raw bytes (checked first by tidwall/gjson, then read by
// scan.go): a member or element written the same in both is skipped without being decoded,
// which is most of an updated item; jsondiff aligns arrays (diffArray), and diffs, decoded,
// only an object that names a member twice.
func Patch(prev, next []byte) (patch json.RawMessage, err error) {
	if !gjson.ValidBytes(prev) || !gjson.ValidBytes(next) {
		return nil, fmt.Errorf("changeset: diff: not valid JSON")
	}
	defer func() {
		// The readers trust gjson's check; were it ever laxer than they are, the event goes
		// without its patch rather than the worker down.
		if r := recover(); r != nil {
			patch, err = nil, fmt.Errorf("changeset: diff: %v", r)
		}
	}()
	var ops []op
	if err := diff(&ops, "", trimSpace(string(prev)), trimSpace(string(next)), 0); err != nil {
		return nil, err
	}
	return appendPatch(make([]byte, 0, 64*len(ops)+2), ops), nil
}

// appendPatch appends ops as RFC 6902 writes them: op, path, then value (which a replace by
// null keeps). A value goes as written in its document, white space included: the event's
// encoding compacts it.
func appendPatch(dst []byte, ops []op) []byte {
	dst = append(dst, '[')
	for i, o := range ops {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"op":"`...)
		dst = append(dst, o.Op...)
		dst = append(dst, `","path":`...)
		dst = appendString(dst, o.Path)
		if o.Value != nil {
			dst = append(dst, `,"value":`...)
			dst = append(dst, o.Value...)
		}
		dst = append(dst, '}')
	}
	return append(dst, ']')
}

// appendString appends s as a JSON string.
func appendString(dst []byte, s string) []byte {
	plain := utf8.ValidString(s)
	for i := 0; plain && i < len(s); i++ {
		plain = s[i] >= 0x20 && s[i] != '"' && s[i] != '\\'
	}
	if plain {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	b, _ := json.Marshal(s) // escapes; invalid UTF-8 becomes U+FFFD
	return append(dst, b...)
}

// walkDepth is how deep the walk goes: a value that differs below it is replaced whole. Each
// level reads its value's bytes again, so an item nested thousands deep would cost the square
// of its size; items nest a few levels.
const walkDepth = 64

// diff appends the operations that turn a into b at path, depth levels down; a and b are
// valid JSON values without surrounding space.
func diff(ops *[]op, path string, a, b string, depth int) error {
	if a == b {
		return nil
	}
	switch {
	case depth >= walkDepth:
		*ops = append(*ops, op{Op: jsondiff.OperationReplace, Path: path, Value: json.RawMessage(b)})
		return nil
	case a[0] == '[' && b[0] == '[':
		return diffArray(ops, path, elements(a), elements(b), depth)
	case a[0] != '{' || b[0] != '{':
		// Scalars, or values of two kinds: the new one in place of the old, as written.
		*ops = append(*ops, op{Op: jsondiff.OperationReplace, Path: path, Value: json.RawMessage(b)})
		return nil
	}
	if plainSameNames(a, b) { // the usual update: the same members, in the same order
		ia, ib := objectScanner(a), objectScanner(b)
		for {
			name, va, ok := ia.next()
			if !ok {
				return nil
			}
			_, vb, _ := ib.next()
			if va == vb {
				continue // most members: no path made
			}
			if err := diff(ops, path+"/"+escapeToken(name[1:len(name)-1]), va, vb, depth+1); err != nil {
				return err
			}
		}
	}
	am, bm := members(a), members(b)
	if !unique(am) || !unique(bm) {
		return diffDecoded(ops, path, a, b) // a name given twice: as a decoder reads it
	}
	byName := make(map[string]string, len(bm))
	for _, m := range bm {
		byName[m.name] = m.v
	}
	inA := make(map[string]bool, len(am))
	for _, m := range am {
		inA[m.name] = true
		at := path + "/" + escapeToken(m.name)
		if bv, ok := byName[m.name]; ok {
			if err := diff(ops, at, m.v, bv, depth+1); err != nil {
				return err
			}
		} else {
			*ops = append(*ops, op{Op: jsondiff.OperationRemove, Path: at})
		}
	}
	for _, m := range bm {
		if !inA[m.name] {
			*ops = append(*ops, op{Op: jsondiff.OperationAdd, Path: path + "/" + escapeToken(m.name), Value: json.RawMessage(m.v)})
		}
	}
	return nil
}

// diffArray appends the operations that turn array a into array b at path. jsondiff aligns the
// elements by their longest common subsequence, each element standing for its bytes (so
// nothing is decoded); the elements it pairs that differ are diffed in turn, on their bytes. An
// array longer than lcsMaxElements is diffed element by element instead. depth is the array's.
func diffArray(ops *[]op, path string, a, b []string, depth int) error {
	if max(len(a), len(b)) > lcsMaxElements {
		for i := range min(len(a), len(b)) {
			if err := diff(ops, path+"/"+strconv.Itoa(i), a[i], b[i], depth+1); err != nil {
				return err
			}
		}
		for i := len(a) - 1; i >= len(b); i-- {
			*ops = append(*ops, op{Op: jsondiff.OperationRemove, Path: path + "/" + strconv.Itoa(i)})
		}
		for i := len(a); i < len(b); i++ {
			*ops = append(*ops, op{Op: jsondiff.OperationAdd, Path: path + "/" + strconv.Itoa(i), Value: json.RawMessage(b[i])})
		}
		return nil
	}
	src, tgt := make([]any, len(a)), make([]any, len(b))
	for i, e := range a {
		src[i] = e
	}
	for i, e := range b {
		tgt[i] = e
	}
	p, err := jsondiff.CompareWithoutMarshal(src, tgt, jsondiff.LCS())
	if err != nil {
		return fmt.Errorf("changeset: diff: %w", err)
	}
	// The operations apply in turn: cur is the array as the ones so far left it (a is this
	// call's own).
	cur := a
	for _, o := range p {
		i, err := strconv.Atoi(strings.TrimPrefix(o.Path, "/"))
		raw, isRaw := o.Value.(string)
		if err != nil || i < 0 || i > len(cur) || o.Type != jsondiff.OperationRemove && !isRaw {
			return fmt.Errorf("changeset: diff: unexpected operation %s %s", o.Type, o.Path)
		}
		at := path + "/" + strconv.Itoa(i)
		switch {
		case o.Type == jsondiff.OperationAdd:
			*ops = append(*ops, op{Op: o.Type, Path: at, Value: json.RawMessage(raw)})
			cur = slices.Insert(cur, i, raw)
		case o.Type == jsondiff.OperationRemove && i < len(cur):
			*ops = append(*ops, op{Op: o.Type, Path: at})
			cur = slices.Delete(cur, i, i+1)
		case o.Type == jsondiff.OperationReplace && i < len(cur):
			if err := diff(ops, at, cur[i], raw, depth+1); err != nil {
				return err
			}
			cur[i] = raw
		default:
			return fmt.Errorf("changeset: diff: unexpected operation %s %s", o.Type, o.Path)
		}
	}
	return nil
}

// member is one member of an object: its name (decoded) and value (raw).
type member struct {
	name, v string
}

// members reads o's members, in order.
func members(o string) []member {
	var ms []member
	it := objectScanner(o)
	for {
		name, v, ok := it.next()
		if !ok {
			return ms
		}
		ms = append(ms, member{unquote(name), v})
	}
}

// unique reports whether no name is given twice.
func unique(ms []member) bool {
	if len(ms) <= 16 { // most objects: no map
		for i := range ms {
			for j := range i {
				if ms[i].name == ms[j].name {
					return false
				}
			}
		}
		return true
	}
	seen := make(map[string]bool, len(ms))
	for _, m := range ms {
		if seen[m.name] {
			return false
		}
		seen[m.name] = true
	}
	return true
}

// escapeToken writes a name as an RFC 6901 reference token.
func escapeToken(k string) string {
	if !strings.ContainsAny(k, "~/") {
		return k
	}
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

// diffDecoded diffs two objects one of which names a member twice with jsondiff, decoded, its
// paths under path.
func diffDecoded(ops *[]op, path, a, b string) error {
	opts := []jsondiff.Option{jsondiff.UnmarshalFunc(decode)}
	if max(longestArray(a), longestArray(b)) <= lcsMaxElements {
		opts = append(opts, jsondiff.LCS())
	}
	p, err := jsondiff.CompareJSON([]byte(a), []byte(b), opts...)
	if err != nil {
		return fmt.Errorf("changeset: diff: %w", err)
	}
	for _, o := range p {
		x := op{Op: o.Type, Path: path + o.Path}
		if o.Type != jsondiff.OperationRemove {
			v, err := json.Marshal(o.Value)
			if err != nil {
				return fmt.Errorf("changeset: encode the value at %s: %w", x.Path, err)
			}
			x.Value = v
		}
		*ops = append(*ops, x)
	}
	return nil
}

// op is one operation of a patch (appendPatch writes them); Value is nil for a remove.
type op struct {
	Op, Path string
	Value    json.RawMessage
}

// lcsMaxElements bounds the arrays diffed by longest common subsequence, whose table grows with
// the product of the two arrays' lengths (an 8 KB array of 4,000 numbers took 128 MB): longer
// ones are diffed element by element, a correct patch that replaces what shifted.
const lcsMaxElements = 512

// longestArray is the element count of the longest array in doc (0 without one): one pass
// over the bytes, strings skipped.
func longestArray(doc string) int {
	var counts []int // per open container: elements so far, -1 for an object
	longest := 0
	for i := 0; i < len(doc); i++ {
		switch doc[i] {
		case '"':
			i = stringEnd(doc, i) - 1
		case '[':
			counts = append(counts, 0)
			if j := skip(doc, i+1); j < len(doc) && doc[j] != ']' {
				counts[len(counts)-1] = 1
			}
		case '{':
			counts = append(counts, -1)
		case ',':
			if n := len(counts); n > 0 && counts[n-1] >= 0 {
				counts[n-1]++
			}
		case ']', '}':
			if n := len(counts); n > 0 {
				longest = max(longest, counts[n-1])
				counts = counts[:n-1]
			}
		}
	}
	return longest
}

// Same reports whether a and b are the same JSON value, numbers compared as written (1.0 is
// not 1): what a patch applied to the item before must give.
func Same(a, b []byte) bool {
	var x, y any
	return decode(a, &x) == nil && decode(b, &y) == nil && reflect.DeepEqual(x, y)
}

// decode reads JSON into maps, slices, strings, bools, nil and json.Number (numbers as their
// text: 1e400, 12345678901234567890 and 1.10 stay what the API wrote), as encoding/json with
// UseNumber would, from jsontext's tokens: one pass over the bytes instead of its two. A name
// given twice keeps its last value; invalid UTF-8 is taken as it is (both as encoding/json).
func decode(b []byte, v any) error {
	d := jsontext.NewDecoder(bytes.NewReader(b), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	x, err := readValue(d)
	if err != nil {
		return err
	}
	p, ok := v.(*any)
	if !ok {
		return fmt.Errorf("changeset: decode into %T", v)
	}
	*p = x
	return nil
}

func readValue(d *jsontext.Decoder) (any, error) {
	t, err := d.ReadToken()
	if err != nil {
		return nil, err
	}
	switch t.Kind() {
	case '{':
		m := map[string]any{}
		for d.PeekKind() != '}' {
			name, err := d.ReadToken()
			if err != nil {
				return nil, err
			}
			if m[name.String()], err = readValue(d); err != nil {
				return nil, err
			}
		}
		_, err := d.ReadToken()
		return m, err
	case '[':
		a := []any{}
		for d.PeekKind() != ']' {
			x, err := readValue(d)
			if err != nil {
				return nil, err
			}
			a = append(a, x)
		}
		_, err := d.ReadToken()
		return a, err
	case '"':
		return t.String(), nil
	case '0':
		return json.Number(t.String()), nil
	case 't', 'f':
		return t.Bool(), nil
	}
	return nil, nil // null
}

// Ignore is a list of fields to leave out of an item: JSON Pointers (RFC 6901) and gjson-style
// dotted paths.
type Ignore struct {
	paths []string // sjson paths
}

// ParseIgnore reads fields: "/a/b" is a JSON Pointer, anything else a gjson-style dotted path
// ("a.b", with \. for a dot in a name). An empty field or a pointer to the whole item is an
// error.
func ParseIgnore(fields []string) (Ignore, error) {
	var ig Ignore
	for _, f := range fields {
		switch {
		case f == "" || f == "/":
			return Ignore{}, fmt.Errorf("%q: name a field, not the whole item", f)
		case strings.HasPrefix(f, "/"):
			p, err := fromPointer(f)
			if err != nil {
				return Ignore{}, err
			}
			ig.paths = append(ig.paths, p)
		default:
			if err := plainPath(f); err != nil {
				return Ignore{}, err
			}
			ig.paths = append(ig.paths, f)
		}
	}
	return ig, nil
}

// Empty reports whether nothing is ignored.
func (ig Ignore) Empty() bool { return len(ig.paths) == 0 }

// Strip returns item without the ignored fields (item itself when it has none of them).
func (ig Ignore) Strip(item []byte) ([]byte, error) {
	out := item
	for _, p := range ig.paths {
		b, err := sjson.DeleteBytes(out, p)
		if err != nil {
			return nil, fmt.Errorf("changeset: leave out %s: %w", p, err)
		}
		out = b
	}
	return out, nil
}

// syntax are the characters gjson reads as more than a name: a dotted path that holds one
// unescaped (a wildcard, a query, a modifier) names no single field to leave out.
const syntax = `*?|#@!=<>%:`

// plainPath checks a dotted path: names separated by dots, a dot or a syntax character in a
// name escaped with a backslash.
func plainPath(f string) error {
	for i := 0; i < len(f); i++ {
		switch c := f[i]; {
		case c == '\\':
			if i == len(f)-1 {
				return fmt.Errorf("%q: a backslash escapes nothing at the end", f)
			}
			i++ // the next character is part of the name
		case strings.IndexByte(syntax, c) >= 0:
			return fmt.Errorf("%q: %q is gjson syntax (a wildcard, query or modifier), which names no single field; escape it (\\%c) or write a JSON Pointer", f, c, c)
		case c == '.' && (i == 0 || i == len(f)-1 || f[i+1] == '.'):
			return fmt.Errorf("%q: an empty name", f)
		case (c == '{' || c == '[') && (i == 0 || f[i-1] == '.'):
			return fmt.Errorf("%q: a name that starts with %c is gjson syntax; escape it (\\%c) or write a JSON Pointer", f, c, c)
		}
	}
	return nil
}

var (
	index   = regexp.MustCompile(`^(0|[1-9][0-9]*)$`) // RFC 6901's array index
	numeric = regexp.MustCompile(`^[-+]?[0-9]+$`)
)

// fromPointer turns a JSON Pointer into an sjson path: each reference token unescaped (~1 is
// /, ~0 is ~) and the characters sjson reads as syntax escaped.
func fromPointer(ptr string) (string, error) {
	tokens := strings.Split(ptr[1:], "/")
	for i, t := range tokens {
		if strings.Contains(strings.ReplaceAll(strings.ReplaceAll(t, "~0", ""), "~1", ""), "~") {
			return "", fmt.Errorf("%q: ~ must be followed by 0 or 1 (RFC 6901)", ptr)
		}
		t = strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
		if t == "" {
			return "", fmt.Errorf("%q: an empty reference token", ptr)
		}
		switch {
		case index.MatchString(t):
			tokens[i] = t // an array index, or an object's key (sjson reads a number as both)
			continue
		case numeric.MatchString(t):
			// "01", "-1": RFC 6901 names an object's key only; sjson would read an array index.
			return "", fmt.Errorf("%q: reference token %q is a number an array index is not: not supported", ptr, t)
		}
		var b strings.Builder
		for _, r := range t {
			if r == '.' || r == '\\' || strings.ContainsRune(syntax+"{}[]", r) {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		tokens[i] = b.String()
	}
	return strings.Join(tokens, "."), nil
}
