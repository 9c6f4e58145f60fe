// Package diff decides what changed: it hashes an observation's version and fingerprint
// (the fingerprint is usually an item's RFC 8785 hash, see package jcs), keeps the compact
// per-identity rows stored in Redis, and derives the deterministic event ids of guarantee G2.
package diff

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// VFSize is the size of the stored version/fingerprint hash. 64 bits keep a row at 9 bytes;
// a missed change needs two versions of one identity to collide (p ≈ 2^-64).
const VFSize = 8

// VF is the stored hash of an observation's (version, fingerprint).
type VF [VFSize]byte

// Hex renders the hash as 16 hex digits.
func (v VF) Hex() string { return hex.EncodeToString(v[:]) }

// VersionFingerprint hashes an observation's version and fingerprint, length-prefixed so
// that no two different pairs share an encoding.
func VersionFingerprint(version string, fingerprint []byte) VF {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	h.Write(n[:binary.PutUvarint(n[:], uint64(len(version)))])
	h.Write([]byte(version))
	h.Write(fingerprint)
	var sum [sha256.Size]byte
	var vf VF
	copy(vf[:], h.Sum(sum[:0]))
	return vf
}

// Row is what Redis keeps per tracked identity.
type Row struct {
	VF     VF
	Schema int
	// Version is the last version seen, so that a deleted event can name it.
	Version string
	// Changes counts the events emitted for the identity in its current life; it is part of
	// every event id, so content that comes back (A→B→A) gets a new id (G2: an id names one
	// change, not one content).
	Changes uint64
	// Life is 0 for an identity's first life, then the generation of the deletion that ended
	// the previous one (kept meanwhile in a tombstone), so a re-created identity never
	// repeats the ids of an earlier life.
	Life int64
	// Missing counts the consecutive complete listings that did not show the identity; it is
	// deleted once enough of them agree (G6).
	Missing int
	// Forgotten marks a row whose content an operator dropped (reset-cursor --clear-snapshot):
	// the next observation is created again, while the life and the count go on and a
	// listing that misses the identity still deletes it.
	Forgotten bool
}

// A row that carries Changes, Life or Missing has, after the schema varint, a marker byte
// 0xF8 | flags saying which of them follow (as uvarints, in that order; a zero is left out).
// A forgotten row has the byte 0xF5 before that. A row without them holds the version text
// there, which is UTF-8 and so never starts with a byte of 0xF5 or more (a version that does
// gets the marker with no flags).
const (
	rowMarker  = 0xF8
	hasChanges = 1
	hasLife    = 2
	hasMissing = 4

	forgottenMarker = 0xF5
)

// AppendRow encodes r compactly: the 8-byte hash, the schema version as a uvarint, the marker
// and the non-zero counts, then the version text.
func AppendRow(dst []byte, r Row) []byte {
	dst = append(dst, r.VF[:]...)
	dst = binary.AppendUvarint(dst, uint64(r.Schema))
	counts := [3]uint64{r.Changes, uint64(r.Life), uint64(r.Missing)} // hasChanges, hasLife, hasMissing
	flags := byte(0)
	for i, v := range counts {
		if v != 0 {
			flags |= 1 << i
		}
	}
	if r.Forgotten {
		dst = append(dst, forgottenMarker)
	}
	if flags != 0 || len(r.Version) > 0 && r.Version[0] >= forgottenMarker {
		dst = append(dst, rowMarker|flags)
		for _, v := range counts {
			if v != 0 {
				dst = binary.AppendUvarint(dst, v)
			}
		}
	}
	return append(dst, r.Version...)
}

// ParseRow decodes a stored row; ok is false for a missing or corrupt one.
func ParseRow(b []byte) (r Row, ok bool) {
	if len(b) <= VFSize {
		return Row{}, false
	}
	copy(r.VF[:], b)
	b = b[VFSize:]
	s, n := binary.Uvarint(b)
	if n <= 0 {
		return Row{}, false
	}
	r.Schema = int(s)
	b = b[n:]
	if len(b) > 0 && b[0] == forgottenMarker {
		r.Forgotten, b = true, b[1:]
	}
	if len(b) > 0 && b[0] >= rowMarker {
		flags := b[0] &^ rowMarker
		b = b[1:]
		var vs [3]uint64
		for i := range vs {
			if flags&(1<<i) == 0 {
				continue
			}
			if vs[i], n = binary.Uvarint(b); n <= 0 {
				return Row{}, false
			}
			b = b[n:]
		}
		r.Changes, r.Life, r.Missing = vs[0], int64(vs[1]), int(vs[2])
	}
	r.Version = string(b)
	return r, true
}

// Kind is the outcome of comparing an observation with the stored row.
type Kind int

const (
	// Unchanged: same version and fingerprint under the same schema; no event, no write (G7).
	Unchanged Kind = iota
	// Created: the identity has no stored row, or a forgotten one.
	Created
	// Updated: the version or fingerprint differs.
	Updated
	// Rebaseline: only the schema version moved; the row is rewritten without an event.
	Rebaseline
)

// Classify compares an observation (vf and version under schema) with the stored row (nil
// when the identity has none). A hash that differs across a schema bump is an update when the
// version moved on (a real change: versionMoved) or with emitOnSchemaChange; otherwise the row
// is rebaselined silently.
func Classify(stored *Row, vf VF, version string, schema int, emitOnSchemaChange bool) Kind {
	switch r := stored; {
	case r == nil || r.Forgotten:
		return Created
	case r.Schema == schema && r.VF == vf:
		return Unchanged
	case r.Schema == schema:
		return Updated
	case r.VF != vf && (emitOnSchemaChange || versionMoved(r.Version, version)):
		return Updated
	default:
		return Rebaseline
	}
}

// versionMoved reports whether version v, read under a new schema, is a change from stored:
// another value where both order (the same instant written another way is none; an older one
// is, a restore), a different text where neither does. Versions of another kind (RFC 3339 and
// integers, seconds and milliseconds, one side empty) are no evidence: a bump is when a
// version's format changes.
func versionMoved(stored, v string) bool {
	if stored == "" || !sameKind(stored, v) {
		return false
	}
	if order, ok := CompareVersions(v, stored); ok {
		return order != 0
	}
	return v != stored
}

// sameKind reports whether two versions have one format: both RFC 3339, both integers of
// about one size (fewer than three digits apart: seconds and milliseconds are not), or both
// anything else.
func sameKind(a, b string) bool {
	da, db := decimal(a), decimal(b)
	if da != "" || db != "" {
		return da != "" && db != "" && max(len(da), len(db))-min(len(da), len(db)) < 3
	}
	_, errA := time.Parse(time.RFC3339Nano, a)
	_, errB := time.Parse(time.RFC3339Nano, b)
	return (errA == nil) == (errB == nil) && (a == "") == (b == "")
}

// IDPrefix starts every event id.
const IDPrefix = "ev_"

// EventID is the deterministic id of an event (G2): a pure function of poller, partition,
// identity, type, the (version, fingerprint) hash, the schema version, and which change of
// the identity it is (its life and its change count in that life). Computed from committed
// state, it is the same however often a change is re-emitted, and never the same for two
// changes.
func EventID(poller, partition, identity, typ string, vf VF, schema int, life int64, change uint64) string {
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	for _, s := range []string{poller, partition, identity, typ} {
		h.Write(n[:binary.PutUvarint(n[:], uint64(len(s)))])
		h.Write([]byte(s))
	}
	h.Write(vf[:])
	h.Write([]byte(strconv.Itoa(schema)))
	h.Write(n[:binary.PutUvarint(n[:], uint64(life))])
	h.Write(n[:binary.PutUvarint(n[:], change)])
	var sum [sha256.Size]byte
	return IDPrefix + hex.EncodeToString(h.Sum(sum[:0])[:16])
}

// CompareVersions orders two versions when both are decimal integers (of any length) or both
// RFC 3339 times; ok is false for any other pair (an opaque version: a checksum, an ETag).
func CompareVersions(a, b string) (order int, ok bool) {
	if x, y := decimal(a), decimal(b); x != "" && y != "" {
		if len(x) != len(y) {
			return cmp.Compare(len(x), len(y)), true
		}
		return strings.Compare(x, y), true
	}
	ta, errA := time.Parse(time.RFC3339Nano, a)
	tb, errB := time.Parse(time.RFC3339Nano, b)
	if errA != nil || errB != nil {
		return 0, false
	}
	return ta.Compare(tb), true
}

// decimal returns the digits of a non-negative decimal integer without leading zeros ("0" for
// zero), or "" when s is not one.
func decimal(s string) string {
	if s == "" {
		return ""
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return ""
		}
	}
	if t := strings.TrimLeft(s, "0"); t != "" {
		return t
	}
	return "0"
}
