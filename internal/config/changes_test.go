package config

import (
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/watukuytype"
)

// withChanges is valid with keys added under the poller entry.
func withChanges(keys string) string {
	return strings.Replace(valid, "  request:", "  "+keys+"\n    request:", 1)
}

// TestChangesKeysReachTheBuiltPoller: patch, ignore (a pointer and a dotted path) and maxBytes
// decode into the file's poller and set watukuytype.Poller.Changes as written.
func TestChangesKeysReachTheBuiltPoller(t *testing.T) {
	src := withChanges(`changes: {patch: true, ignore: ["/updated_at", "meta.etag", "/a~1b/0"], maxBytes: 4096}`)
	cfg, err := Parse("w.yaml", []byte(src), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := Changes{Patch: true, Ignore: []string{"/updated_at", "meta.etag", "/a~1b/0"}, MaxBytes: 4096}
	if got := cfg.Pollers[0].Changes; !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}
	ps, err := Build(cfg, nil, io.Discard, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	built := watukuytype.Changes{Patch: true, Ignore: []string{"/updated_at", "meta.etag", "/a~1b/0"}, MaxBytes: 4096}
	if got := ps[0].Changes; !reflect.DeepEqual(got, built) {
		t.Fatalf("built %+v, want %+v", got, built)
	}
}

// TestChangesDefaults: without the block the poller makes no change sets; with patch alone it
// ignores nothing and keeps items up to the engine's 64 KiB.
func TestChangesDefaults(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		patch     bool
	}{
		{"no block", valid, false},
		{"empty block", withChanges("changes: {}"), false},
		{"patch alone", withChanges("changes:\n      patch: true"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Parse("w.yaml", []byte(tc.src), envOf(nil))
			if err != nil {
				t.Fatal(err)
			}
			ps, err := Build(cfg, nil, io.Discard, nil, zerolog.Nop())
			if err != nil {
				t.Fatal(err)
			}
			if got, want := ps[0].Changes, (watukuytype.Changes{Patch: tc.patch}); !reflect.DeepEqual(got, want) {
				t.Fatalf("built %+v, want %+v", got, want)
			}
			p, err := core.WithDefaults(ps[0])
			if err != nil {
				t.Fatal(err)
			}
			if p.Changes.MaxBytes != watukuytype.DefaultChangesMaxBytes {
				t.Fatalf("maxBytes left out: the engine keeps items up to %d bytes, want %d", p.Changes.MaxBytes, watukuytype.DefaultChangesMaxBytes)
			}
		})
	}
}

// TestChangesErrors: a field of ignore the engine could not read, or a maxBytes below 1, is an
// error at its own line and column, naming the element.
func TestChangesErrors(t *testing.T) {
	for _, tc := range []struct{ name, keys, want string }{
		{"bad escape in a pointer", `changes: {ignore: ["/updated_at", "/meta/a~2b"]}`,
			`w.yaml:3:39: pollers[0].changes.ignore[1]: want a JSON Pointer (/updated_at) or a dotted path (meta.etag): "/meta/a~2b": ~ must be followed by 0 or 1 (RFC 6901)`},
		{"empty reference token", `changes: {ignore: ["/meta//etag"]}`,
			`w.yaml:3:24: pollers[0].changes.ignore[0]: want a JSON Pointer (/updated_at) or a dotted path (meta.etag): "/meta//etag": an empty reference token`},
		{"the whole item", `changes: {ignore: ["/"]}`,
			`w.yaml:3:24: pollers[0].changes.ignore[0]: want a JSON Pointer (/updated_at) or a dotted path (meta.etag): "/": name a field, not the whole item`},
		{"empty field", `changes: {ignore: [""]}`, `w.yaml:3:24: pollers[0].changes.ignore[0]: empty field`},
		{"not a list", `changes: {ignore: /updated_at}`, `w.yaml:3:23: pollers[0].changes.ignore: want a list, got string "/updated_at"`},
		{"maxBytes zero", `changes: {patch: true, maxBytes: 0}`, `w.yaml:3:38: pollers[0].changes.maxBytes: must be at least 1, got 0`},
		{"patch not a boolean", `changes: {patch: yes please}`, `w.yaml:3:22: pollers[0].changes.patch: want true or false, got string "yes please"`},
		{"misspelt key", `changes: {maxbytes: 10}`, `w.yaml:3:15: pollers[0].changes.maxbytes: unknown key "maxbytes" (did you mean "maxBytes"?)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("w.yaml", []byte(withChanges(tc.keys)), envOf(nil))
			if err == nil || err.Error() != tc.want {
				t.Errorf("got:\n%v\nwant:\n%s", err, tc.want)
			}
		})
	}
}
