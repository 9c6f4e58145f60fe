package jcs

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"math"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	refjcs "github.com/gowebpki/jcs"
)

func mustCanonical(t testing.TB, src string) string {
	t.Helper()
	out, err := Append(nil, []byte(src))
	if err != nil {
		t.Fatalf("Append(%q): %v", src, err)
	}
	return string(out)
}

// RFC 8785 Appendix B.
func TestCanonicalNumbersAppendixB(t *testing.T) {
	tests := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, tt := range tests {
		f := math.Float64frombits(tt.bits)
		for _, lit := range []string{
			strconv.FormatFloat(f, 'g', -1, 64),
			strconv.FormatFloat(f, 'e', -1, 64),
			strconv.FormatFloat(f, 'E', 17, 64),
		} {
			if got := mustCanonical(t, lit); got != tt.want {
				t.Errorf("%#016x: %s -> %s, want %s", tt.bits, lit, got, tt.want)
			}
			// Also inside a container, followed by a delimiter.
			if got := mustCanonical(t, "[ "+lit+" ]"); got != "["+tt.want+"]" {
				t.Errorf("%#016x: [%s] -> %s, want [%s]", tt.bits, lit, got, tt.want)
			}
		}
	}
}

func TestCanonicalRFCExamples(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{
			"§3.2.2 primitives",
			`{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001], "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/", "literals": [null, true, false]}`,
			`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		{
			"§3.2.3 sorting",
			`{"\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh", "1": "One", "\ud83d\ude00": "Emoji: Grinning Face", "\u0080": "Control", "\u00f6": "Latin Small Letter O With Diaeresis"}`,
			"{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"\u00f6\":\"Latin Small Letter O With Diaeresis\",\"\u20ac\":\"Euro Sign\",\"\U0001F600\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mustCanonical(t, tt.in); got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestCanonicalCases(t *testing.T) {
	tests := []struct{ in, want string }{
		{" \t\r\n true \n", "true"},
		{"false", "false"},
		{"null", "null"},
		{`{}`, `{}`},
		{`[ ]`, `[]`},
		{`{ "b" : [ 1 , { } , [ ] ] , "a" : { "d" : 1 , "c" : 2 } }`, `{"a":{"c":2,"d":1},"b":[1,{},[]]}`},
		// Numbers.
		{`-0`, `0`},
		{`-0.0e5`, `0`},
		{`0`, `0`},
		{`123456789012345`, `123456789012345`},
		{`-123456789012345`, `-123456789012345`},
		{`1234567890123456789`, `1234567890123456800`},
		{`100`, `100`},
		{`1e2`, `100`},
		{`1.50`, `1.5`},
		{`19.99`, `19.99`},
		{`0.1`, `0.1`},
		{`0.000001`, `0.000001`},
		{`0.0000001`, `1e-7`},
		{`0.00000123`, `0.00000123`},
		{`1e21`, `1e+21`},
		{`1e20`, `100000000000000000000`},
		{`12345678901234.56`, `12345678901234.56`},
		{`1234567890123.4567`, `1234567890123.4568`},
		{`1e-400`, `0`},
		{`5E-324`, `5e-324`},
		{`1.0E+2`, `100`},
		// Strings.
		{`"a/b\/c"`, `"a/b/c"`},
		{`"\u0000\u001f\u007f\b\f\n\r\t"`, `"\u0000\u001f` + "\x7f" + `\b\f\n\r\t"`},
		{`"\u00E9\u00e9é"`, `"ééé"`},
		{`"\uD834\uDD1E"`, `"𝄞"`},
		{`"<\u2028>"`, "\"<\u2028>\""},
		// Keys: escapes decide the order by their decoded value.
		{`{"\u0062":1,"a":2}`, `{"a":2,"b":1}`},
		{`{"b":1,"\"":2,"\\":3,"\n":4}`, `{"\n":4,"\"":2,"\\":3,"b":1}`},
		{`{"ab":1,"a":2,"":3}`, `{"":3,"a":2,"ab":1}`},
		// UTF-16 order: U+10000 (D800 DC00) sorts before U+E000 and U+FFFD.
		{"{\"\uFFFD\":1,\"\U00010000\":2,\"\uE000\":3,\"\u00ff\":4}", "{\"\u00ff\":4,\"\U00010000\":2,\"\uE000\":3,\"\uFFFD\":1}"},
		{"{\"x\uE000\":1,\"x\U0001F600\":2}", "{\"x\U0001F600\":2,\"x\uE000\":1}"},
	}
	for _, tt := range tests {
		if got := mustCanonical(t, tt.in); got != tt.want {
			t.Errorf("%s -> %s, want %s", tt.in, got, tt.want)
		}
	}
}

// Plain decimal literals (the copy-as-is fast path and its edges) agree with
// gowebpki's jcs.NumberToJSON.
func TestCanonicalDecimals(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	digits := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('0' + rng.Intn(10))
			if rng.Intn(3) == 0 {
				b[i] = '0'
			}
		}
		return string(b)
	}
	for n := 0; n < 50000; n++ {
		ip := "0"
		if k := rng.Intn(18); k > 0 {
			ip = string(rune('1'+rng.Intn(9))) + digits(k-1)
		}
		lit := ip
		if rng.Intn(4) != 0 {
			lit += "." + digits(1+rng.Intn(19))
		}
		if rng.Intn(2) == 0 {
			lit = "-" + lit
		}
		f, err := strconv.ParseFloat(lit, 64)
		if err != nil {
			t.Fatal(err)
		}
		want, err := refjcs.NumberToJSON(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := mustCanonical(t, lit); got != want {
			t.Fatalf("%s -> %s, want %s", lit, got, want)
		}
	}
}

// A large object takes the slices.SortFunc path.
func TestCanonicalLargeObject(t *testing.T) {
	var in, want strings.Builder
	in.WriteByte('{')
	for k := 99; k >= 0; k-- {
		if k != 99 {
			in.WriteByte(',')
		}
		in.WriteString(`"k` + strconv.Itoa(1000+k) + `":` + strconv.Itoa(k))
	}
	in.WriteByte('}')
	want.WriteByte('{')
	for k := 0; k < 100; k++ {
		if k != 0 {
			want.WriteByte(',')
		}
		want.WriteString(`"k` + strconv.Itoa(1000+k) + `":` + strconv.Itoa(k))
	}
	want.WriteByte('}')
	if got := mustCanonical(t, in.String()); got != want.String() {
		t.Errorf("got %s", got)
	}
	dup := strings.Replace(in.String(), `"k1050"`, `"k1051"`, 1)
	if _, err := Append(nil, []byte(dup)); err == nil || !strings.Contains(err.Error(), "duplicate key") {
		t.Errorf("duplicate in large object: err = %v", err)
	}
}

func TestCanonicalErrors(t *testing.T) {
	tests := []struct {
		in   string
		want string // full error text
	}{
		{``, `jcs: unexpected end of input at offset 0`},
		{`   `, `jcs: unexpected end of input at offset 3`},
		{`{"a":1`, `jcs: unexpected end of input at offset 6`},
		{`{"a":[1,2`, `jcs: unexpected end of input at offset 9`},
		{`"abc`, `jcs: unexpected end of input at offset 4`},
		{`[1,]`, `jcs: invalid character ']' at offset 3`},
		{`{"a":1,}`, `jcs: invalid character '}' at offset 7`},
		{`{"a" 1}`, `jcs: invalid character '1' at offset 5`},
		{`{a:1}`, `jcs: invalid character 'a' at offset 1`},
		{`{"a":1} x`, `jcs: invalid character 'x' at offset 8`},
		{`{"a":1}{}`, `jcs: invalid character '{' at offset 7`},
		{`[1 2]`, `jcs: invalid character '2' at offset 3`},
		{`{"status":"ok","x":tru}`, `jcs: invalid character '}' at offset 22`},
		{`{"status":"ok","x":nul`, `jcs: unexpected end of input at offset 22`},
		{`[truex]`, `jcs: invalid character 'x' at offset 5`},
		{`{"a":1,"b":2,"a":3}`, `jcs: duplicate key "a" at offset 13`},
		{`{"b":1,"a":2,"\u0061":3}`, `jcs: duplicate key "\\u0061" at offset 13`},
		{`"\ud800"`, `jcs: lone surrogate "\\ud800" at offset 1`},
		{`"\udc00\ud800"`, `jcs: lone surrogate "\\udc00" at offset 1`},
		{`"\ud800\u0041"`, `jcs: lone surrogate "\\ud800" at offset 1`},
		{`{"\ud800":1}`, `jcs: lone surrogate "\\ud800" at offset 2`},
		{`"\u12g4"`, `jcs: invalid character 'g' at offset 5`},
		{`"\x"`, `jcs: invalid escape "\\x" at offset 1`},
		{"\"ab\xffc\"", `jcs: invalid UTF-8 in string at offset 3`},
		{"{\"k\xc3\":1}", `jcs: invalid UTF-8 in string at offset 3`},
		{"\"\xed\xa0\x80\"", `jcs: invalid UTF-8 in string at offset 1`}, // UTF-8 encoded surrogate
		{"\"a\tb\"", `jcs: control character in string at offset 2`},
		{"\xc3\xa9", `jcs: invalid character 'é' at offset 0`},
		{"\xff", `jcs: invalid UTF-8 at offset 0`},
		{`[1e400]`, `jcs: number is not a finite double at offset 1`},
		{`-1e400`, `jcs: number is not a finite double at offset 0`},
		{`01`, `jcs: invalid character '1' at offset 1`},
		{`-`, `jcs: unexpected end of input at offset 1`},
		{`-a`, `jcs: invalid character 'a' at offset 1`},
		{`1.`, `jcs: unexpected end of input at offset 2`},
		{`1.e5`, `jcs: invalid character 'e' at offset 2`},
		{`1e+`, `jcs: unexpected end of input at offset 3`},
		{`+1`, `jcs: invalid character '+' at offset 0`},
		{`NaN`, `jcs: invalid character 'N' at offset 0`},
		{strings.Repeat("[", 10001) + strings.Repeat("]", 10001), `jcs: nesting depth exceeds 10000 at offset 10000`},
		{strings.Repeat(`{"a":`, 10001) + "1" + strings.Repeat("}", 10001), `jcs: nesting depth exceeds 10000 at offset 50000`},
	}
	for _, tt := range tests {
		prefix := []byte("keep")
		out, err := Append(prefix, []byte(tt.in))
		if err == nil {
			t.Errorf("%.40q: no error, got %s", tt.in, out)
			continue
		}
		if err.Error() != tt.want {
			t.Errorf("%.40q:\n got  %v\n want %s", tt.in, err, tt.want)
		}
		var je *inputError
		if !errors.As(err, &je) {
			t.Errorf("%.40q: error %T is not *inputError", tt.in, err)
		}
		if string(out) != "keep" {
			t.Errorf("%.40q: dst = %q on error, want it unchanged", tt.in, out)
		}
	}
}

func TestCanonicalMaxDepthAccepted(t *testing.T) {
	in := strings.Repeat("[", 10000) + strings.Repeat("]", 10000)
	if got := mustCanonical(t, in); got != in {
		t.Errorf("depth 10000 array changed")
	}
	in = strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000)
	if got := mustCanonical(t, in); got != in {
		t.Errorf("depth 10000 object changed")
	}
}

// The Canonicalizer is reused across calls (and after errors) without
// leaking state between documents.
func TestCanonicalReuse(t *testing.T) {
	var c Canonicalizer
	docs := []string{
		`{"b":{"y":1,"x":2},"a":[{"d":1,"c":2}]}`,
		`{"b":{"y":1,"x":2},"a":[{"d":1,"c":2`, // error mid-object
		`{"\u0062":{"\u0079":1,"x":2},"a":3}`,
		`{"z":1,"z":2}`,
		string(sampleOrder),
	}
	for round := 0; round < 3; round++ {
		for _, d := range docs {
			want, wantErr := refjcs.Transform([]byte(d))
			got, err := c.Append(nil, []byte(d))
			if (err != nil) != (wantErr != nil) {
				t.Fatalf("%s: err = %v, jcs err = %v", d, err, wantErr)
			}
			if err == nil && !bytes.Equal(got, want) {
				t.Fatalf("%s:\n got  %s\n want %s", d, got, want)
			}
		}
	}
}

func TestCanonicalHash(t *testing.T) {
	var c Canonicalizer
	for _, d := range []string{string(sampleOrder), `{"b":1,"a":2}`, `[]`, `"x"`} {
		want, err := refjcs.Transform([]byte(d))
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Hash([]byte(d))
		if err != nil {
			t.Fatal(err)
		}
		if got != sha256.Sum256(want) {
			t.Errorf("%s: hash mismatch", d)
		}
	}
	if h, err := c.Hash([]byte(`{"a":1,"a":1}`)); err == nil || h != ([32]byte{}) {
		t.Errorf("Hash of duplicate-key document: %x, %v", h, err)
	}
}

func TestCanonicalAppendNoAlloc(t *testing.T) {
	var c Canonicalizer
	buf, err := c.Append(nil, sampleOrder) // warm up the internal buffers
	if err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		buf, err = c.Append(buf[:0], sampleOrder)
		if err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Append allocates %v times per run on a warm Canonicalizer", allocs)
	}
	allocs = testing.AllocsPerRun(100, func() {
		if _, err := c.Hash(sampleOrder); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Hash allocates %v times per run on a warm Canonicalizer", allocs)
	}
}

// compareKeys must agree with a plain UTF-16 code unit comparison.
func TestCanonicalCompareKeys(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	for n := 0; n < 20000; n++ {
		a, b := randKey(rng), randKey(rng)
		if rng.Intn(4) == 0 {
			b = a + randKey(rng)
		}
		want := compareUTF16(a, b)
		got := compareKeys([]byte(a), []byte(b))
		if sign(got) != sign(want) {
			t.Fatalf("compare(%q, %q) = %d, want sign %d", a, b, got, want)
		}
	}
}

func sign(x int) int {
	switch {
	case x < 0:
		return -1
	case x > 0:
		return 1
	}
	return 0
}

func compareUTF16(a, b string) int {
	x, y := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	for i := 0; i < len(x) && i < len(y); i++ {
		if x[i] != y[i] {
			return int(x[i]) - int(y[i])
		}
	}
	return len(x) - len(y)
}

// keyRunes is the alphabet for generated keys and strings: ASCII, the
// characters RFC 8785 escapes, and the ranges where UTF-8 and UTF-16 order
// disagree (U+E000-U+FFFF versus supplementary characters).
var keyRunes = []rune{
	'a', 'b', 'z', 'A', '0', ' ', '/', '"', '\\', 0x7f, 0, 0x1f, '\b', '\t', '\n', '\f', '\r',
	0x80, 0xe9, 0xff, 0x100, 0x7ff, 0x800, 0x20ac, 0xd7ff, 0xe000, 0xe001, 0xfb33, 0xfeff, 0xfffd, 0xffff,
	0x10000, 0x1d11e, 0x1f600, 0x10ffff,
}

func randKey(rng *rand.Rand) string {
	n := rng.Intn(4)
	rs := make([]rune, n)
	for i := range rs {
		rs[i] = keyRunes[rng.Intn(len(keyRunes))]
	}
	return string(rs)
}

// generator writes random JSON with random (but valid) spellings.
type generator struct {
	rng *rand.Rand
	buf []byte
}

func (g *generator) ws() {
	for g.rng.Intn(4) == 0 {
		g.buf = append(g.buf, " \t\r\n"[g.rng.Intn(4)])
	}
}

func (g *generator) str(s string) {
	const hexLower, hexUpper = "0123456789abcdef", "0123456789ABCDEF"
	g.buf = append(g.buf, '"')
	for _, r := range s {
		mode := g.rng.Intn(4)
		short := strings.IndexRune("\"\\/\b\f\n\r\t", r)
		switch {
		case short >= 0 && (mode == 1 || ((r == '"' || r == '\\') && mode != 0)):
			g.buf = append(g.buf, '\\', `"\/bfnrt`[short])
		case mode == 0 || r == '"' || r == '\\' || r < 0x20:
			hex := hexLower
			if g.rng.Intn(2) == 0 {
				hex = hexUpper
			}
			for _, u := range utf16.Encode([]rune{r}) {
				g.buf = append(g.buf, '\\', 'u', hex[u>>12], hex[u>>8&15], hex[u>>4&15], hex[u&15])
			}
		default:
			g.buf = utf8.AppendRune(g.buf, r)
		}
	}
	g.buf = append(g.buf, '"')
}

func (g *generator) number() {
	rng := g.rng
	switch rng.Intn(7) {
	case 0:
		g.buf = strconv.AppendInt(g.buf, rng.Int63n(2000)-1000, 10)
	case 1:
		g.buf = strconv.AppendInt(g.buf, rng.Int63()>>uint(rng.Intn(63))*int64(1-2*rng.Intn(2)), 10)
	case 2: // price-like decimals, sometimes with trailing zeros
		g.buf = strconv.AppendInt(g.buf, rng.Int63n(100000), 10)
		g.buf = append(g.buf, '.')
		g.buf = append(g.buf, strconv.Itoa(rng.Intn(1000))...)
		if rng.Intn(3) == 0 {
			g.buf = append(g.buf, '0')
		}
	case 3: // "0.000ddd"
		g.buf = append(g.buf, "0."...)
		g.buf = append(g.buf, strings.Repeat("0", rng.Intn(9))...)
		g.buf = strconv.AppendInt(g.buf, rng.Int63n(1e18)+1, 10)
	default:
		var f float64
		for {
			f = math.Float64frombits(rng.Uint64())
			if !math.IsNaN(f) && !math.IsInf(f, 0) {
				break
			}
		}
		if rng.Intn(2) == 0 {
			f = float64(float32(f)) // fewer digits
			if math.IsInf(f, 0) {
				f = 1.5
			}
		}
		switch rng.Intn(4) {
		case 0:
			g.buf = strconv.AppendFloat(g.buf, f, 'g', -1, 64)
		case 1:
			g.buf = strconv.AppendFloat(g.buf, f, 'E', rng.Intn(20), 64)
		case 2:
			g.buf = strconv.AppendFloat(g.buf, f, 'e', -1, 64)
		default:
			if math.Abs(f) < 1e30 && math.Abs(f) > 1e-30 {
				g.buf = strconv.AppendFloat(g.buf, f, 'f', -1, 64)
			} else {
				g.buf = strconv.AppendFloat(g.buf, f, 'g', 17, 64)
			}
		}
	}
}

func (g *generator) value(depth int) {
	rng := g.rng
	k := rng.Intn(10)
	if depth > 4 && k < 4 {
		k += 4
	}
	if depth < 2 && k >= 4 && rng.Intn(6) != 0 {
		k = rng.Intn(4) // mostly containers near the top
	}
	switch {
	case k < 2:
		g.buf = append(g.buf, '{')
		seen := map[string]bool{}
		n := rng.Intn(8)
		if rng.Intn(8) == 0 {
			n += 20 // exercise the slices.SortFunc path
		}
		first := true
		for i := 0; i < n; i++ {
			key := randKey(rng)
			if seen[key] {
				continue
			}
			seen[key] = true
			if !first {
				g.buf = append(g.buf, ',')
			}
			first = false
			g.ws()
			g.str(key)
			g.ws()
			g.buf = append(g.buf, ':')
			g.ws()
			g.value(depth + 1)
			g.ws()
		}
		g.buf = append(g.buf, '}')
	case k < 4:
		g.buf = append(g.buf, '[')
		n := rng.Intn(6)
		for i := 0; i < n; i++ {
			if i > 0 {
				g.buf = append(g.buf, ',')
			}
			g.ws()
			g.value(depth + 1)
			g.ws()
		}
		g.buf = append(g.buf, ']')
	case k < 6:
		g.str(randKey(rng) + randKey(rng))
	case k < 9:
		g.number()
	default:
		g.buf = append(g.buf, []string{"true", "false", "null"}[rng.Intn(3)]...)
	}
}

// withInlineReorder runs f with objects reordered immediately (huge
// limit), always in the final pass (limit 0), and with the default.
func withInlineReorder(t *testing.T, f func(t *testing.T, c *Canonicalizer)) {
	for _, limit := range []int{0, -1, 1 << 30} {
		t.Run("inline="+strconv.Itoa(limit), func(t *testing.T) { f(t, &Canonicalizer{reorderLimit: limit}) })
	}
}

func TestCanonicalMatchesJCS(t *testing.T) {
	withInlineReorder(t, func(t *testing.T, c *Canonicalizer) {
		g := &generator{rng: rand.New(rand.NewSource(8785))}
		var out []byte
		total := 0
		for n := 0; n < 500; n++ {
			g.buf = g.buf[:0]
			g.ws()
			g.value(0)
			g.ws()
			doc := g.buf
			want, err := refjcs.Transform(doc)
			if err != nil {
				t.Fatalf("jcs rejects generated document %q: %v", doc, err)
			}
			out, err = c.Append(out[:0], doc)
			if err != nil {
				t.Fatalf("%q: %v", doc, err)
			}
			if !bytes.Equal(out, want) {
				t.Fatalf("%q:\n got  %q\n want %q", doc, out, want)
			}
			checkKeyOrder(t, out)
			total += len(doc)
			if n < 2 && testing.Verbose() {
				t.Logf("sample: %s\n   ->   %s", doc, out)
			}
		}
		t.Logf("%d documents, %d bytes", 500, total)
	})
}

// Deeply nested objects that all need reordering, around a large leaf: the
// output must be right, and (checked by the benchmark of the same shape)
// the work stays linear rather than depth x size.
func TestCanonicalDeepUnsorted(t *testing.T) {
	doc := deepUnsorted(maxDepth-1, 1<<16)
	withInlineReorder(t, func(t *testing.T, c *Canonicalizer) {
		want, err := refjcs.Transform(doc)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Append(nil, doc)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("mismatch with jcs (len %d vs %d)", len(got), len(want))
		}
	})
}

// deepUnsorted builds {"z":1,"a":{"z":1,"a":...["xxx…"]...}} with depth
// objects around an array holding a leafLen-byte string.
func deepUnsorted(depth, leafLen int) []byte {
	var b []byte
	for k := 0; k < depth; k++ {
		b = append(b, `{"z":1,"a":`...)
	}
	b = append(b, `["`...)
	b = append(b, bytes.Repeat([]byte("x"), leafLen)...)
	b = append(b, `"]`...)
	for k := 0; k < depth; k++ {
		b = append(b, '}')
	}
	return b
}

// checkKeyOrder independently checks (with encoding/json's tokenizer)
// that the keys of every object in doc are in strictly increasing UTF-16
// order.
func checkKeyOrder(t *testing.T, doc []byte) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(doc))
	type frame struct {
		object, wantKey bool
		last            *string
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("output %q: %v", doc, err)
			}
			return
		}
		if len(stack) > 0 && stack[len(stack)-1].object {
			top := &stack[len(stack)-1]
			if top.wantKey {
				if key, ok := tok.(string); ok {
					if top.last != nil && compareUTF16(*top.last, key) >= 0 {
						t.Fatalf("output %q: key %q not after %q", doc, key, *top.last)
					}
					top.last = &key
					top.wantKey = false
					continue
				}
			} else {
				top.wantKey = true
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{object: true, wantKey: true})
		case json.Delim('['):
			stack = append(stack, frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && stack[len(stack)-1].object {
				stack[len(stack)-1].wantKey = true
			}
		}
	}
}

func FuzzCanonical(f *testing.F) {
	f.Add(sampleOrder)
	f.Add([]byte(`{"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001], "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/", "literals": [null, true, false]}`))
	f.Add([]byte(`{"\u20ac": "Euro Sign", "\r": "Carriage Return", "\ufb33": "Hebrew Letter Dalet With Dagesh", "1": "One", "\ud83d\ude00": "Emoji: Grinning Face", "\u0080": "Control", "\u00f6": "Latin Small Letter O With Diaeresis"}`))
	f.Add([]byte("{\"\uE000\":1,\"\U00010000\":[0.0000001,-0,1e21,123456789012345678]}"))
	f.Add([]byte(`[1e400, "\ud800"]`))
	g := &generator{rng: rand.New(rand.NewSource(1))}
	for n := 0; n < 20; n++ {
		g.buf = nil
		g.value(0)
		f.Add(g.buf)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var c Canonicalizer
		got, err := c.Append(nil, data)
		want, jerr := refjcs.Transform(data)
		if err != nil {
			var je *inputError
			if !errors.As(err, &je) || je.off < 0 || je.off > len(data) {
				t.Fatalf("bad error %v (%T)", err, err)
			}
			if jerr == nil && json.Valid(data) {
				t.Fatalf("rejected valid JSON that jcs accepts: %v\njcs: %q", err, want)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON, produced %q", got)
		}
		if !utf8.Valid(got) || !json.Valid(got) {
			t.Fatalf("output is not valid UTF-8 JSON: %q", got)
		}
		if jerr == nil && !bytes.Equal(got, want) {
			t.Fatalf("mismatch with jcs:\n got  %q\n want %q", got, want)
		}
		// The final-pass reordering must agree with immediate reordering.
		deferredC := Canonicalizer{reorderLimit: -1}
		deferred, err := deferredC.Append(nil, data)
		if err != nil || !bytes.Equal(deferred, got) {
			t.Fatalf("final-pass reordering differs: %q, %v\nimmediate: %q", deferred, err, got)
		}
		again, err := c.Append(nil, got)
		if err != nil {
			t.Fatalf("canonical output rejected: %v\n%q", err, got)
		}
		if !bytes.Equal(again, got) {
			t.Fatalf("not idempotent:\n once  %q\n twice %q", got, again)
		}
	})
}
