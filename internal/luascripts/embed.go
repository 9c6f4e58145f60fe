// Package luascripts holds every Lua script watukuy runs in Redis, one file per step of the
// commit protocol. Each file starts with a header: KEYS, ARGV, the return value, and the
// check that runs before the first write. prelude.lua (clock and fence helpers) is prepended
// to each script when it is loaded.
package luascripts

import (
	"embed"
	"fmt"
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

// Source returns the named script with the prelude prepended.
func Source(name string) (string, error) {
	prelude, err := files.ReadFile("prelude.lua")
	if err != nil {
		return "", fmt.Errorf("luascripts: prelude: %w", err)
	}
	body, err := files.ReadFile(name + ".lua")
	if err != nil {
		return "", fmt.Errorf("luascripts: %s: %w", name, err)
	}
	return string(prelude) + "\n" + string(body), nil
}
