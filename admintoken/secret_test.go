package admintoken_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/watukuy/watukuy/admintoken"
)

// A refused secret's error, as NewSet and Replace return it (and a reload logs it), holds no
// character of the secret, not its length and not the place of the bad character.
func TestCheckSecretQuotesNothing(t *testing.T) {
	for _, c := range []struct {
		name, secret string
		want         error
	}{
		{"short", "Zq7#Wk", admintoken.ErrSecretShort},
		{"short by one", "Zq7-Wk2-Vx9-Jm4", admintoken.ErrSecretShort},
		{"space", "Zq7-Wk2 Vx9-Jm4-Pt8", admintoken.ErrSecretChars},
		{"semicolon", "Zq7-Wk2;Vx9-Jm4-Pt8", admintoken.ErrSecretChars},
		{"quote", `Zq7-Wk2"Vx9-Jm4-Pt8`, admintoken.ErrSecretChars},
		{"backslash", `Zq7-Wk2\Vx9-Jm4-Pt8`, admintoken.ErrSecretChars},
		{"newline", "Zq7-Wk2-Vx9-Jm4-Pt8\n", admintoken.ErrSecretChars},
		{"non-ASCII", "Zq7-Wk2-Vx9-Jm4-Pt8é", admintoken.ErrSecretChars},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := admintoken.CheckSecret(c.secret)
			if !errors.Is(err, c.want) {
				t.Fatalf("CheckSecret: %v, want %v", err, c.want)
			}
			_, serr := admintoken.NewSet(admintoken.Token{ID: "ops", Secret: c.secret})
			if !errors.Is(serr, c.want) {
				t.Fatalf("NewSet: %v, want %v", serr, c.want)
			}
			for _, msg := range []string{err.Error(), serr.Error()} {
				msg = strings.TrimPrefix(msg, `admin token "ops": `)
				if msg != c.want.Error() {
					t.Errorf("%q: the message must depend on the kind of fault only", msg)
				}
				for i := range len(c.secret) { // the character quoted as %q would quote it
					if q := fmt.Sprintf("%q", c.secret[i]); strings.Contains(msg, q) {
						t.Errorf("%q quotes the secret's character %s", msg, q)
					}
				}
				for _, n := range []int{len(c.secret), len([]rune(c.secret))} {
					if strings.Contains(msg, " "+strconv.Itoa(n)+" ") {
						t.Errorf("%q gives the secret's length %d", msg, n)
					}
				}
			}
		})
	}
}

// A session names its token by a fingerprint: LookupFingerprint finds the token while it is
// in the set and nothing once Replace removed it; the fingerprint does not hold the secret.
func TestLookupFingerprint(t *testing.T) {
	const ops, dash = "ops-secret-0123456789", "dash-secret-0123456789"
	set, err := admintoken.NewSet(admintoken.Token{ID: "ops", Secret: ops}, admintoken.Token{ID: "dash", Secret: dash, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	fp := admintoken.Fingerprint(ops)
	if fp == admintoken.Fingerprint(dash) || fp != admintoken.Fingerprint(ops) {
		t.Fatal("fingerprints are not one per secret")
	}
	if strings.Contains(string(fp[:]), ops[:4]) {
		t.Fatal("the fingerprint holds the secret")
	}
	if tok, ok := set.LookupFingerprint(admintoken.Fingerprint(dash)); !ok || tok.ID != "dash" || !tok.ReadOnly {
		t.Fatalf("lookup: %+v %v", tok, ok)
	}
	if err := set.Replace([]admintoken.Token{{ID: "dash", Secret: dash}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := set.LookupFingerprint(fp); ok {
		t.Fatal("a removed token's fingerprint still names it")
	}
	var none *admintoken.Set
	if _, ok := none.LookupFingerprint(fp); ok {
		t.Fatal("a nil set found a token")
	}
}
