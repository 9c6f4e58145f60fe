package changeset

import (
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/go-json-experiment/json/jsontext"
	"pgregory.net/rapid"
)

// keys are the object keys drawn: Unicode, and the characters a JSON Pointer escapes. No empty
// key: evanphx/json-patch (v5.9.11), the independent implementation that applies the patches,
// loses a path through one ("//x" adds nothing to {"":{}}); TestPatchThroughAnEmptyKey checks
// that case by hand.
var keys = []string{"id", "a", "status", "ünï", "日本", "x/y", "t~1", "lines", "0", "a.b"}

// jsonValue draws a JSON document: nested objects and arrays, Unicode keys, strings, numbers
// written in several ways (1, 1.0, 1e2, -0, a 20-digit integer), booleans and null.
func jsonValue(depth int) *rapid.Generator[any] {
	scalar := rapid.OneOf(
		rapid.Just[any](nil),
		rapid.Map(rapid.Bool(), func(b bool) any { return b }),
		rapid.Map(rapid.SampledFrom([]string{"0", "1", "1.0", "1e2", "100", "-0", "2.50", "12345678901234567890", "-7", "0.1"}),
			func(s string) any { return json.Number(s) }),
		rapid.Map(rapid.StringOf(rapid.RuneFrom([]rune("abcé日本🙂 \"\\/~."))), func(s string) any { return s }),
	)
	if depth <= 0 {
		return scalar
	}
	key := rapid.SampledFrom(keys)
	return rapid.OneOf(
		scalar,
		rapid.Map(rapid.SliceOfN(jsonValue(depth-1), 0, 5), func(xs []any) any { return xs }),
		rapid.Map(rapid.MapOfN(key, jsonValue(depth-1), 0, 5), func(m map[string]any) any { return m }),
	)
}

// similar draws B near A: most of it kept, some values changed, added or removed, so patches
// are small as well as large.
func similar(t *rapid.T, a any, depth int) any {
	if rapid.IntRange(0, 9).Draw(t, "replace") == 0 {
		return jsonValue(depth).Draw(t, "new")
	}
	switch v := a.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			if rapid.IntRange(0, 7).Draw(t, "drop") > 0 {
				out[k] = similar(t, x, depth-1)
			}
		}
		if rapid.Bool().Draw(t, "add") {
			out[rapid.SampledFrom([]string{"new", "ünï", "a"}).Draw(t, "key")] = jsonValue(depth-1).Draw(t, "added")
		}
		return out
	case []any:
		var out []any
		for _, x := range v {
			if rapid.IntRange(0, 5).Draw(t, "keep") > 0 {
				out = append(out, similar(t, x, depth-1))
			}
			if rapid.IntRange(0, 5).Draw(t, "insert") == 0 {
				out = append(out, jsonValue(depth-1).Draw(t, "inserted"))
			}
		}
		return out
	}
	return a
}

func encode(t *rapid.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// object draws an item: a JSON object (an API's item always is one) of jsonValues.
func object(depth int) *rapid.Generator[any] {
	key := rapid.SampledFrom(keys)
	return rapid.Map(rapid.MapOfN(key, jsonValue(depth-1), 0, 6), func(m map[string]any) any { return m })
}

// For any items A and B, the patch applied to A by an independent RFC 6902 implementation
// (evanphx/json-patch) gives B exactly, numbers as written.
func TestPatchTurnsAIntoB(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := object(4).Draw(t, "a")
		b := similar(t, a, 4)
		if _, ok := b.(map[string]any); !ok {
			b = object(4).Draw(t, "b")
		}
		ja, jb := encode(t, a), encode(t, b)
		// An API may write its JSON indented: the walk reads past the white space, and a value
		// copied with its space inside is still JSON.
		if rapid.Bool().Draw(t, "indent a") {
			ja = indent(t, ja)
		}
		if rapid.Bool().Draw(t, "indent b") {
			jb = indent(t, jb)
		}
		patch, err := Patch(ja, jb)
		if err != nil {
			t.Fatalf("Patch: %v", err)
		}
		p, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			t.Fatalf("patch %s does not decode: %v", patch, err)
		}
		got, err := p.ApplyWithOptions(ja, &jsonpatch.ApplyOptions{SupportNegativeIndices: false, EnsurePathExistsOnAdd: false})
		if err != nil {
			t.Fatalf("patch %s does not apply to %s: %v", patch, ja, err)
		}
		if !Same(got, jb) {
			t.Fatalf("patch %s applied to %s gives %s, want %s", patch, ja, got, jb)
		}
		for _, o := range opsOf(t, patch) {
			if o.Op != "add" && o.Op != "remove" && o.Op != "replace" {
				t.Fatalf("patch %s has a %s operation: want add, remove and replace only", patch, o.Op)
			}
		}
		if bytes.Equal(ja, jb) && string(patch) != "[]" {
			t.Fatalf("equal documents give patch %s, want []", patch)
		}
	})
}

func indent(t *rapid.T, b []byte) []byte {
	var out bytes.Buffer
	if err := json.Indent(&out, b, " ", "\t"); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func opsOf(t *rapid.T, patch []byte) []op {
	var ops []op
	if err := json.Unmarshal(patch, &ops); err != nil {
		t.Fatal(err)
	}
	return ops
}

// An element inserted into a long array is one operation, not a replacement of every element
// after it.
func TestPatchOfAnArrayInsertIsOneOperation(t *testing.T) {
	a := []byte(`{"lines":[1,2,3,4,5,6,7,8,9,10]}`)
	b := []byte(`{"lines":[1,2,3,"new",4,5,6,7,8,9,10]}`)
	patch, err := Patch(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if string(patch) != `[{"op":"add","path":"/lines/3","value":"new"}]` {
		t.Errorf("patch %s, want one add at /lines/3", patch)
	}
}

func TestPatchKeepsNumbersAsWritten(t *testing.T) {
	patch, err := Patch([]byte(`{"n":1,"big":12345678901234567890,"z":null}`), []byte(`{"n":1.0,"big":12345678901234567891,"z":0}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"value":1.0`, `"value":12345678901234567891`, `{"op":"replace","path":"/z","value":0}`} {
		if !strings.Contains(string(patch), want) {
			t.Errorf("patch %s lacks %s", patch, want)
		}
	}
}

// A key may be empty: its pointer token is empty too (RFC 6901).
func TestPatchThroughAnEmptyKey(t *testing.T) {
	patch, err := Patch([]byte(`{"":{"t~1":{}}}`), []byte(`{"":{"t~1":{"new":1}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if string(patch) != `[{"op":"add","path":"//t~01/new","value":1}]` {
		t.Errorf("patch %s", patch)
	}
}

func TestIgnoreStripsPointersAndPaths(t *testing.T) {
	for _, tc := range []struct {
		fields []string
		in     string
		want   string
	}{
		{[]string{"/updated_at"}, `{"id":1,"updated_at":"t"}`, `{"id":1}`},
		{[]string{"meta.etag"}, `{"id":1,"meta":{"etag":"e","x":2}}`, `{"id":1,"meta":{"x":2}}`},
		{[]string{"/a.b"}, `{"a.b":1,"a":{"b":2}}`, `{"a":{"b":2}}`},
		{[]string{"/x~1y", "/t~0"}, `{"x/y":1,"t~":2,"k":3}`, `{"k":3}`},
		{[]string{"/lines/0"}, `{"lines":[1,2]}`, `{"lines":[2]}`},
		{[]string{"/missing"}, `{"id":1}`, `{"id":1}`},
	} {
		ig, err := ParseIgnore(tc.fields)
		if err != nil {
			t.Fatalf("%v: %v", tc.fields, err)
		}
		got, err := ig.Strip([]byte(tc.in))
		if err != nil || !Same(got, []byte(tc.want)) {
			t.Errorf("%v strips %s to %s (%v), want %s", tc.fields, tc.in, got, err, tc.want)
		}
	}
	for _, bad := range [][]string{{""}, {"/"}, {"/a~2"}, {"/a//b"}} {
		if _, err := ParseIgnore(bad); err == nil {
			t.Errorf("ParseIgnore(%q): no error", bad)
		}
	}
}

func TestLongestArray(t *testing.T) {
	for _, tc := range []struct {
		doc  string
		want int
	}{
		{`{}`, 0}, {`[]`, 0}, {`[ ]`, 0}, {`[1]`, 1}, {`{"a":[1,2,3],"b":{"c":[[1,2],[3]]}}`, 3},
		{`{"s":"[1,2,3,4]","a":[1,2]}`, 2}, {`{"s":"\"[,,,]","a":["x,y"]}`, 1}, {`[{"a":1,"b":2},{"c":3}]`, 2},
	} {
		if got := longestArray(tc.doc); got != tc.want {
			t.Errorf("longestArray(%s) = %d, want %d", tc.doc, got, tc.want)
		}
	}
}

// An object that names a member twice is read as a decoder reads it (the last one counts), and
// a name written with escapes is the name it decodes to: the patch applied to A gives B as
// decoded.
func TestPatchOfObjectsWithRepeatedOrEscapedNames(t *testing.T) {
	for _, tc := range []struct{ a, b, want string }{
		{`{"a":1,"a":2}`, `{"a":3,"a":2}`, `[]`},
		{`{"a":1,"a":2}`, `{"a":1,"a":3}`, `[{"op":"replace","path":"/a","value":3}]`},
		{`{"a":1,"b":1}`, `{"a":1,"b":1,"b":2}`, `[{"op":"replace","path":"/b","value":2}]`},
		{`{"\u0061":1}`, `{"a":2}`, `[{"op":"replace","path":"/a","value":2}]`},
		{`{"a":1,"\u0061":2}`, `{"a":1,"\u0061":5}`, `[{"op":"replace","path":"/a","value":5}]`},
		{`{"x\"y":1}`, `{"x\"y":2}`, `[{"op":"replace","path":"/x\"y","value":2}]`},
	} {
		patch, err := Patch([]byte(tc.a), []byte(tc.b))
		if err != nil {
			t.Fatalf("%s -> %s: %v", tc.a, tc.b, err)
		}
		p, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			t.Fatalf("%s -> %s: patch %s does not decode: %v", tc.a, tc.b, patch, err)
		}
		got, err := p.Apply([]byte(tc.a))
		if err != nil || !Same(got, []byte(tc.b)) {
			t.Errorf("%s -> %s: patch %s gives %s (%v)", tc.a, tc.b, patch, got, err)
		}
		if !Same(patch, []byte(tc.want)) {
			t.Errorf("%s -> %s: patch %s, want %s", tc.a, tc.b, patch, tc.want)
		}
	}
}

// namesOnce reports whether no object of doc names a member twice.
func namesOnce(doc string) bool {
	d := jsontext.NewDecoder(strings.NewReader(doc))
	for {
		if _, err := d.ReadToken(); err != nil {
			return err == io.EOF
		}
	}
}

// Any two JSON documents give a patch, and the patch applied to the first gives the second
// (where the independent implementation can apply it: see the test's return).
func FuzzPatch(f *testing.F) {
	for _, s := range [][2]string{
		{`{"a":1}`, `{"a":2}`},
		{`{"a":[1,2,{"b":"x"}]}`, `{ "a" : [ 2 , {"b":"y"} ] }`},
		{`{"a":1,"a":2}`, `{"\u0061":3}`},
		{"[1,\n2]", `[{"x":null},true,"s\"q"]`},
		{`"s"`, `{"k":{}}`},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if !json.Valid([]byte(a)) || !json.Valid([]byte(b)) {
			return
		}
		patch, err := Patch([]byte(a), []byte(b))
		if err != nil {
			t.Fatalf("Patch(%s, %s): %v", a, b, err)
		}
		p, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			t.Fatalf("patch %s does not decode: %v", patch, err)
		}
		if !namesOnce(a) || bytes.Contains(patch, []byte(`/"`)) || bytes.Contains(patch, []byte(`//`)) {
			return // evanphx/json-patch keeps both members of a repeated name, loses an empty key
		}
		got, err := p.Apply([]byte(a))
		if err == nil && !Same(got, []byte(b)) {
			t.Fatalf("patch %s applied to %s gives %s, want %s", patch, a, got, b)
		}
	})
}

// patchApplies checks that the patch from a to b is valid JSON and, applied to a by an independent applier,
// gives b.
func patchApplies(t *testing.T, a, b string) {
	t.Helper()
	patch, err := Patch([]byte(a), []byte(b))
	if err != nil {
		t.Errorf("%q -> %q: %v", a, b, err)
		return
	}
	if !json.Valid(patch) {
		t.Errorf("%q -> %q: patch %q is not valid JSON", a, b, patch)
		return
	}
	p, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		t.Errorf("%q -> %q: patch %s does not decode: %v", a, b, patch, err)
		return
	}
	got, err := p.Apply([]byte(a))
	if err != nil || !Same(got, []byte(b)) {
		t.Errorf("%q -> %q: patch %s gives %q (%v)", a, b, patch, got, err)
	}
}

// Documents as JSON allows them to be written: every white space kind
// between every token, escapes in names (\u0022, \\, \/, \u0000, surrogates), raw non-ASCII
// names, numbers as written, nested empties, >32 and >16 members, names that repeat a plain
// name with an escape. Fails if a patch is not valid JSON or does not give the second.
func TestPatchOfDocumentsWrittenEveryWayApplies(t *testing.T) {
	many := func(n, changed int, sep string) string {
		var b strings.Builder
		b.WriteString("{")
		for i := range n {
			if i > 0 {
				b.WriteString("," + sep)
			}
			v := strconv.Itoa(i)
			if i == changed {
				v = "-1"
			}
			b.WriteString(`"k` + strings.Repeat("x", i) + `"` + sep + ":" + sep + v)
		}
		return b.String() + "}"
	}
	for _, tc := range []struct{ a, b string }{
		{" \t\r\n{ \t\r\n\"a\" \t\r\n: \t\r\n[ \t\r\n1 \t\r\n, \t\r\n2 \t\r\n] \t\r\n, \"b\"\r:\n{ }\t}\r\n", `{"a":[1,3],"b":{"c":[]}}`},
		{"[\r1\r,\t2\n,\n3 ]", "[ 1 , 3 , 2 ]"},
		{`{"\u0022":1,"x":2}`, `{"\u0022":2,"x":2}`},
		{`{"\"":1}`, `{"\u0022":2}`},
		{`{"\\":1,"\/":2,"/":3}`, `{"\\":5,"\/":2,"/":4}`},
		{`{"a\\":{"b":1}}`, `{"a\\":{"b":2}}`},
		{`{"\\\"":1}`, `{"\\\"":2}`},
		{`{"\u0000":1}`, `{"\u0000":2}`},
		{`{"\ud83d\ude42":1,"🙂x":1}`, `{"🙂":2,"🙂x":2}`},
		{`{"\ud800":1}`, `{"\ud800":2}`},
		{`{"~":{"~1":1}}`, `{"~":{"~1":2,"/":3}}`},
		{`{"n":-0,"m":1E+2,"o":1e-2,"p":0.10}`, `{"n":0,"m":100,"o":1E-2,"p":0.1}`},
		{`{"a":[[],[[]],{}]}`, `{"a":[[[]],{},[]]}`},
		{`{"a":"x\"]}","b":1}`, `{"a":"x\"]}","b":2}`},
		{`["\\",{"]":"["}]`, `["\\\\",{"]":"[["}]`},
		{`{"a":1,"\u0061":2}`, `{"\u0061":1,"a":3}`},
		{`{"b":1,"a":2}`, `{"a":2,"b":3}`},
		{many(40, -1, ""), many(40, 35, "")},
		{many(40, -1, " \n"), many(40, 3, "\t")},
		{many(20, -1, ""), many(20, 17, "")},
		{`{"\u00e9":1,"é":2}`, `{"é":3}`},
		{`{"a":true,"b":false,"c":null}`, `{"a":null,"b":true,"c":false}`},
		{`[1,2,3]`, `[]`},
		{`[]`, `[1,{"a":[]}]`},
	} {
		patchApplies(t, tc.a, tc.b)
		patchApplies(t, tc.b, tc.a)
	}
}

// Names whose bytes are invalid UTF-8 (gjson accepts them): two different such names are the
// same U+FFFD name to any decoder. Fails if the patch does not give the second.
func TestPatchOfNamesInInvalidUTF8(t *testing.T) {
	patchApplies(t, "{\"\xff\":1,\"\xfe\":2}", "{\"\xff\":3,\"\xfe\":2}")
	patchApplies(t, "{\"a\xff\":1}", "{\"a\xff\":2}")
	patchApplies(t, "{\"a\":\"\xff\"}", "{\"a\":\"\xfe\"}")
}
