package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
)

// CookieName is the cookie the status page's login form sets: it holds the token itself, so
// it is HttpOnly, SameSite=Strict and Secure when the request came over TLS.
const CookieName = "watukuy_admin"

// RequestHeader must accompany every request that acts (any method but GET and HEAD) and is
// authenticated by the cookie rather than the Authorization header: a cross-site form cannot
// set it, so a page elsewhere cannot act with an operator's cookie.
const RequestHeader = "X-Watukuy-Request"

// MinTokenLength is the shortest secret accepted: a bearer token is a password that is sent
// on every request, so it must not be guessable.
const MinTokenLength = 16

// Token is one bearer token of the admin API and the status page.
type Token struct {
	// ID names the token in the action log and errors; the secret is never logged.
	ID string
	// Secret is what clients send: "Authorization: Bearer <Secret>".
	Secret string
	// ReadOnly tokens can inspect but not act.
	ReadOnly bool
}

// Tokens is the set of tokens a server accepts. Several can be valid at once, so that one is
// rotated by adding the new one, moving clients, then removing the old one; Replace swaps the
// set while the server runs (a config reload). The zero value accepts nothing.
type Tokens struct {
	list atomic.Pointer[[]hashed]
}

type hashed struct {
	Token
	sum [sha256.Size]byte
}

// NewTokens checks ts (a secret of at least MinTokenLength characters, no two tokens with one
// ID or one secret) and returns the set. An empty ts is an empty set, which accepts nothing:
// the API is then off.
func NewTokens(ts []Token) (*Tokens, error) {
	set := &Tokens{}
	return set, set.Replace(ts)
}

// Replace checks ts as NewTokens does and, when they pass, makes them the set; otherwise the
// set is unchanged.
func (s *Tokens) Replace(ts []Token) error {
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
		list = append(list, hashed{Token: t, sum: sum})
	}
	s.list.Store(&list)
	return nil
}

// tokens is the current set.
func (s *Tokens) tokens() []hashed {
	if s == nil {
		return nil
	}
	if l := s.list.Load(); l != nil {
		return *l
	}
	return nil
}

// CheckSecret says what is wrong with a secret: too short, or a character that would not
// survive a header, a cookie or a comma-separated variable.
func CheckSecret(secret string) error {
	if len(secret) < MinTokenLength {
		return fmt.Errorf("the secret has %d characters, want at least %d (e.g. `openssl rand -hex 24`)", len(secret), MinTokenLength)
	}
	if i := strings.IndexFunc(secret, badSecretRune); i >= 0 {
		return fmt.Errorf("the secret holds %q at byte %d: use printable ASCII without spaces, commas, semicolons, quotes or backslashes", secret[i], i)
	}
	return nil
}

// badSecretRune is a character a secret cannot hold: it would not survive a cookie, a
// comma-separated variable or a header.
func badSecretRune(r rune) bool {
	return r <= ' ' || r > '~' || strings.ContainsRune(`,;"\`, r)
}

// ParseEnv reads tokens from an environment variable's value: comma-separated secrets, named
// prefix#1, prefix#2... in that order (WATUKUY_ADMIN_TOKEN gives env#1...).
func ParseEnv(value, prefix string, readOnly bool) []Token {
	var ts []Token
	for _, s := range strings.Split(value, ",") {
		if s = strings.TrimSpace(s); s != "" {
			ts = append(ts, Token{ID: fmt.Sprintf("%s#%d", prefix, len(ts)+1), Secret: s, ReadOnly: readOnly})
		}
	}
	return ts
}

// Len is the number of tokens; 0 means the API and the status page are off.
func (s *Tokens) Len() int { return len(s.tokens()) }

// Lookup returns the token whose secret is secret. Every token is compared, each in constant
// time over the secrets' hashes, so the time taken says nothing about which secret came close.
func (s *Tokens) Lookup(secret string) (Token, bool) {
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

// Credential is how a request authenticated.
type Credential int

const (
	// NoCredential: the request carried no token.
	NoCredential Credential = iota
	// Bearer: an Authorization: Bearer header.
	Bearer
	// Cookie: the status page's login cookie.
	Cookie
)

// Authenticate finds the request's token: the Authorization header's bearer token, else the
// login cookie. ok is false when a token was sent but matches none (cred says which was sent),
// or when none was sent (cred NoCredential).
func (s *Tokens) Authenticate(r *http.Request) (t Token, cred Credential, ok bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, secret, _ := strings.Cut(h, " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return Token{}, Bearer, false
		}
		t, ok = s.Lookup(strings.TrimSpace(secret))
		return t, Bearer, ok
	}
	if c, err := r.Cookie(CookieName); err == nil && c.Value != "" {
		t, ok = s.Lookup(c.Value)
		return t, Cookie, ok
	}
	return Token{}, NoCredential, false
}

// LoginCookie is the cookie that keeps secret for the status page (Secure when r came over
// TLS); LogoutCookie clears it.
func LoginCookie(r *http.Request, secret string) *http.Cookie {
	return &http.Cookie{Name: CookieName, Value: secret, Path: "/", HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode}
}

// LogoutCookie clears the login cookie.
func LogoutCookie(r *http.Request) *http.Cookie {
	return &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode}
}
