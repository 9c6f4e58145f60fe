// Package admintoken holds the bearer tokens of watukuy's admin API and status page: a Set a
// server accepts, made with NewSet and swapped while it runs with Replace (a token is rotated
// by adding the new one, moving clients, then removing the old one). pool.Options.Admin takes
// one.
package admintoken

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
)

// MinLength is the shortest secret accepted: a bearer token is a password that is sent
// on every request, so it must not be guessable.
const MinLength = 16

// Token is one bearer token of the admin API and the status page.
type Token struct {
	// ID names the token in the action log and errors; the secret is never logged.
	ID string
	// Secret is what clients send: "Authorization: Bearer <Secret>".
	Secret string
	// ReadOnly tokens can inspect but not act.
	ReadOnly bool
}

// Set is the set of tokens a server accepts. Several can be valid at once, so that one is
// rotated by adding the new one, moving clients, then removing the old one; Replace swaps the
// set while the server runs (a config reload). The zero value accepts nothing.
type Set struct {
	list atomic.Pointer[[]hashed]
}

type hashed struct {
	Token
	sum [sha256.Size]byte
	fp  [FingerprintSize]byte
}

// FingerprintSize is the length of a Fingerprint.
const FingerprintSize = 8

// Fingerprint names a secret without revealing it: the first FingerprintSize bytes of an
// HMAC-SHA256 of the secret under a fixed label. A status page session carries its token's
// fingerprint, so that the session ends when that token leaves the set.
func Fingerprint(secret string) [FingerprintSize]byte {
	m := hmac.New(sha256.New, []byte("watukuy admin token fingerprint"))
	m.Write([]byte(secret))
	var fp [FingerprintSize]byte
	copy(fp[:], m.Sum(nil))
	return fp
}

// NewSet checks ts (a secret of at least MinLength characters, no two tokens with one
// ID or one secret) and returns the set. An empty ts is an empty set, which accepts nothing:
// the API is then off.
func NewSet(ts ...Token) (*Set, error) {
	set := &Set{}
	return set, set.Replace(ts)
}

// Replace checks ts as NewSet does and, when they pass, makes them the set; otherwise the
// set is unchanged.
func (s *Set) Replace(ts []Token) error {
	var list []hashed
	ids := map[string]bool{}
	secrets := map[[sha256.Size]byte]string{}
	for i, t := range ts {
		if t.ID == "" {
			t.ID = fmt.Sprintf("token-%d", i+1)
		}
		if ids[t.ID] {
			return fmt.Errorf("admin token %q: two tokens have this id", t.ID)
		}
		ids[t.ID] = true
		if err := CheckSecret(t.Secret); err != nil {
			return fmt.Errorf("admin token %q: %w", t.ID, err)
		}
		sum := sha256.Sum256([]byte(t.Secret))
		if other, dup := secrets[sum]; dup {
			return fmt.Errorf("admin token %q: the same secret as token %q", t.ID, other)
		}
		secrets[sum] = t.ID
		fp := Fingerprint(t.Secret)
		for _, o := range list {
			if o.fp == fp { // 2^-64 by chance; refused so that a fingerprint names one token
				return fmt.Errorf("admin token %q: its fingerprint is token %q's: make another secret", t.ID, o.ID)
			}
		}
		list = append(list, hashed{Token: t, sum: sum, fp: fp})
	}
	s.list.Store(&list)
	return nil
}

// tokens is the current set.
func (s *Set) tokens() []hashed {
	if s == nil {
		return nil
	}
	if l := s.list.Load(); l != nil {
		return *l
	}
	return nil
}

// Errors of CheckSecret. They say what is wrong and never quote the secret: not a character,
// not its length, not where the fault is (the message reaches logs and terminals).
var (
	ErrSecretShort = fmt.Errorf("the secret is too short: want at least %d characters (e.g. `openssl rand -hex 24`)", MinLength)
	ErrSecretChars = errors.New("the secret holds a character that is not allowed: use printable ASCII without spaces, commas, semicolons, quotes or backslashes")
)

// CheckSecret says what is wrong with a secret: too short (ErrSecretShort), or a character
// that would not survive a header, a cookie or a comma-separated variable (ErrSecretChars).
func CheckSecret(secret string) error {
	if len(secret) < MinLength {
		return ErrSecretShort
	}
	if strings.IndexFunc(secret, badSecretRune) >= 0 {
		return ErrSecretChars
	}
	return nil
}

// badSecretRune is a character a secret cannot hold: it would not survive a cookie, a
// comma-separated variable or a header.
func badSecretRune(r rune) bool {
	return r <= ' ' || r > '~' || strings.ContainsRune(`,;"\`, r)
}

// Len is the number of tokens; 0 means the API and the status page are off.
func (s *Set) Len() int { return len(s.tokens()) }

// Lookup returns the token whose secret is secret. Every token is compared, each in constant
// time over the secrets' hashes, so the time taken says nothing about which secret came close.
func (s *Set) Lookup(secret string) (Token, bool) {
	list := s.tokens()
	if secret == "" {
		return Token{}, false
	}
	sum := sha256.Sum256([]byte(secret))
	found := -1
	for i := range list {
		if subtle.ConstantTimeCompare(sum[:], list[i].sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Token{}, false
	}
	return list[found].Token, true
}

// LookupFingerprint returns the token whose secret has the fingerprint fp (Fingerprint). Like
// Lookup it compares every token in constant time.
func (s *Set) LookupFingerprint(fp [FingerprintSize]byte) (Token, bool) {
	list := s.tokens()
	found := -1
	for i := range list {
		if subtle.ConstantTimeCompare(fp[:], list[i].fp[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Token{}, false
	}
	return list[found].Token, true
}
