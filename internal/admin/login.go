package admin

import (
	"container/list"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/watukuy/watukuy/admintoken"
)

// Defaults of LoginOptions.
const (
	// DefaultSessionTTL is how long a status page login lasts.
	DefaultSessionTTL = 12 * time.Hour
	// DefaultFreeFailures is how many failed logins a client has before it must wait.
	DefaultFreeFailures = 5
	// DefaultFailureDelay is the first wait; each further failure doubles it.
	DefaultFailureDelay = time.Second
	// DefaultMaxFailureDelay caps the wait.
	DefaultMaxFailureDelay = 5 * time.Minute
	// DefaultFailureMemory is how long a client's failures are remembered after its last one.
	DefaultFailureMemory = time.Hour
	// DefaultMaxClients bounds the clients whose failures are remembered; past it the one that
	// failed least recently is forgotten.
	DefaultMaxClients = 10000
)

// LoginPolicy is what the status page believes about the way it is reached.
type LoginPolicy struct {
	// SecureCookies marks the login cookie Secure on every request: the page is reached over
	// HTTPS through a proxy that speaks plain HTTP to the listener. (A browser drops a Secure
	// cookie set over plain HTTP, so set it only when the page is reached over HTTPS.)
	SecureCookies bool
	// TrustedProxies are the proxies whose X-Forwarded-Proto (the cookie is Secure when it
	// says https) and X-Forwarded-For (the client whose failed logins are counted) are
	// believed, matched against the request's remote address. Headers from anyone else are
	// ignored: a client could write them.
	TrustedProxies []netip.Prefix
}

// LoginOptions configures a Login.
type LoginOptions struct {
	// Tokens are the admin API's tokens: a session is valid while the token it was made with is
	// in the set (Replace ends the sessions of a token it removes).
	Tokens *admintoken.Set
	// Policy is the initial LoginPolicy; SetPolicy changes it.
	Policy LoginPolicy
	// SessionTTL is how long a session lasts (default DefaultSessionTTL).
	SessionTTL time.Duration
	// FreeFailures, FailureDelay, MaxFailureDelay, FailureMemory and MaxClients shape how
	// failed logins slow a client down (defaults: the Default... constants).
	FreeFailures    int
	FailureDelay    time.Duration
	MaxFailureDelay time.Duration
	FailureMemory   time.Duration
	MaxClients      int
	// Now is the clock of session expiry and of the failure counts (default time.Now).
	Now func() time.Time
}

// Login is the status page's login: it makes and checks the session the login cookie
// holds, decides when the cookie is Secure, and slows down clients whose logins fail. One
// Login serves a process's status page and admin API; it is safe for concurrent use.
//
// A session is opaque and signed: a random id, the fingerprint of the token it was made with
// (admintoken.Fingerprint), its expiry and an HMAC-SHA256 of those under a key derived from
// that token's secret. It holds no secret, cannot be made without the token, ends at its
// expiry, and ends when its token leaves the set. Its key depends on the token alone, so a
// session outlives a restart and is valid on every process that has the token.
type Login struct {
	o        LoginOptions
	policy   atomic.Pointer[LoginPolicy]
	failures *failures
}

// NewLogin returns a Login with o's defaults filled in.
func NewLogin(o LoginOptions) *Login {
	if o.SessionTTL <= 0 {
		o.SessionTTL = DefaultSessionTTL
	}
	if o.FreeFailures <= 0 {
		o.FreeFailures = DefaultFreeFailures
	}
	if o.FailureDelay <= 0 {
		o.FailureDelay = DefaultFailureDelay
	}
	if o.MaxFailureDelay <= 0 {
		o.MaxFailureDelay = DefaultMaxFailureDelay
	}
	if o.FailureMemory <= 0 {
		o.FailureMemory = DefaultFailureMemory
	}
	if o.MaxClients <= 0 {
		o.MaxClients = DefaultMaxClients
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	l := &Login{o: o, failures: &failures{byClient: map[string]*list.Element{}, lru: list.New()}}
	l.SetPolicy(o.Policy)
	return l
}

// SetPolicy replaces the policy (a config reload).
func (l *Login) SetPolicy(p LoginPolicy) {
	p.TrustedProxies = append([]netip.Prefix(nil), p.TrustedProxies...)
	l.policy.Store(&p)
}

// Authenticate finds r's token: the Authorization header's bearer token (as the package's
// Authenticate), else the session in the login cookie. ok is false when a credential was sent
// but is not accepted (cred says which: a cookie whose session expired, was forged or whose
// token was removed is a Cookie), or when none was sent (cred NoCredential).
func (l *Login) Authenticate(r *http.Request) (t admintoken.Token, cred Credential, ok bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		t, ok = bearer(l.o.Tokens, h)
		return t, Bearer, ok
	}
	if c, err := r.Cookie(CookieName); err == nil && c.Value != "" {
		t, ok = l.session(c.Value)
		return t, Cookie, ok
	}
	return admintoken.Token{}, NoCredential, false
}

// Session encoding: version, random id, token fingerprint, expiry (Unix seconds), then the
// HMAC-SHA256 of those; base64url without padding.
const (
	sessionVersion = 1
	sessionIDSize  = 16
	sessionBody    = 1 + sessionIDSize + admintoken.FingerprintSize + 8
	sessionSize    = sessionBody + sha256.Size
)

// sessionKey is the key the sessions of a token are signed with: derived from its secret, so
// that no key has to be stored or shared between processes.
func sessionKey(secret string) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("watukuy status page session"))
	return m.Sum(nil)
}

// NewSession returns a session of t, valid for the SessionTTL from now.
func (l *Login) NewSession(t admintoken.Token) (string, error) {
	b := make([]byte, sessionBody, sessionSize)
	b[0] = sessionVersion
	if _, err := rand.Read(b[1 : 1+sessionIDSize]); err != nil {
		return "", fmt.Errorf("a session id: %w", err)
	}
	fp := admintoken.Fingerprint(t.Secret)
	copy(b[1+sessionIDSize:], fp[:])
	binary.BigEndian.PutUint64(b[sessionBody-8:], uint64(l.o.Now().Add(l.o.SessionTTL).Unix()))
	m := hmac.New(sha256.New, sessionKey(t.Secret))
	m.Write(b)
	return base64.RawURLEncoding.EncodeToString(m.Sum(b)), nil
}

// session returns the token of a session value, if the session is well formed, signed by
// that token, unexpired, and its token is still in the set.
func (l *Login) session(v string) (admintoken.Token, bool) {
	if len(v) != base64.RawURLEncoding.EncodedLen(sessionSize) {
		return admintoken.Token{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil || len(b) != sessionSize || b[0] != sessionVersion {
		return admintoken.Token{}, false
	}
	var fp [admintoken.FingerprintSize]byte
	copy(fp[:], b[1+sessionIDSize:])
	t, ok := l.o.Tokens.LookupFingerprint(fp)
	if !ok {
		return admintoken.Token{}, false // its token was removed (or it never was one)
	}
	m := hmac.New(sha256.New, sessionKey(t.Secret))
	m.Write(b[:sessionBody])
	if !hmac.Equal(m.Sum(nil), b[sessionBody:]) {
		return admintoken.Token{}, false
	}
	exp := int64(binary.BigEndian.Uint64(b[sessionBody-8 : sessionBody]))
	if l.o.Now().Unix() >= exp {
		return admintoken.Token{}, false
	}
	return t, true
}

// Cookie is the login cookie holding a new session of t: HttpOnly, SameSite=Strict, Secure
// as Secure says, kept by the browser as long as the session lasts.
func (l *Login) Cookie(r *http.Request, t admintoken.Token) (*http.Cookie, error) {
	v, err := l.NewSession(t)
	if err != nil {
		return nil, err
	}
	return &http.Cookie{Name: CookieName, Value: v, Path: "/", MaxAge: int(l.o.SessionTTL / time.Second),
		HttpOnly: true, Secure: l.Secure(r), SameSite: http.SameSiteStrictMode}, nil
}

// LogoutCookie clears the login cookie.
func (l *Login) LogoutCookie(r *http.Request) *http.Cookie {
	return &http.Cookie{Name: CookieName, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, Secure: l.Secure(r), SameSite: http.SameSiteStrictMode}
}

// Secure reports whether r reached the page over HTTPS: its own TLS, the policy's
// SecureCookies, or X-Forwarded-Proto https from a trusted proxy.
func (l *Login) Secure(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	p := l.policy.Load()
	if p.SecureCookies {
		return true
	}
	if !p.trusted(remoteAddr(r)) {
		return false
	}
	// The last value is the one the trusted proxy (the nearest hop) wrote.
	protos := r.Header.Values("X-Forwarded-Proto")
	if len(protos) == 0 {
		return false
	}
	last := protos[len(protos)-1]
	if i := strings.LastIndexByte(last, ','); i >= 0 {
		last = last[i+1:]
	}
	return strings.EqualFold(strings.TrimSpace(last), "https")
}

// Client is the address of the client that sent r: its remote address, or, when that is a
// trusted proxy, the nearest address of X-Forwarded-For that is not a trusted proxy (the
// entries left of it could be written by the client). The zero Addr when none can be read.
func (l *Login) Client(r *http.Request) netip.Addr {
	p := l.policy.Load()
	a := remoteAddr(r)
	if !p.trusted(a) {
		return a
	}
	var hops []string
	for _, h := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(h, ",")...)
	}
	for i := len(hops) - 1; i >= 0; i-- {
		hop, ok := parseHop(hops[i])
		if !ok {
			break // a malformed entry: nothing left of it is believed
		}
		a = hop
		if !p.trusted(a) {
			break
		}
	}
	return a
}

// trusted reports whether a is one of the policy's proxies.
func (p *LoginPolicy) trusted(a netip.Addr) bool {
	if !a.IsValid() {
		return false
	}
	for _, pr := range p.TrustedProxies {
		if pr.Contains(a) || pr.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

// remoteAddr is the address r's connection came from (zero when it cannot be read).
func remoteAddr(r *http.Request) netip.Addr {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap().WithZone("")
}

// parseHop reads one X-Forwarded-For entry: an address, with or without a port.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if a, err := netip.ParseAddr(strings.Trim(s, "[]")); err == nil {
		return a.Unmap().WithZone(""), true
	}
	return netip.Addr{}, false
}

// clientKey is what failed logins are counted by: the IPv4 address, or the /64 of an IPv6
// one (a single host usually holds a whole /64).
func clientKey(a netip.Addr) string {
	if !a.IsValid() {
		return "unknown"
	}
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// Wait is how long r's client must wait before its next login attempt; 0 when it may try
// now. While it must wait, an attempt is answered 429 with Retry-After and its token is not
// even checked.
func (l *Login) Wait(r *http.Request) time.Duration {
	return l.failures.wait(clientKey(l.Client(r)), l.o.Now())
}

// Failed records a failed login of r's client and returns how long it must now wait before the
// next attempt (0 while it has failed fewer than FreeFailures times).
func (l *Login) Failed(r *http.Request) time.Duration {
	return l.failures.fail(clientKey(l.Client(r)), l.o.Now(), l.o)
}

// Succeeded forgets the failures of r's client.
func (l *Login) Succeeded(r *http.Request) { l.failures.forget(clientKey(l.Client(r))) }

// failures counts failed logins per client, for at most MaxClients clients: an LRU list, the
// client that failed most recently in front.
type failures struct {
	mu       sync.Mutex
	byClient map[string]*list.Element // of *failure
	lru      *list.List
}

// failure is one client's record.
type failure struct {
	client string
	count  int       // failures since the record began
	last   time.Time // the latest failure
	until  time.Time // no attempt before this
}

func (f *failures) wait(client string, now time.Time) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.byClient[client]
	if !ok {
		return 0
	}
	return max(e.Value.(*failure).until.Sub(now), 0)
}

func (f *failures) fail(client string, now time.Time, o LoginOptions) time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.byClient[client]
	if !ok {
		if f.lru.Len() >= o.MaxClients {
			oldest := f.lru.Back()
			f.lru.Remove(oldest)
			delete(f.byClient, oldest.Value.(*failure).client)
		}
		e = f.lru.PushFront(&failure{client: client})
		f.byClient[client] = e
	}
	f.lru.MoveToFront(e)
	c := e.Value.(*failure)
	if !c.last.IsZero() && now.Sub(c.last) >= o.FailureMemory {
		*c = failure{client: client} // quiet long enough: start over
	}
	c.count++
	c.last = now
	if c.count < o.FreeFailures {
		return 0
	}
	d := o.FailureDelay
	for i := o.FreeFailures; i < c.count && d < o.MaxFailureDelay; i++ {
		d *= 2
	}
	d = min(d, o.MaxFailureDelay)
	c.until = now.Add(d)
	return d
}

func (f *failures) forget(client string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.byClient[client]; ok {
		f.lru.Remove(e)
		delete(f.byClient, client)
	}
}
