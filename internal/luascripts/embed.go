// Package luascripts holds every Lua script watukuy runs in Redis, one file per step of the
// commit protocol. Each file starts with a header: KEYS, ARGV, the return value, and the
// check that runs before the first write. prelude.lua (clock and fence helpers) is prepended
// to each script when it is loaded, as far as the script uses it.
package luascripts

import (
	"embed"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"unicode"
)

//go:embed *.lua
var files embed.FS

// Names lists the scripts (without prelude.lua), for tests that check every header.
func Names() []string {
	entries, _ := files.ReadDir(".")
	var names []string
	for _, e := range entries {
		if e.Name() != "prelude.lua" {
			names = append(names, e.Name()[:len(e.Name())-len(".lua")])
		}
	}
	return names
}

// Source returns the named script with the prelude's definitions it uses prepended (those
// it names, and those they name): Redis runs a script's prelude at every call, so a script
// pays only for what it uses.
func Source(name string) (string, error) {
	src, ok := sources()[name]
	if !ok {
		return "", fmt.Errorf("luascripts: no script %q", name)
	}
	return src, nil
}

// sources builds every script's source once.
var sources = sync.OnceValue(func() map[string]string {
	prelude, err := files.ReadFile("prelude.lua")
	if err != nil {
		panic(fmt.Sprintf("luascripts: prelude: %v", err)) // embedded: present in every build
	}
	defs := definitions(string(prelude))
	out := map[string]string{}
	for _, name := range Names() {
		body, err := files.ReadFile(name + ".lua")
		if err != nil {
			panic(fmt.Sprintf("luascripts: %s: %v", name, err))
		}
		out[name] = used(defs, string(body)) + "\n" + string(body)
	}
	return out
})

// definition is one top-level local of the prelude (a function or a value) with the comment
// above it, and the names its text uses.
type definition struct {
	name, text string
	names      map[string]bool
}

var localName = regexp.MustCompile(`^local (?:function )?([A-Za-z_][A-Za-z0-9_]*)`)

// definitions splits the prelude at its top-level locals, each with the comment lines just
// above it.
func definitions(prelude string) []definition {
	lines := strings.SplitAfter(prelude, "\n")
	var defs []definition
	start := 0
	for i, line := range lines {
		m := localName.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		from := i
		for from > start && strings.HasPrefix(lines[from-1], "--") {
			from--
		}
		if len(defs) > 0 {
			defs[len(defs)-1].text = strings.Join(lines[start:from], "")
		} else if from > 0 {
			from = 0 // the file's own header goes with the first definition
		}
		defs = append(defs, definition{name: m[1]})
		start = from
	}
	if len(defs) > 0 {
		defs[len(defs)-1].text = strings.Join(lines[start:], "")
	}
	for i := range defs {
		defs[i].names = identifiers(defs[i].text)
	}
	return defs
}

// identifiers is the set of words (letters, digits, _) in text.
func identifiers(text string) map[string]bool {
	out := map[string]bool{}
	for _, w := range strings.FieldsFunc(text, func(r rune) bool { return r != '_' && !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		out[w] = true
	}
	return out
}

// used returns, in prelude order, the definitions body names and those they name in turn.
func used(defs []definition, body string) string {
	need := make([]bool, len(defs))
	var mark func(names map[string]bool)
	mark = func(names map[string]bool) {
		for i, d := range defs {
			if !need[i] && names[d.name] {
				need[i] = true
				mark(d.names)
			}
		}
	}
	mark(identifiers(body))
	var b strings.Builder
	for i, d := range defs {
		if need[i] {
			b.WriteString(d.text)
		}
	}
	return b.String()
}
