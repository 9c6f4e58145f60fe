package httppoll

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	want := time.Date(2026, 11, 29, 10, 30, 0, 0, time.UTC)
	tests := []struct {
		v       string
		formats []string
		want    time.Time
	}{
		{"2026-11-29T10:30:00Z", nil, want},
		{"2026-11-29T11:30:00+01:00", nil, want},
		{"2026-11-29T10:30:00.250Z", nil, want.Add(250 * time.Millisecond)},
		{"1795948200", nil, want},
		{"1795948200000", nil, want},
		{"1795948200.5", []string{EpochS}, want.Add(500 * time.Millisecond)},
		{"1795948200000", []string{EpochMS}, want},
		{"2026-11-29 10:30:00", []string{"2006-01-02 15:04:05"}, want},
		{"29/11/2026 10:30", []string{RFC3339, "02/01/2006 15:04"}, want},
	}
	for _, tc := range tests {
		got, err := ParseTime(tc.v, tc.formats)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("Parse(%q, %v) = %v, %v; want %v", tc.v, tc.formats, got, err, tc.want)
		}
	}
	for _, bad := range []struct {
		v       string
		formats []string
	}{{"yesterday", nil}, {"", nil}, {"2026-13-01T00:00:00Z", nil}, {"2026-11-29", []string{RFC3339}}, {"NaN", []string{EpochS}}} {
		if got, err := ParseTime(bad.v, bad.formats); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", bad.v, got)
		}
	}
}
