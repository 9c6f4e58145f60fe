package diff

import (
	"fmt"
	"testing"
)

func TestRowRoundTrip(t *testing.T) {
	for _, schema := range []int{0, 1, 127, 128, 1 << 20} {
		r := Row{VF: VersionFingerprint("v1", []byte("fp")), Schema: schema, Version: "2026-11-29T10:00:00Z",
			Changes: uint64(schema) + 3, Life: 1_800_000_000_123, Missing: 1}
		b := AppendRow(nil, r)
		got, ok := ParseRow(b)
		if !ok || got != r {
			t.Fatalf("schema %d: round trip gave %+v ok=%v", schema, got, ok)
		}
	}
	if n := len(AppendRow(nil, Row{Schema: 1, Version: "42", Changes: 5})); n != 13 {
		t.Fatalf("a row of schema 1, 5 changes and version \"42\" takes %d bytes, want 9 + 2 + 2", n)
	}
	if n := len(AppendRow(nil, Row{Schema: 1, Version: "42"})); n != 11 {
		t.Fatalf("a row without counts takes %d bytes, want 9 + 2", n)
	}
	// Every combination of counts round-trips, and so does a version that starts like a marker.
	for _, r := range []Row{{Changes: 1}, {Life: 7}, {Missing: 2}, {Changes: 3, Missing: 1}, {Version: "\xffodd"}, {Version: "\xf5odd"}, {Life: 9, Version: "v"},
		{Forgotten: true}, {Forgotten: true, Version: "\xf5odd"}, {Forgotten: true, Changes: 4, Life: 2, Missing: 1, Version: "7"}} {
		if got, ok := ParseRow(AppendRow(nil, r)); !ok || got != r {
			t.Errorf("round trip of %+v gave %+v ok=%v", r, got, ok)
		}
	}
	// Rows written before change counts existed still parse, with a count of 0.
	old := append(append(make([]byte, 8), 1), "2026-11-29T10:00:00Z"...)
	if got, ok := ParseRow(old); !ok || got.Schema != 1 || got.Version != "2026-11-29T10:00:00Z" || got.Changes != 0 || got.Life != 0 {
		t.Fatalf("a layout-2 row parsed as %+v ok=%v", got, ok)
	}
	for _, bad := range [][]byte{nil, make([]byte, 8), append(make([]byte, 8), 0x80), append(make([]byte, 8), 0, rowMarker|hasChanges, 0x80)} {
		if _, ok := ParseRow(bad); ok {
			t.Errorf("ParseRow(%x) accepted a corrupt row", bad)
		}
	}
}

func TestClassify(t *testing.T) {
	a := VersionFingerprint("1", []byte("a"))
	b := VersionFingerprint("2", []byte("a"))
	c := VersionFingerprint("1", []byte("c"))
	rowA1 := &Row{VF: a, Schema: 1, Version: "1"}
	tests := []struct {
		name    string
		stored  *Row
		vf      VF
		version string
		schema  int
		emit    bool
		want    Kind
	}{
		{"no row", nil, a, "1", 1, false, Created},
		{"forgotten row, same hash", &Row{VF: a, Schema: 1, Version: "1", Forgotten: true}, a, "1", 1, false, Created},
		{"same", rowA1, a, "1", 1, false, Unchanged},
		{"new version", rowA1, b, "2", 1, false, Updated},
		{"schema bump, same hash", rowA1, a, "1", 2, true, Rebaseline},
		{"schema bump, same version, new hash, rebaseline", rowA1, c, "1", 2, false, Rebaseline},
		{"schema bump, same version, new hash, emit", rowA1, c, "1", 2, true, Updated},
		{"schema bump, new version: a real change", rowA1, b, "2", 2, false, Updated},
		{"schema bump, version written another way", &Row{VF: a, Schema: 1, Version: "2026-01-01T10:00:01Z"}, c, "2026-01-01T10:00:01.000Z", 2, false, Rebaseline},
		{"schema bump, a version where the row had none", &Row{VF: a, Schema: 1}, c, "7", 2, false, Rebaseline},
		{"schema bump, another opaque version", &Row{VF: a, Schema: 1, Version: "abc"}, c, "abd", 2, false, Updated},
		{"schema bump, an older version: a restore", &Row{VF: a, Schema: 1, Version: "5"}, c, "4", 2, false, Updated},
		{"schema bump, seconds to milliseconds", &Row{VF: a, Schema: 1, Version: "1767261601"}, c, "1767261601000", 2, false, Rebaseline},
		{"schema bump, RFC 3339 to seconds", &Row{VF: a, Schema: 1, Version: "2026-01-01T10:00:01Z"}, c, "1767261601", 2, false, Rebaseline},
		{"schema bump, the version dropped", &Row{VF: a, Schema: 1, Version: "7"}, c, "", 2, false, Rebaseline},
		{"schema bump, a counter past 99", &Row{VF: a, Schema: 1, Version: "99"}, c, "100", 2, false, Updated},
	}
	for _, tc := range tests {
		if got := Classify(tc.stored, tc.vf, tc.version, tc.schema, tc.emit); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestVersionFingerprintIsUnambiguous(t *testing.T) {
	if VersionFingerprint("ab", []byte("c")) == VersionFingerprint("a", []byte("bc")) {
		t.Fatal("(ab, c) and (a, bc) share a hash")
	}
}

func TestEventIDDependsOnEveryInput(t *testing.T) {
	vf := VersionFingerprint("1", []byte("x"))
	base := EventID("orders", "t1", "42", "created", vf, 1, 0, 1)
	if base != EventID("orders", "t1", "42", "created", vf, 1, 0, 1) {
		t.Fatal("EventID is not deterministic")
	}
	others := []string{
		EventID("orders2", "t1", "42", "created", vf, 1, 0, 1),
		EventID("orders", "t2", "42", "created", vf, 1, 0, 1),
		EventID("orders", "t1", "43", "created", vf, 1, 0, 1),
		EventID("orders", "t1", "42", "updated", vf, 1, 0, 1),
		EventID("orders", "t1", "42", "created", VersionFingerprint("2", []byte("x")), 1, 0, 1),
		EventID("orders", "t1", "42", "created", vf, 2, 0, 1),
		EventID("orders", "t14", "2", "created", vf, 1, 0, 1),
		EventID("orders", "t1", "42", "created", vf, 1, 0, 3),                 // the same content, a later change
		EventID("orders", "t1", "42", "created", vf, 1, 1_800_000_000_000, 1), // a later life
	}
	for i, o := range others {
		if o == base {
			t.Errorf("variant %d has the same id as the base", i)
		}
	}
}

func ExampleEventID() {
	vf := VersionFingerprint("2026-11-29T10:00:00Z", []byte("fingerprint"))
	fmt.Println(len(EventID("orders", "t_1", "A-1001", "created", vf, 1, 0, 1)))
	// Output: 35
}

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
		ok   bool
	}{
		{"1", "2", -1, true},
		{"10", "9", 1, true},
		{"007", "7", 0, true},
		{"123456789012345678901234567890", "123456789012345678901234567891", -1, true},
		{"2026-11-30T10:00:00Z", "2026-11-30T10:00:01Z", -1, true},
		{"2026-11-30T10:00:00.5+01:00", "2026-11-30T09:00:00Z", 1, true},
		{"2026-11-30T10:00:00Z", "2026-11-30T10:00:00.000Z", 0, true},
		{"-1", "2", 0, false},
		{"1.5", "2", 0, false},
		{"9e107d9d372bb6826bd81d3542a419d6", "e4d909c290d0fb1ca068ffaddf22cbd0", 0, false},
		{"7", "2026-11-30T10:00:00Z", 0, false},
		{"", "1", 0, false},
	} {
		got, ok := CompareVersions(tc.a, tc.b)
		if got != tc.want || ok != tc.ok {
			t.Errorf("CompareVersions(%q, %q) = %d, %v; want %d, %v", tc.a, tc.b, got, ok, tc.want, tc.ok)
		}
	}
}
