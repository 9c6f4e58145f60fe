package config

import (
	"github.com/watukuy/watukuy/internal/changeset"
)

// checkIgnore checks one field of changes.ignore the way the engine reads it, so a bad pointer
// is an error at its own line rather than at Register.
func checkIgnore(d *decoder, _ *pollerState, s string, at pos, fp string) {
	if _, err := changeset.ParseIgnore([]string{s}); err != nil {
		d.errAt(at, fp, "want a JSON Pointer (/updated_at) or a dotted path (meta.etag): %v", err)
	}
}

func buildChanges(b *builder) error {
	c := b.pc.Changes
	b.p.Changes.Patch, b.p.Changes.Ignore, b.p.Changes.MaxBytes = c.Patch, c.Ignore, c.MaxBytes
	return nil
}
