package changeset

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/watukuy/watukuy/watukuytype"
)

// numbers is an item holding one array of n copies of v.
func arrayItem(n int, v string) []byte {
	return []byte(`{"xs":[` + strings.TrimSuffix(strings.Repeat(v+",", n), ",") + `]}`)
}

// The patch of an item that Changes.MaxBytes keeps costs memory in proportion to the item,
// not to the square of its arrays' lengths: a worker makes one for every updated event of
// every page, and an item of the default 64 KiB with an array of 32,000 numbers would take
// gigabytes.
func TestPatchOfALongArrayCostsInProportionToTheItem(t *testing.T) {
	const n = 4000 // 8 KB, an eighth of watukuytype.DefaultChangesMaxBytes
	prev, next := arrayItem(n, "0"), arrayItem(n, "1")
	if len(next) > watukuytype.DefaultChangesMaxBytes {
		t.Fatalf("the item (%d B) is not one MaxBytes keeps", len(next))
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if _, err := Patch(prev, next); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	if budget := uint64(1000 * len(next)); allocated > budget {
		t.Errorf("the patch of two %d-byte items allocated %d MB, more than %d MB (1,000 times the item): arrays diffed in quadratic memory",
			len(next), allocated>>20, budget>>20)
	}
}

// An Ignore field given as a JSON Pointer strips the member RFC 6901 names, and only it (a
// name with a brace; array tokens that are no index, "01" and "-1", name no element), or is
// refused when it is read: it never silently strips another member, or none.
func TestIgnorePointerStripsWhatRFC6901Names(t *testing.T) {
	for _, tc := range []struct {
		field, in, want string
	}{
		{"/{a}", `{"{a}":1,"b":2}`, `{"b":2}`},
		{"/x/01", `{"x":[5,6,7]}`, `{"x":[5,6,7]}`},
		{"/x/-1", `{"x":[5,6,7]}`, `{"x":[5,6,7]}`},
		{"/x/01", `{"x":{"01":5,"1":6}}`, `{"x":{"1":6}}`},
	} {
		ig, err := ParseIgnore([]string{tc.field})
		if err != nil {
			continue // refused where it is read
		}
		got, err := ig.Strip([]byte(tc.in))
		if err != nil || !Same(got, []byte(tc.want)) {
			t.Errorf("Ignore %s strips %s to %s (%v), want %s", tc.field, tc.in, got, err, tc.want)
		}
	}
}

// A dotted Ignore path strips the one field it names, or is refused when it is read: a name
// that opens like a gjson multipath ("{a}") or ends in a lone backslash never strips nothing,
// or another field.
func TestIgnoreDottedPathStripsTheFieldItNames(t *testing.T) {
	for _, tc := range []struct {
		field, in, want string
	}{
		{`{a}`, `{"{a}":1,"a":2}`, `{"a":2}`},
		{`[a]`, `{"[a]":1,"a":2}`, `{"a":2}`},
		{`a\`, `{"a\\":1,"a":{"b":2}}`, `{"a":{"b":2}}`},
	} {
		ig, err := ParseIgnore([]string{tc.field})
		if err != nil {
			continue // refused where it is read
		}
		got, err := ig.Strip([]byte(tc.in))
		if err != nil || !Same(got, []byte(tc.want)) {
			t.Errorf("Ignore %s strips %s to %s (%v), want %s", tc.field, tc.in, got, err, tc.want)
		}
	}
}

// Arrays longer than lcsMaxElements are diffed element by element: the patch still turns the
// one into the other exactly, whether the array shrinks, grows or keeps its length, and
// elements that are objects are diffed member by member.
func TestPatchOfArraysPastTheLCSBoundApplies(t *testing.T) {
	elems := func(n, changed int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(',')
			}
			v := i
			if i%changed == 0 {
				v = -i
			}
			fmt.Fprintf(&b, `{"n":%d,"s":"e%d"}`, v, i)
		}
		return `{"xs":[` + b.String() + `]}`
	}
	for _, tc := range []struct{ a, b string }{
		{elems(lcsMaxElements+100, 1000), elems(lcsMaxElements+50, 7)},
		{elems(lcsMaxElements+50, 1000), elems(lcsMaxElements+100, 7)},
		{elems(lcsMaxElements+1, 1000), elems(lcsMaxElements+1, 3)},
	} {
		patch, err := Patch([]byte(tc.a), []byte(tc.b))
		if err != nil {
			t.Fatal(err)
		}
		p, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			t.Fatalf("the patch does not decode: %v", err)
		}
		got, err := p.Apply([]byte(tc.a))
		if err != nil || !Same(got, []byte(tc.b)) {
			t.Fatalf("the patch of arrays of %d and %d elements does not give the second (%v)", strings.Count(tc.a, "{")-1, strings.Count(tc.b, "{")-1, err)
		}
		if strings.Contains(string(patch), `"path":"/xs/0"`) && !strings.Contains(string(patch), `"path":"/xs/0/n"`) {
			t.Errorf("a changed element is replaced whole, not diffed member by member")
		}
	}
}

// nested is an item n levels deep, objects {"a":…} or arrays […], around leaf.
func nested(n int, objects bool, leaf string) []byte {
	if objects {
		return []byte(strings.Repeat(`{"a":`, n) + leaf + strings.Repeat("}", n))
	}
	return []byte(strings.Repeat("[", n) + leaf + strings.Repeat("]", n))
}

// The patch of an item nested as deep as an item may be (encoding/json's 10,000 levels; a
// deeper one is parked as invalid) whose innermost value changed costs memory in proportion to
// the item: the walk goes walkDepth levels down and replaces what differs below. Fails past 1,000
// times the item (each level reads its value again: 10,000 levels allocated 100 MB for 20 KB).
func TestPatchOfADeeplyNestedItemCostsInProportionToTheItem(t *testing.T) {
	for _, objects := range []bool{false, true} {
		prev, next := nested(10000, objects, "0"), nested(10000, objects, "1")
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		patch, err := Patch(prev, next)
		if err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		if allocated, budget := after.TotalAlloc-before.TotalAlloc, uint64(1000*len(next)); allocated > budget {
			t.Errorf("objects %v: the patch of two %d-byte items allocated %d MB, more than %d MB (1,000 times the item)",
				objects, len(next), allocated>>20, budget>>20)
		}
		var ops []op
		if err := json.Unmarshal(patch, &ops); err != nil || len(ops) != 1 || ops[0].Op != "replace" || strings.Count(ops[0].Path, "/") != walkDepth {
			t.Errorf("objects %v: patch %.200s… (%v), want one replace %d levels down", objects, patch, err, walkDepth)
		}
	}
}

// Past walkDepth a changed value is replaced whole, and the patch still turns A into B.
func TestPatchBelowTheWalkDepthReplacesWhatDiffers(t *testing.T) {
	for _, objects := range []bool{false, true} {
		prev := nested(walkDepth+3, objects, `{"x":1,"y":2}`)
		next := nested(walkDepth+3, objects, `{"x":1,"y":3}`)
		patch, err := Patch(prev, next)
		if err != nil {
			t.Fatal(err)
		}
		p, err := jsonpatch.DecodePatch(patch)
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.Apply(prev)
		if err != nil || !Same(got, next) {
			t.Errorf("objects %v: patch %s gives %s (%v)", objects, patch, got, err)
		}
		if n := strings.Count(string(patch), `"op"`); n != 1 {
			t.Errorf("objects %v: patch %s has %d operations, want 1", objects, patch, n)
		}
	}
}
