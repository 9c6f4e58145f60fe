package config

import (
	"strings"
	"testing"
)

// A listing paged by item offset names its offset parameter: page, the default of page
// numbers, would send the offset as a page number. The error names the file, the line and
// column of offset: true (or of the reconcile block) and the missing field.
func TestOffsetNeedsParam(t *testing.T) {
	const head = "pollers:\n  - name: orders\n    request: {url: https://api.example.com/orders}\n    delivery: {stdout: {}}\n"
	for _, tc := range []struct {
		name, entry, want string // want "": valid
	}{
		{"page by offset", "    cursor:\n      strategy: page\n      offset: true\n      size: 50\n",
			"w.yaml:7:7: pollers[0].cursor.param: required when offset is true"},
		{"snapshotDiff by offset, flow", "    cursor: {strategy: snapshotDiff, offset: true}\n",
			"w.yaml:5:38: pollers[0].cursor.param: required when offset is true"},
		{"empty param", "    cursor: {strategy: page, offset: true, param: \"\"}\n",
			"w.yaml:5:30: pollers[0].cursor.param: required when offset is true"},
		{"reconcile by offset", "    cursor: {strategy: timestamp, field: updated_at, param: since}\n    reconcile:\n      every: 1h\n      offset: true\n",
			"w.yaml:6:5: pollers[0].reconcile.param: required when offset is true"},
		{"offset with its param", "    cursor: {strategy: page, offset: true, param: offset}\n", ""},
		{"page numbers", "    cursor: {strategy: page}\n", ""},
		{"offset false", "    cursor: {strategy: snapshotDiff, offset: false}\n", ""},
		{"reconcile with its param", "    cursor: {strategy: token, param: cursor}\n    reconcile: {every: 1h, offset: true, param: skip}\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("w.yaml", []byte(head+tc.entry), envOf(nil))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("%v\n%s", err, tc.entry)
			case tc.want != "" && (err == nil || !strings.HasPrefix(err.Error(), tc.want) || strings.Count(err.Error(), "\n") > 0):
				t.Fatalf("got %v\nwant one error starting %q", err, tc.want)
			}
		})
	}
}
