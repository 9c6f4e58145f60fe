// Package jcs canonicalizes JSON by RFC 8785 (JSON Canonicalization Scheme), working
// directly on raw JSON bytes. The engine fingerprints items with it, so two spellings of one
// document hash the same.
//
// Why hand-rolled: fingerprinting is on the hot path, and decoding into
// map[string]any (or a node tree, as generic JCS libraries do) costs far more
// in allocation than the canonicalization itself. Here the input is parsed
// once, left to right, and written straight into the output in document
// order, remembering where each object member landed. An object whose keys
// turn out to be out of order is then fixed up by permuting those member
// texts: right away if it is small (the common case, and cheapest while hot
// in cache), otherwise it is only noted and one final pass rebuilds the
// output. The final pass keeps the work linear for deeply nested unsorted
// objects, where permuting each object at once would copy every byte once
// per enclosing object.
package jcs

import (
	"crypto/sha256"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
	"unsafe"
)

// maxDepth bounds array/object nesting so hostile input cannot exhaust the
// stack. Same limit as github.com/gowebpki/jcs.
const maxDepth = 10000

// inlineReorder is the largest object body that is reordered as soon as it
// is parsed (when nothing nested in it is pending); bigger ones are left to
// the final pass. Immediate reordering is cheapest for the small objects that
// make up typical documents, and the bound keeps its worst case (nested
// objects each copying their whole body again) to a small constant factor.
const inlineReorder = 512

// Canonicalizer turns raw JSON into its RFC 8785 form. The zero value is ready; it reuses
// internal buffers, so one value must not be used by two goroutines at once.
type Canonicalizer struct {
	// members is a stack shared by all nesting levels: an object appends its
	// members after those of its enclosing objects and truncates back when it
	// is done, so no per-object slice is allocated.
	members []member
	// keys is an arena for object keys that contained escapes (keys without
	// escapes are compared straight from src). Stack-like, like members.
	keys []byte
	// recs notes the objects left for the final reordering pass; spans holds
	// their members' output spans in key order (recs[i].spanLo:spanHi).
	recs  []record
	spans []span
	// scratch holds document-order output while it is being reordered.
	scratch []byte
	// out is the output buffer reused by Hash.
	out []byte
	// reorderLimit overrides inlineReorder so tests can force either path:
	// 0 keeps the default, a negative value defers every reordering.
	reorderLimit int
}

func (c *Canonicalizer) inlineLimit() int {
	switch {
	case c.reorderLimit == 0:
		return inlineReorder
	case c.reorderLimit < 0:
		return 0
	}
	return c.reorderLimit
}

// member describes one object member. It holds offsets rather than slices
// so the members stack contains no pointers (cheap for the GC, and no
// retention of old inputs).
type member struct {
	keyOff int  // offset of the key's opening quote in src (for errors)
	ks, ke int  // decoded key: src[ks:ke], or keys[ks:ke] if inKeys
	start  int  // `"key":value` occupies dst[start:end]
	end    int  //
	inKeys bool // key was unescaped into the arena
}

// record is an object whose members must be reordered (spanLo >= 0), or a
// sorted object that merely contains such objects (spanLo < 0). Its body (the
// bytes between the braces) is [start, end) in the first-pass output. Records
// are in pre-order: the records nested in this one are the ndesc that follow.
type record struct {
	start, end     int
	spanLo, spanHi int
	ndesc          int
}

// span is a member's `"key":value` text in the first-pass output.
type span struct{ start, end int }

// inputError is the error returned for every rejected input. It always names
// the byte offset in src so that callers can point at the problem.
type inputError struct {
	msg string
	off int
}

func (e *inputError) Error() string {
	return "jcs: " + e.msg + " at offset " + strconv.Itoa(e.off)
}

// errAt builds the error for an unexpected byte at src[i] (or for the end
// of input when i == len(src)).
func errAt(src []byte, i int) error {
	if i >= len(src) {
		return &inputError{msg: "unexpected end of input", off: i}
	}
	b := src[i]
	if b < utf8.RuneSelf {
		return &inputError{msg: "invalid character " + strconv.QuoteRune(rune(b)), off: i}
	}
	r, size := utf8.DecodeRune(src[i:])
	if r == utf8.RuneError && size <= 1 {
		return &inputError{msg: "invalid UTF-8", off: i}
	}
	return &inputError{msg: "invalid character " + strconv.QuoteRune(r), off: i}
}

// plain marks bytes that may be copied verbatim inside a string without
// further thought: printable ASCII other than '"' and '\\'.
var plain = func() (t [256]bool) {
	for b := 0x20; b < 0x80; b++ {
		t[b] = b != '"' && b != '\\'
	}
	return t
}()

// Append appends the canonical form of the single JSON value in src to dst.
// Errors (invalid JSON, trailing data, duplicate object keys, invalid UTF-8, numbers that are
// not finite doubles) name the byte offset in src: e.g. `jcs: invalid character 'x' at offset 17`.
// On error dst is returned unchanged.
func (c *Canonicalizer) Append(dst, src []byte) ([]byte, error) {
	out, i, err := c.value(dst, src, skipWS(src, 0), 0)
	if err == nil {
		if i = skipWS(src, i); i < len(src) {
			err = errAt(src, i)
		}
	}
	if err == nil && len(c.recs) > 0 {
		out = c.reorder(out, len(dst))
	}
	// An error can leave members/keys of unfinished objects behind.
	c.members = c.members[:0]
	c.keys = c.keys[:0]
	c.recs = c.recs[:0]
	c.spans = c.spans[:0]
	if err != nil {
		return dst, err
	}
	return out, nil
}

// Hash returns SHA-256 of the canonical form of src.
func (c *Canonicalizer) Hash(src []byte) ([32]byte, error) {
	out, err := c.Append(c.out[:0], src)
	if err != nil {
		return [32]byte{}, err
	}
	c.out = out
	return sha256.Sum256(out), nil
}

// Append is Canonicalizer.Append on a fresh Canonicalizer (convenience; may allocate).
func Append(dst, src []byte) ([]byte, error) {
	var c Canonicalizer
	return c.Append(dst, src)
}

func skipWS(src []byte, i int) int {
	for i < len(src) {
		switch src[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// value canonicalizes the value starting at src[i] (no leading whitespace)
// and returns the offset just past it. depth is the nesting of the enclosing
// containers.
func (c *Canonicalizer) value(dst, src []byte, i, depth int) ([]byte, int, error) {
	if i >= len(src) {
		return dst, i, errAt(src, i)
	}
	switch b := src[i]; b {
	case '"':
		return stringValue(dst, src, i)
	case '{':
		return c.object(dst, src, i, depth+1)
	case '[':
		return c.array(dst, src, i, depth+1)
	case 't':
		return literal(dst, src, i, "true")
	case 'f':
		return literal(dst, src, i, "false")
	case 'n':
		return literal(dst, src, i, "null")
	default:
		if b == '-' || (b >= '0' && b <= '9') {
			return number(dst, src, i)
		}
		return dst, i, errAt(src, i)
	}
}

func literal(dst, src []byte, i int, lit string) ([]byte, int, error) {
	for k := 0; k < len(lit); k++ {
		if i+k >= len(src) || src[i+k] != lit[k] {
			return dst, i, errAt(src, i+k)
		}
	}
	return append(dst, lit...), i + len(lit), nil
}

func (c *Canonicalizer) array(dst, src []byte, i, depth int) ([]byte, int, error) {
	if depth > maxDepth {
		return dst, i, &inputError{msg: "nesting depth exceeds " + strconv.Itoa(maxDepth), off: i}
	}
	dst = append(dst, '[')
	i = skipWS(src, i+1)
	if i < len(src) && src[i] == ']' {
		return append(dst, ']'), i + 1, nil
	}
	var err error
	for {
		if dst, i, err = c.value(dst, src, i, depth); err != nil {
			return dst, i, err
		}
		i = skipWS(src, i)
		if i < len(src) {
			switch src[i] {
			case ',':
				dst = append(dst, ',')
				i = skipWS(src, i+1)
				continue
			case ']':
				return append(dst, ']'), i + 1, nil
			}
		}
		return dst, i, errAt(src, i)
	}
}

// object writes the members in document order, each already canonical,
// remembering where each one landed in dst; if the keys turn out not to be
// sorted, the member texts are permuted (now or in the final pass). Every
// byte is parsed exactly once, and already-sorted objects cost no extra copy.
func (c *Canonicalizer) object(dst, src []byte, i, depth int) ([]byte, int, error) {
	if depth > maxDepth {
		return dst, i, &inputError{msg: "nesting depth exceeds " + strconv.Itoa(maxDepth), off: i}
	}
	dst = append(dst, '{')
	body := len(dst)
	i = skipWS(src, i+1)
	if i < len(src) && src[i] == '}' {
		return append(dst, '}'), i + 1, nil
	}
	base, keysBase := len(c.members), len(c.keys)
	// Reserve this object's record now so that records end up in pre-order
	// (position order); it is dropped again below if it turns out useless.
	rec := len(c.recs)
	c.recs = append(c.recs, record{start: body, spanLo: -1})
	var err error
	for {
		if i >= len(src) || src[i] != '"' {
			return dst, i, errAt(src, i)
		}
		m := member{keyOff: i, start: len(dst)}
		if dst, i, err = c.key(dst, src, i, &m); err != nil {
			return dst, i, err
		}
		i = skipWS(src, i)
		if i >= len(src) || src[i] != ':' {
			return dst, i, errAt(src, i)
		}
		dst = append(dst, ':')
		if dst, i, err = c.value(dst, src, skipWS(src, i+1), depth); err != nil {
			return dst, i, err
		}
		m.end = len(dst)
		// Appended only now: nested objects have pushed and popped their own
		// members meanwhile, so this object's members stay contiguous.
		c.members = append(c.members, m)
		i = skipWS(src, i)
		if i < len(src) {
			if src[i] == ',' {
				dst = append(dst, ',')
				i = skipWS(src, i+1)
				continue
			}
			if src[i] == '}' {
				i++
				break
			}
		}
		return dst, i, errAt(src, i)
	}
	reordered := false
	if len(c.members)-base > 1 {
		if reordered, err = c.sortMembers(src, c.members[base:]); err != nil {
			return dst, i, err
		}
	}
	switch {
	case len(c.recs) > rec+1 || (reordered && len(dst)-body > c.inlineLimit()):
		// Defer to the final pass.
		r := &c.recs[rec]
		r.end, r.ndesc = len(dst), len(c.recs)-rec-1
		if reordered {
			r.spanLo = len(c.spans)
			for _, m := range c.members[base:] {
				c.spans = append(c.spans, span{m.start, m.end})
			}
			r.spanHi = len(c.spans)
		}
	case reordered:
		// Small object with nothing pending inside: permute it right away,
		// while it is hot in cache.
		c.recs = c.recs[:rec]
		ms := c.members[base:]
		c.scratch = append(c.scratch[:0], dst[body:]...)
		dst = dst[:body]
		for k := range ms {
			if k > 0 {
				dst = append(dst, ',')
			}
			dst = append(dst, c.scratch[ms[k].start-body:ms[k].end-body]...)
		}
	default:
		c.recs = c.recs[:rec] // nothing to reorder here or below
	}
	c.members = c.members[:base]
	c.keys = c.keys[:keysBase]
	return append(dst, '}'), i, nil
}

// key canonicalizes an object key at src[i] (the opening quote) into dst and
// records where its decoded form lives in m.
func (c *Canonicalizer) key(dst, src []byte, i int, m *member) ([]byte, int, error) {
	start := i + 1
	j, nonASCII := scanPlain(src, start)
	if j < len(src) && src[j] == '"' {
		// Common case: no escapes, so the decoded key is the raw text.
		if nonASCII {
			if err := checkUTF8(src, start, j); err != nil {
				return dst, i, err
			}
		}
		m.ks, m.ke = start, j
		dst = append(dst, '"')
		dst = append(dst, src[start:j]...)
		return append(dst, '"'), j + 1, nil
	}
	// Escapes (or an error): unescape into the arena, then write the
	// canonical escaping of the decoded text.
	ks := len(c.keys)
	keys, j, err := unescape(c.keys, src, start)
	c.keys = keys
	if err != nil {
		return dst, j, err
	}
	m.ks, m.ke, m.inKeys = ks, len(keys), true
	return appendQuoted(dst, keys[ks:]), j, nil
}

func (c *Canonicalizer) keyOf(src []byte, m *member) []byte {
	if m.inKeys {
		return c.keys[m.ks:m.ke]
	}
	return src[m.ks:m.ke]
}

// sortMembers sorts the members ms of an object by key, rejecting duplicate
// keys, and reports whether their order changed.
func (c *Canonicalizer) sortMembers(src []byte, ms []member) (bool, error) {
	sorted := true
	for k := 1; k < len(ms); k++ {
		r := compareKeys(c.keyOf(src, &ms[k-1]), c.keyOf(src, &ms[k]))
		if r == 0 {
			return false, dupError(src, ms[k].keyOff)
		}
		if r > 0 {
			sorted = false
			break
		}
	}
	if sorted {
		return false, nil // already canonical order: nothing to move
	}
	if len(ms) <= 12 {
		// Insertion sort: small objects dominate and this needs no closure.
		for k := 1; k < len(ms); k++ {
			for j := k; j > 0 && compareKeys(c.keyOf(src, &ms[j-1]), c.keyOf(src, &ms[j])) > 0; j-- {
				ms[j-1], ms[j] = ms[j], ms[j-1]
			}
		}
	} else {
		slices.SortFunc(ms, func(a, b member) int {
			return compareKeys(c.keyOf(src, &a), c.keyOf(src, &b))
		})
	}
	for k := 1; k < len(ms); k++ {
		if compareKeys(c.keyOf(src, &ms[k-1]), c.keyOf(src, &ms[k])) == 0 {
			return false, dupError(src, max(ms[k-1].keyOff, ms[k].keyOff))
		}
	}
	return true, nil
}

// reorder rebuilds dst[base:] (the first-pass output, in document order) with
// the members of every recorded object in key order. Each byte is copied once.
func (c *Canonicalizer) reorder(dst []byte, base int) []byte {
	c.scratch = append(c.scratch[:0], dst[base:]...)
	return c.emitRange(dst[:base], base, base, len(dst), 0, len(c.recs))
}

// emitRange copies first-pass bytes [lo, hi) into dst, replacing each
// recorded object among recs[ri:rj] (all inside [lo, hi), in pre-order) by
// its reordered form. Offsets are first-pass positions; scratch starts at base.
func (c *Canonicalizer) emitRange(dst []byte, base, lo, hi, ri, rj int) []byte {
	for k := ri; k < rj; {
		r := c.recs[k]
		desc := c.recs[k+1 : k+1+r.ndesc]
		dst = append(dst, c.scratch[lo-base:r.start-base]...)
		if r.spanLo < 0 {
			// In order itself, but something inside is not.
			dst = c.emitRange(dst, base, r.start, r.end, k+1, k+1+r.ndesc)
		}
		for s := r.spanLo; s >= 0 && s < r.spanHi; s++ {
			if s > r.spanLo {
				dst = append(dst, ',')
			}
			sp := c.spans[s]
			if len(desc) == 0 {
				dst = append(dst, c.scratch[sp.start-base:sp.end-base]...)
				continue
			}
			// This member's nested records: the run of this object's
			// descendants (contiguous, by position) that start inside sp.
			a, _ := slices.BinarySearchFunc(desc, sp.start, recCmp)
			b, _ := slices.BinarySearchFunc(desc[a:], sp.end, recCmp)
			dst = c.emitRange(dst, base, sp.start, sp.end, k+1+a, k+1+a+b)
		}
		lo = r.end
		k += 1 + r.ndesc
	}
	return append(dst, c.scratch[lo-base:hi-base]...)
}

func recCmp(r record, off int) int { return r.start - off }

func dupError(src []byte, off int) error {
	// Quote (and bound) the raw key: error text ends up in logs.
	end := off + 1
	for end < len(src) && src[end] != '"' {
		if src[end] == '\\' {
			end++
		}
		end++
	}
	raw := src[off+1 : min(end, len(src))]
	if len(raw) > 32 {
		raw = raw[:32]
	}
	return &inputError{msg: "duplicate key " + strconv.Quote(string(raw)), off: off}
}

// compareKeys compares decoded (UTF-8) keys as arrays of UTF-16 code
// units, as RFC 8785 §3.2.3 requires.
//
// Why bytes suffice almost always: UTF-8 byte order equals code point order,
// and UTF-16 order differs from code point order only between a
// supplementary character (UTF-8 lead byte F0-F4, a surrogate pair D800-DBFF
// in UTF-16) and a BMP character in U+E000-U+FFFF (lead byte EE or EF). At the
// first differing byte the common prefix is identical, so either both bytes
// start a character, or both sit inside characters with the same lead byte
// (same length class, where the orders agree). Hence only that one byte pair
// needs the UTF-16 correction.
func compareKeys(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == n {
		return len(a) - len(b)
	}
	x, y := a[i], b[i]
	if x >= 0xEE && y >= 0xEE {
		// Supplementary (surrogate pair, D8xx) sorts before U+E000-U+FFFF.
		if x >= 0xF0 && y < 0xF0 {
			return -1
		}
		if y >= 0xF0 && x < 0xF0 {
			return 1
		}
	}
	return int(x) - int(y)
}

// scanPlain advances over bytes that need no decoding inside a string:
// printable ASCII other than '"' and '\\', and any byte >= 0x80 (validated
// as UTF-8 separately by the caller when nonASCII is reported).
func scanPlain(src []byte, i int) (int, bool) {
	nonASCII := false
	for i < len(src) {
		b := src[i]
		if plain[b] {
			i++
			continue
		}
		if b < utf8.RuneSelf {
			break
		}
		nonASCII = true
		i++
	}
	return i, nonASCII
}

// checkUTF8 validates src[i:j]; multi-byte sequences never contain ASCII
// bytes, so a run that scanPlain stopped on is self-contained.
func checkUTF8(src []byte, i, j int) error {
	if utf8.Valid(src[i:j]) {
		return nil
	}
	for i < j {
		r, size := utf8.DecodeRune(src[i:j])
		if r == utf8.RuneError && size <= 1 {
			return &inputError{msg: "invalid UTF-8 in string", off: i}
		}
		i += size
	}
	return nil // unreachable
}

// stringValue canonicalizes the string at src[i] (the opening quote). Raw runs
// are copied as is (they cannot contain anything RFC 8785 would escape);
// each escape is decoded and re-emitted in canonical form.
func stringValue(dst, src []byte, i int) ([]byte, int, error) {
	dst = append(dst, '"')
	i++
	for {
		j, nonASCII := scanPlain(src, i)
		if nonASCII {
			if err := checkUTF8(src, i, j); err != nil {
				return dst, i, err
			}
		}
		dst = append(dst, src[i:j]...)
		if j >= len(src) {
			return dst, j, errAt(src, j)
		}
		switch src[j] {
		case '"':
			return append(dst, '"'), j + 1, nil
		case '\\':
			r, next, err := escape(src, j)
			if err != nil {
				return dst, next, err
			}
			dst = appendRune(dst, r)
			i = next
		default:
			return dst, j, &inputError{msg: "control character in string", off: j}
		}
	}
}

// unescape decodes the string body starting at src[i] (just past the
// opening quote) into out and returns the offset past the closing quote.
func unescape(out, src []byte, i int) ([]byte, int, error) {
	for {
		j, nonASCII := scanPlain(src, i)
		if nonASCII {
			if err := checkUTF8(src, i, j); err != nil {
				return out, i, err
			}
		}
		out = append(out, src[i:j]...)
		if j >= len(src) {
			return out, j, errAt(src, j)
		}
		switch src[j] {
		case '"':
			return out, j + 1, nil
		case '\\':
			r, next, err := escape(src, j)
			if err != nil {
				return out, next, err
			}
			out = utf8.AppendRune(out, r)
			i = next
		default:
			return out, j, &inputError{msg: "control character in string", off: j}
		}
	}
}

// escape decodes the escape sequence at src[i] == '\\', joining surrogate
// pairs; a lone surrogate is an error (it has no UTF-8 form).
func escape(src []byte, i int) (rune, int, error) {
	if i+1 >= len(src) {
		return 0, i + 1, errAt(src, i+1)
	}
	switch src[i+1] {
	case '"':
		return '"', i + 2, nil
	case '\\':
		return '\\', i + 2, nil
	case '/':
		return '/', i + 2, nil
	case 'b':
		return '\b', i + 2, nil
	case 'f':
		return '\f', i + 2, nil
	case 'n':
		return '\n', i + 2, nil
	case 'r':
		return '\r', i + 2, nil
	case 't':
		return '\t', i + 2, nil
	case 'u':
		r, err := hex4(src, i+2)
		if err != nil {
			return 0, i, err
		}
		if r < 0xD800 || r > 0xDFFF {
			return r, i + 6, nil
		}
		if r <= 0xDBFF && i+7 < len(src) && src[i+6] == '\\' && src[i+7] == 'u' {
			lo, err := hex4(src, i+8)
			if err != nil {
				return 0, i, err
			}
			if lo >= 0xDC00 && lo <= 0xDFFF {
				return 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00), i + 12, nil
			}
		}
		return 0, i, &inputError{msg: "lone surrogate " + strconv.Quote(string(src[i:i+6])), off: i}
	default:
		return 0, i + 1, &inputError{msg: "invalid escape " + strconv.Quote(string(src[i:i+2])), off: i}
	}
}

func hex4(src []byte, i int) (rune, error) {
	var r rune
	for k := i; k < i+4; k++ {
		if k >= len(src) {
			return 0, errAt(src, k)
		}
		b := src[k]
		switch {
		case b >= '0' && b <= '9':
			b -= '0'
		case b >= 'a' && b <= 'f':
			b -= 'a' - 10
		case b >= 'A' && b <= 'F':
			b -= 'A' - 10
		default:
			return 0, errAt(src, k)
		}
		r = r<<4 | rune(b)
	}
	return r, nil
}

const hexDigits = "0123456789abcdef"

// appendRune writes one decoded character in its RFC 8785 form.
func appendRune(dst []byte, r rune) []byte {
	if r >= utf8.RuneSelf {
		return utf8.AppendRune(dst, r)
	}
	return appendASCII(dst, byte(r))
}

func appendASCII(dst []byte, b byte) []byte {
	switch b {
	case '"':
		return append(dst, '\\', '"')
	case '\\':
		return append(dst, '\\', '\\')
	case '\b':
		return append(dst, '\\', 'b')
	case '\t':
		return append(dst, '\\', 't')
	case '\n':
		return append(dst, '\\', 'n')
	case '\f':
		return append(dst, '\\', 'f')
	case '\r':
		return append(dst, '\\', 'r')
	}
	if b < 0x20 {
		return append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
	}
	return append(dst, b)
}

// appendQuoted writes the decoded string s quoted and escaped per RFC 8785.
func appendQuoted(dst, s []byte) []byte {
	dst = append(dst, '"')
	start := 0
	for k, b := range s {
		if b >= 0x20 && b != '"' && b != '\\' {
			continue
		}
		dst = append(dst, s[start:k]...)
		dst = appendASCII(dst, b)
		start = k + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// number validates the RFC 8259 number at src[i] and writes it the way
// ECMAScript's Number.prototype.toString would (RFC 8785 §3.2.2.3).
func number(dst, src []byte, i int) ([]byte, int, error) {
	start := i
	if src[i] == '-' {
		i++
	}
	if i >= len(src) {
		return dst, i, errAt(src, i)
	}
	intStart := i
	switch b := src[i]; {
	case b == '0':
		i++
	case b >= '1' && b <= '9':
		i++
		for i < len(src) && src[i] >= '0' && src[i] <= '9' {
			i++
		}
	default:
		return dst, i, errAt(src, i)
	}
	intEnd, fracStart, fracEnd := i, i, i
	if i < len(src) && src[i] == '.' {
		i++
		fracStart = i
		for i < len(src) && src[i] >= '0' && src[i] <= '9' {
			i++
		}
		if i == fracStart {
			return dst, i, errAt(src, i)
		}
		fracEnd = i
	}
	hasExp := false
	if i < len(src) && (src[i] == 'e' || src[i] == 'E') {
		hasExp = true
		i++
		if i < len(src) && (src[i] == '+' || src[i] == '-') {
			i++
		}
		expStart := i
		for i < len(src) && src[i] >= '0' && src[i] <= '9' {
			i++
		}
		if i == expStart {
			return dst, i, errAt(src, i)
		}
	}
	if !hasExp && canonicalDecimal(src[intStart:intEnd], src[fracStart:fracEnd]) {
		if intEnd-intStart == 1 && src[intStart] == '0' && fracEnd == fracStart {
			return append(dst, '0'), i, nil // "0" or "-0"
		}
		return append(dst, src[start:i]...), i, nil
	}
	// unsafe.String: ParseFloat does not retain its argument (its errors
	// clone it), and this keeps long literals from allocating.
	f, err := strconv.ParseFloat(unsafe.String(&src[start], i-start), 64)
	if err != nil {
		return dst, start, &inputError{msg: "number is not a finite double", off: start}
	}
	return appendFloat(dst, f), i, nil
}

// canonicalDecimal reports whether a literal without exponent, with
// integer digits ip (no leading zero unless "0") and fraction digits fp
// (possibly empty), is already in ECMAScript form.
//
// Why this is sound: any decimal with at most 15 significant digits (DBL_DIG)
// survives decimal -> double -> decimal, so two such decimals never map to the
// same double; hence the shortest round-trip digits of its double are exactly
// its own digits. Plain (non-exponent) form needs 1e-6 <= |x| < 1e21, and
// the literal must have no trailing fraction zeros.
func canonicalDecimal(ip, fp []byte) bool {
	if len(fp) == 0 {
		return len(ip) <= 15
	}
	if fp[len(fp)-1] == '0' {
		return false
	}
	if ip[0] != '0' {
		return len(ip)+len(fp) <= 15
	}
	lz := 0
	for lz < len(fp) && fp[lz] == '0' {
		lz++
	}
	// 0.000001 (five zeros) is the smallest plain-form value.
	return lz <= 5 && len(fp)-lz <= 15
}

// appendFloat formats f like ECMAScript Number.prototype.toString.
func appendFloat(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0') // also -0
	}
	if a := math.Abs(f); a >= 1e-6 && a < 1e21 {
		return strconv.AppendFloat(dst, f, 'f', -1, 64)
	}
	dst = strconv.AppendFloat(dst, f, 'e', -1, 64)
	// Go writes at least two exponent digits ("1e-07"); ECMAScript writes no
	// leading zero. Exponents here are <= -7 or >= 21, so only a two-digit
	// exponent can start with '0'.
	if n := len(dst); dst[n-2] == '0' && (dst[n-3] == '-' || dst[n-3] == '+') {
		dst[n-2] = dst[n-1]
		dst = dst[:n-1]
	}
	return dst
}
