package admin

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/watukuy/watukuy/admintoken"
)

// CookieName is the cookie the status page's login form sets: it holds the token itself, so
// it is HttpOnly, SameSite=Strict and Secure when the request came over TLS.
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

// Authenticate finds the request's token in s: the Authorization header's bearer token, else the
// login cookie. ok is false when a token was sent but matches none (cred says which was sent),
// or when none was sent (cred NoCredential).
func Authenticate(s *admintoken.Set, r *http.Request) (t admintoken.Token, cred Credential, ok bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, secret, _ := strings.Cut(h, " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return admintoken.Token{}, Bearer, false
		}
		t, ok = s.Lookup(strings.TrimSpace(secret))
		return t, Bearer, ok
	}
	if c, err := r.Cookie(CookieName); err == nil && c.Value != "" {
		t, ok = s.Lookup(c.Value)
		return t, Cookie, ok
	}
	return admintoken.Token{}, NoCredential, false
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
