package admin

import (
	"fmt"
	"strings"

	"github.com/watukuy/watukuy/admintoken"
)

// CookieName is the cookie the status page's login form sets (Login.Cookie): HttpOnly,
// SameSite=Strict, Secure over HTTPS.
const CookieName = "watukuy_admin"

// RequestHeader must accompany every request that acts (any method but GET and HEAD) and is
// authenticated by the cookie rather than the Authorization header: a cross-site form cannot
// set it, so a page elsewhere cannot act with an operator's cookie.
const RequestHeader = "X-Watukuy-Request"

// ParseEnv reads tokens from an environment variable's value: comma-separated secrets, named
// prefix#1, prefix#2... in that order (WATUKUY_ADMIN_TOKEN gives env#1...).
func ParseEnv(value, prefix string, readOnly bool) []admintoken.Token {
	var ts []admintoken.Token
	for _, s := range strings.Split(value, ",") {
		if s = strings.TrimSpace(s); s != "" {
			ts = append(ts, admintoken.Token{ID: fmt.Sprintf("%s#%d", prefix, len(ts)+1), Secret: s, ReadOnly: readOnly})
		}
	}
	return ts
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

// bearer is the token of an Authorization header's value: "Bearer <secret>", the scheme in any
// case, spaces around the secret ignored.
func bearer(s *admintoken.Set, h string) (admintoken.Token, bool) {
	scheme, secret, _ := strings.Cut(h, " ")
	if !strings.EqualFold(scheme, "Bearer") {
		return admintoken.Token{}, false
	}
	return s.Lookup(strings.TrimSpace(secret))
}
