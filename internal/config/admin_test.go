package config

import (
	"strings"
	"testing"

	"github.com/watukuy/watukuy/admintoken"
)

// admin.tokens: several tokens (rotation), read-only ones, secrets from the environment; each
// mistake names the file, line and field.
func TestAdminTokens(t *testing.T) {
	yaml := "admin:\n  tokens:\n    - {id: ops, token: \"${OPS}\"}\n    - token: dashboards-token-0123\n      readOnly: true\n" + valid
	cfg, err := Parse("w.yaml", []byte(yaml), envOf(map[string]string{"OPS": "ops-token-0123456789"}))
	if err != nil {
		t.Fatal(err)
	}
	got := cfg.Admin.AdminTokens()
	want := []admintoken.Token{{ID: "ops", Secret: "ops-token-0123456789"}, {ID: "admin.tokens[1]", Secret: "dashboards-token-0123", ReadOnly: true}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("tokens %+v, want %+v", got, want)
	}
	if _, err := admintoken.NewSet(got...); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct{ name, block, want string }{
		{"short", "admin:\n  tokens:\n    - {token: short}\n", `w.yaml:3:15: admin.tokens[0].token: the secret is too short: want at least 16 characters`},
		{"unset variable", "admin:\n  tokens:\n    - {token: \"${NOPE}\"}\n", `admin.tokens[0].token: environment variable "NOPE" is not set`},
		{"no token", "admin:\n  tokens:\n    - {id: ops}\n", `w.yaml:3:7: admin.tokens[0].token: required`},
		{"duplicate id", "admin:\n  tokens:\n    - {id: a, token: aaaaaaaaaaaaaaaaaaaa}\n    - {id: a, token: bbbbbbbbbbbbbbbbbbbb}\n", `w.yaml:4:7: admin.tokens[1].id: duplicate token id "a" (first at line 3`},
		{"duplicate token", "admin:\n  tokens:\n    - {token: aaaaaaaaaaaaaaaaaaaa}\n    - {token: aaaaaaaaaaaaaaaaaaaa}\n", `admin.tokens[1].token: the same token as admin.tokens[0]`},
		{"unknown key", "admin:\n  tokens:\n    - {token: aaaaaaaaaaaaaaaaaaaa, readonly: true}\n", `admin.tokens[0].readonly: unknown key "readonly" (did you mean "readOnly"?)`},
		{"not a bool", "admin:\n  tokens:\n    - {token: aaaaaaaaaaaaaaaaaaaa, readOnly: maybe}\n", `admin.tokens[0].readOnly`},
		{"bad key in admin", "admin:\n  token: x\n", `w.yaml:2:3: admin.token: unknown key "token"`},
	} {
		_, err := Parse("w.yaml", []byte(c.block+valid), envOf(nil))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\nwant %s", c.name, err, c.want)
		}
	}
}
