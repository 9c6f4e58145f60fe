package admintoken_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/watukuy/watukuy/admintoken"
)

const (
	opsSecret  = "ops-secret-0123456789"
	readSecret = "read-secret-0123456789"
)

// A set refuses secrets that are too short or hold odd characters, and two tokens with one id
// or one secret; lookups find the right token and nothing for a near miss.
func TestNewSet(t *testing.T) {
	for _, c := range []struct {
		name string
		ts   []admintoken.Token
		want string
	}{
		{"short", []admintoken.Token{{Secret: "short"}}, "at least 16"},
		{"space", []admintoken.Token{{Secret: "0123456789 abcdef"}}, "printable ASCII"},
		{"semicolon", []admintoken.Token{{Secret: "0123456789;abcdef"}}, "printable ASCII"},
		{"same id", []admintoken.Token{{ID: "a", Secret: opsSecret}, {ID: "a", Secret: readSecret}}, "two tokens"},
		{"same secret", []admintoken.Token{{ID: "a", Secret: opsSecret}, {ID: "b", Secret: opsSecret}}, "same secret"},
	} {
		if _, err := admintoken.NewSet(c.ts...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	set, err := admintoken.NewSet(admintoken.Token{ID: "ops", Secret: opsSecret}, admintoken.Token{Secret: readSecret, ReadOnly: true})
	if err != nil || set.Len() != 2 {
		t.Fatalf("%v %d", err, set.Len())
	}
	if tok, ok := set.Lookup(readSecret); !ok || tok.ID != "token-2" || !tok.ReadOnly {
		t.Fatalf("lookup: %+v %v", tok, ok)
	}
	if _, ok := set.Lookup(readSecret + "x"); ok {
		t.Fatal("a longer secret matched")
	}
	if err := set.Replace([]admintoken.Token{{Secret: "short"}}); err == nil || set.Len() != 2 {
		t.Fatalf("a refused Replace: %v, %d tokens left", err, set.Len())
	}
}

// A server's tokens, with one that may only read; Replace rotates them while it runs.
func ExampleNewSet() {
	set, err := admintoken.NewSet(
		admintoken.Token{ID: "ops", Secret: "ops-secret-0123456789"},
		admintoken.Token{ID: "dashboard", Secret: "read-secret-0123456789", ReadOnly: true},
	)
	if err != nil {
		panic(err)
	}
	tok, _ := set.Lookup("read-secret-0123456789")
	fmt.Println(tok.ID, tok.ReadOnly) // pool.New(eng, pool.Options{Admin: set}) serves the admin API with them
	// Output: dashboard true
}
