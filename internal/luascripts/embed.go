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
	prelude, err := files.ReadFile("prelude.lua")
	if err != nil {
		return "", fmt.Errorf("luascripts: prelude: %w", err)
	}
	body, err := files.ReadFile(name + ".lua")
	if err != nil {
		return "", fmt.Errorf("luascripts: %s: %w", name, err)
	}
	return used(definitions(string(prelude)), string(body)) + "\n" + string(body), nil
}

// definition is one top-level local of the prelude (a function or a value) with the comment
// above it.
type definition struct {
	name, text string
	named      *regexp.Regexp // the name as a word
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
		defs = append(defs, definition{name: m[1], named: regexp.MustCompile(`\b` + m[1] + `\b`)})
		start = from
	}
	if len(defs) > 0 {
		defs[len(defs)-1].text = strings.Join(lines[start:], "")
	}
	return defs
}

// used returns, in prelude order, the definitions body names and those they name in turn.
func used(defs []definition, body string) string {
	need := make([]bool, len(defs))
	var mark func(text string)
	mark = func(text string) {
		for i, d := range defs {
			if !need[i] && d.named.MatchString(text) {
				need[i] = true
				mark(d.text)
			}
		}
	}
	mark(body)
	var b strings.Builder
	for i, d := range defs {
		if need[i] {
			b.WriteString(d.text)
		}
	}
	return b.String()
}
