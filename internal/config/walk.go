package config

// Decoding a poller entry by the schema: each block's known and required keys, each key by its
// kind.

import (
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// pollerState is what decoding one poller entry collects besides the Poller.
type pollerState struct {
	p       *Poller
	nameAt  pos     // where the name is, for duplicate names
	uses    []keyAt // values that hold ${partition}
	listing []keyAt // keys given (null included) that only complete listings use
}

// keyAt is a key or value given in the file.
type keyAt struct {
	at    pos
	field string
}

// blockRead is a block as decoding read it.
type blockRead struct {
	at      pos            // where the block's key is
	field   string         // its field path
	keys    []*field       // the block's keys in schema order
	present map[string]pos // keys with a non-null value, at their key
	values  map[string]pos // every key given, at its value
}

// block decodes the mapping n as the block f (pollerEntry: the poller entry itself), whose
// key is at at.
func (d *decoder) block(ps *pollerState, f *field, n ast.Node, at pos, fp string) {
	keys := keysOf(f.path)
	byName := make(map[string]*field, len(keys))
	for _, k := range keys {
		byName[k.name()] = k
	}
	given := map[string]bool{} // keys present, even with a null value
	values := map[string]pos{}
	present := d.object(n, fp, fieldNames(keys), func(key string, kat pos, v ast.Node, kfp string) {
		k := byName[key] // object calls f only for known keys
		given[key], values[key] = true, posOf(v)
		if k.listing {
			ps.listing = append(ps.listing, keyAt{kat, kfp})
		}
		d.value(ps, k, v, kat, kfp)
	})
	for _, k := range keys {
		if !k.required {
			continue
		}
		if k.kind != kindBlock {
			if _, ok := present[k.name()]; !ok {
				d.errAt(at, join(fp, k.name()), "required%s", k.note)
			}
			continue
		}
		// A null block is reported by its own decoding; a missing one by its first
		// required key, or as a whole.
		if given[k.name()] {
			continue
		}
		missing, note := k.name(), k.note
		for _, c := range keysOf(k.path) {
			if c.required {
				missing, note = k.name()+"."+c.name(), c.note
				break
			}
		}
		d.errAt(at, join(fp, missing), "required%s", note)
	}
	if f.after != nil {
		f.after(d, ps, blockRead{at: at, field: fp, keys: keys, present: present, values: values})
	}
}

// value decodes one key's value by its field's kind into the Poller.
func (d *decoder) value(ps *pollerState, f *field, v ast.Node, kat pos, fp string) {
	if f.decode != nil {
		f.decode(d, ps, v, fp)
		return
	}
	if f.open != nil {
		f.open(ps.p)
	}
	switch f.kind {
	case kindBlock:
		d.block(ps, f, v, kat, fp)
	case kindString:
		var s string
		var ok bool
		switch {
		case f.enum != nil:
			s, ok = d.enum(v, fp, f.what, f.enum)
		case f.template:
			s, ok = d.template(v, fp)
		default:
			s, ok = d.str(v, fp)
		}
		if !ok {
			return
		}
		if f.file && s != "" {
			s = d.filePath(s, posOf(v), fp)
		}
		*f.ptr(ps.p).(*string) = s
		if f.check != nil {
			f.check(d, ps, s, posOf(v), fp)
		}
		if f.partition {
			ps.noteUses(s, posOf(v), fp)
		}
	case kindInt:
		switch dst := f.ptr(ps.p).(type) {
		case *int:
			i, ok := d.int(v, fp)
			if ok {
				d.atLeast(int64(i), f.min, v, fp)
			}
			*dst = i
		case *int64:
			i, ok := d.int64(v, fp)
			if ok {
				d.atLeast(i, f.min, v, fp)
			}
			*dst = i
		}
	case kindBool:
		b, ok := d.bool(v, fp)
		switch dst := f.ptr(ps.p).(type) {
		case *bool:
			*dst = b
		case **bool: // nil when not given
			if ok {
				*dst = &b
			}
		}
	case kindDuration:
		*f.ptr(ps.p).(*time.Duration), _ = d.duration(v, fp)
	case kindStrings:
		var check func(s string, at pos, ip string)
		if f.check != nil {
			check = func(s string, at pos, ip string) { f.check(d, ps, s, at, ip) }
		}
		*f.ptr(ps.p).(*[]string) = d.strList(v, fp, f.item, check)
	case kindStrMap:
		var note func(k, val string, at pos)
		if f.partition {
			note = func(k, val string, at pos) { ps.noteUses(val, at, join(fp, k)) }
		}
		*f.ptr(ps.p).(*map[string]string) = d.strMap(v, fp, note)
	}
}

// atLeast reports an integer below its field's minimum.
func (d *decoder) atLeast(i int64, min int, v ast.Node, fp string) {
	switch {
	case i >= int64(min):
	case min == 0:
		d.errAt(posOf(v), fp, "must not be negative, got %d", i)
	default:
		d.errAt(posOf(v), fp, "must be at least %d, got %d", min, i)
	}
}

// noteUses records a value that holds ${partition}.
func (ps *pollerState) noteUses(s string, at pos, fp string) {
	if strings.Contains(s, PartitionVar) {
		ps.uses = append(ps.uses, keyAt{at, fp})
	}
}
