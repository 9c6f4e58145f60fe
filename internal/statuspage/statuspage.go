// Package statuspage serves watukuy's status page: a server-rendered HTML view of every key
// (status, freshness, lag, schedule, outbox, parked rows, last error) with a detail page per
// key, behind the admin API's tokens. Its buttons call the admin API (/api/..., internal/admin)
// from the browser with fetch(), authenticated by the login cookie. Templates, CSS and JS are
// embedded: there is no build step and nothing is loaded from another origin.
package statuspage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/admintoken"
	"github.com/watukuy/watukuy/internal/admin"
	"github.com/watukuy/watukuy/watukuytype"
)

// Root is the path the page is served under; the handler expects the full path (mount it at
// Root and Root+"/", without http.StripPrefix).
const Root = "/status"

// APIRoot is where the page's buttons send their requests: the admin API on the same
// listener.
const APIRoot = "/api"

const (
	// maxRows bounds the main table: beyond it the keys are paged (?after=, the last key of the
	// page before), because each key is one Inspect (a round trip) and a page of a million rows
	// helps nobody. At most the engine's page size (1,000).
	maxRows = 500
	// maxParkedRows bounds the parked rows a detail page lists; beyond it they are paged
	// (?after=, the id of the page's last row).
	maxParkedRows = 100
	// maxLoginBody bounds the login form: a token is at most a few hundred bytes.
	maxLoginBody = 16 << 10
	// inspectTimeout bounds the Redis reads of one page.
	inspectTimeout = 20 * time.Second
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// Options configures the status page.
type Options struct {
	// Engine is the engine whose keys the page shows (it reads Redis only: any process's
	// engine does, the pollers come from the registry). Required.
	Engine *watukuy.Engine
	// Tokens are the admin API's tokens; a valid one logs in. With none the page shows that it
	// is off.
	Tokens *admintoken.Set
	// Login makes and checks the login cookie's sessions and slows down failed logins; share
	// it with the admin API (admin.Options.Login). Default: admin.NewLogin over Tokens.
	Login *admin.Login
	// Logger logs logins, failed logins and logouts (token id and remote address, never the
	// secret) and the engine's errors.
	Logger zerolog.Logger
	// MonitoringPath, when set (e.g. "/monitoring/"), is linked from the page as the queue's UI
	// (asynqmon).
	MonitoringPath string
	// Now is the clock the page's relative times ("in 4s", "3m ago") are rendered with;
	// default time.Now.
	Now func() time.Time
}

// handler serves the page; everything it holds is set by New and read-only afterwards.
type handler struct {
	o         Options
	pages     map[string]*template.Template
	assets    map[string]asset
	maxRows   int // maxRows; tests page with fewer
	maxParked int // maxParkedRows; tests page with fewer
}

// asset is one embedded file with the headers it is served with.
type asset struct {
	body  []byte
	ctype string
	etag  string
}

// New returns the status page's handler. It serves Root (the keys' table, or the login
// form; ?poller= narrows it, ?after= pages it), Root+"/login" and Root+"/logout" (POST),
// Root+"/keys/{poller}/{partition}" (one key, "-" naming an unpartitioned poller's key;
// ?after= pages its parked rows) and Root+"/assets/...".
func New(o Options) http.Handler {
	if o.Engine == nil {
		panic("statuspage: Options.Engine is required")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Login == nil {
		o.Login = admin.NewLogin(admin.LoginOptions{Tokens: o.Tokens})
	}
	h := &handler{o: o, pages: map[string]*template.Template{}, assets: map[string]asset{}, maxRows: maxRows, maxParked: maxParkedRows}
	funcs := template.FuncMap{"root": func() string { return Root }, "inc": func(n int) int { return n + 1 }}
	base := template.Must(template.New("").Funcs(funcs).ParseFS(templateFS, "templates/layout.html"))
	for _, name := range []string{"login", "index", "key", "notfound", "message"} {
		h.pages[name] = template.Must(template.Must(base.Clone()).ParseFS(templateFS, "templates/"+name+".html"))
	}
	types := map[string]string{".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".svg": "image/svg+xml"}
	err := fs.WalkDir(assetFS, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assetFS.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		h.assets[strings.TrimPrefix(p, "assets/")] = asset{body: b, ctype: types[path.Ext(p)], etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic(err) // the embedded files are part of the binary: this cannot fail at run time
	}
	return h
}

// ServeHTTP routes by the escaped path, so that a partition holding "/" (sent as %2F)
// stays one segment.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.EscapedPath()
	switch {
	case p == Root || p == Root+"/":
		if allow(w, r, http.MethodGet) {
			h.index(w, r)
		}
	case p == Root+"/login":
		switch r.Method {
		case http.MethodPost:
			h.login(w, r)
		case http.MethodGet, http.MethodHead:
			http.Redirect(w, r, Root, http.StatusSeeOther)
		default:
			allow(w, r, http.MethodPost)
		}
	case p == Root+"/logout":
		if allow(w, r, http.MethodPost) {
			h.logout(w, r)
		}
	case strings.HasPrefix(p, Root+"/assets/"):
		if allow(w, r, http.MethodGet) {
			h.asset(w, r, strings.TrimPrefix(p, Root+"/assets/"))
		}
	case strings.HasPrefix(p, Root+"/keys/"):
		if allow(w, r, http.MethodGet) {
			h.key(w, r, strings.TrimPrefix(p, Root+"/keys/"))
		}
	default:
		pageHeaders(w)
		h.render(w, r, http.StatusNotFound, "message", &page{Title: "Not found", Message: "There is no page at " + r.URL.Path + ".", Who: h.who(r)})
	}
}

// allow answers 405 unless r's method is method (GET also allows HEAD).
func allow(w http.ResponseWriter, r *http.Request, method string) bool {
	if r.Method == method || (method == http.MethodGet && r.Method == http.MethodHead) {
		return true
	}
	if method == http.MethodGet {
		w.Header().Set("Allow", "GET, HEAD")
	} else {
		w.Header().Set("Allow", method)
	}
	http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
	return false
}

// pageHeaders are the headers of every HTML page: nothing but this origin's own files may
// load or run, no other site may frame it (clickjacking of the buttons), and no cache keeps
// what an operator saw.
func pageHeaders(w http.ResponseWriter) {
	hd := w.Header()
	hd.Set("Content-Security-Policy", "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
}

// who is the token r authenticates with, nil when none.
func (h *handler) who(r *http.Request) *admintoken.Token {
	t, _, ok := h.o.Login.Authenticate(r)
	if !ok {
		return nil
	}
	return &t
}

// authenticated returns r's token, or renders the login form (with next, the page to come
// back to) and returns nil.
func (h *handler) authenticated(w http.ResponseWriter, r *http.Request) *admintoken.Token {
	t, cred, ok := h.o.Login.Authenticate(r)
	if ok {
		return &t
	}
	p := &page{Title: "Log in", Next: r.URL.RequestURI()}
	status := http.StatusUnauthorized
	switch {
	case h.o.Tokens.Len() == 0:
		p.Off = true
		status = http.StatusForbidden
	case cred == admin.Cookie:
		// The session expired, or its token was removed or rotated: say so and drop the cookie.
		http.SetCookie(w, h.o.Login.LogoutCookie(r))
		p.Error = "Your login has expired, or its token is no longer accepted (rotated or removed): log in again."
	case cred == admin.Bearer:
		p.Error = "The Authorization header's token is not accepted."
	}
	h.render(w, r, status, "login", p)
	return nil
}

// sameOrigin reports whether a form post came from this page: an Origin header, when the
// browser sends one, must name this host, and Sec-Fetch-Site must not say cross-site.
func sameOrigin(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s == "cross-site" || s == "same-site" {
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" { // "null": a sandboxed frame, a redirect chain, a file
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}

// login checks the form's token; a valid one gets the cookie and goes back to the page asked
// for (303), a wrong one gets the form again with an error (401).
func (h *handler) login(w http.ResponseWriter, r *http.Request) {
	pageHeaders(w)
	if !sameOrigin(r) {
		h.o.Logger.Warn().Str("remote", r.RemoteAddr).Str("origin", r.Header.Get("Origin")).Msg("status page: login from another origin refused")
		h.render(w, r, http.StatusForbidden, "message", &page{Title: "Refused", Message: "A login form posted from another site is refused."})
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	secret := strings.TrimSpace(r.PostFormValue("token"))
	next := safeNext(r.PostFormValue("next"))
	if h.o.Tokens.Len() == 0 {
		h.render(w, r, http.StatusForbidden, "login", &page{Title: "Log in", Off: true, Next: next})
		return
	}
	client := h.o.Login.Client(r).String()
	// A client that failed too often waits; its token is not even checked meanwhile.
	if wait := h.o.Login.Wait(r); wait > 0 {
		secs := int((wait + time.Second - 1) / time.Second)
		h.o.Logger.Warn().Str("remote", r.RemoteAddr).Str("client", client).Int("retryAfter", secs).Msg("status page: login refused, too many failed logins")
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		h.render(w, r, http.StatusTooManyRequests, "login", &page{Title: "Log in", Next: next,
			Error: "Too many failed logins from your address: try again in " + strconv.Itoa(secs) + " s."})
		return
	}
	t, ok := h.o.Tokens.Lookup(secret)
	if !ok {
		wait := h.o.Login.Failed(r)
		h.o.Logger.Warn().Str("remote", r.RemoteAddr).Str("client", client).Bool("empty", secret == "").Dur("wait", wait).Msg("status page: failed login (no token has this secret)")
		h.render(w, r, http.StatusUnauthorized, "login", &page{Title: "Log in", Next: next, Error: "That token is not accepted."})
		return
	}
	c, err := h.o.Login.Cookie(r, t)
	if err != nil {
		h.o.Logger.Error().Err(err).Msg("status page: making a session failed")
		h.render(w, r, http.StatusInternalServerError, "message", &page{Title: "Login failed", Message: "The login could not be made; see the process's log."})
		return
	}
	h.o.Login.Succeeded(r)
	h.o.Logger.Info().Str("token", t.ID).Bool("readOnly", t.ReadOnly).Str("remote", r.RemoteAddr).Str("client", client).Msg("status page: login")
	http.SetCookie(w, c)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// safeNext is where a login goes back to: a page of this status page, never another site
// ("//host" or "/\host" would leave it).
func safeNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || strings.Contains(next, `\`) || strings.HasPrefix(next, "//") {
		return Root
	}
	if (u.Path != Root && !strings.HasPrefix(u.Path, Root+"/")) || u.Path == Root+"/login" || u.Path == Root+"/logout" {
		return Root
	}
	return next
}

// logout clears the cookie and goes back to the login form.
func (h *handler) logout(w http.ResponseWriter, r *http.Request) {
	pageHeaders(w)
	if !sameOrigin(r) {
		h.o.Logger.Warn().Str("remote", r.RemoteAddr).Str("origin", r.Header.Get("Origin")).Msg("status page: logout from another origin refused")
		h.render(w, r, http.StatusForbidden, "message", &page{Title: "Refused", Message: "A logout form posted from another site is refused."})
		return
	}
	ev := h.o.Logger.Info().Str("remote", r.RemoteAddr)
	if t := h.who(r); t != nil {
		ev = ev.Str("token", t.ID)
	}
	ev.Msg("status page: logout")
	http.SetCookie(w, h.o.Login.LogoutCookie(r))
	http.Redirect(w, r, Root, http.StatusSeeOther)
}

// asset serves an embedded file; the ETag lets the browser keep it until a new build.
func (h *handler) asset(w http.ResponseWriter, r *http.Request, name string) {
	a, ok := h.assets[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", a.ctype)
	w.Header().Set("ETag", a.etag)
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(a.body))
}

// index renders one page of the table of every key (of ?poller=, after ?after=).
func (h *handler) index(w http.ResponseWriter, r *http.Request) {
	pageHeaders(w)
	t := h.authenticated(w, r)
	if t == nil {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), inspectTimeout)
	defer cancel()
	q := r.URL.Query()
	poller := q.Get("poller")
	p := h.newPage(t, "Keys")
	p.Poller = poller
	after := keyCursor(q.Get("after"), poller)
	kis, next, err := h.o.Engine.InspectPage(ctx, poller, after, h.maxRows)
	if err != nil {
		h.engineError(w, r, p, err)
		return
	}
	counts, err := h.o.Engine.PollerKeys(ctx)
	if err != nil {
		h.engineError(w, r, p, err)
		return
	}
	for name, n := range counts {
		if poller == "" || name == poller {
			p.Scheduled += n
		}
	}
	now := h.o.Now()
	p.Rows = make([]keyRow, len(kis))
	for i, ki := range kis {
		p.Rows[i] = newKeyRow(ki, now)
	}
	p.Summary = summarize(kis)
	p.Later = after != ""
	if next != "" {
		p.NextPage = pageURL(poller, next)
	}
	if p.Later {
		p.FirstPage = pageURL(poller, "")
	}
	h.render(w, r, http.StatusOK, "index", p)
}

// keyCursor is the table's ?after= as the engine takes it: the last key of the page before,
// as poller|partition. A cursor that is not one, or names another poller than the table's,
// starts from the first key.
func keyCursor(after, poller string) string {
	k, err := watukuytype.ParseKey(after)
	if err != nil || (poller != "" && k.Poller != poller) {
		return ""
	}
	return after
}

// key renders one key's detail page; rest is "{poller}/{partition}", each escaped.
func (h *handler) key(w http.ResponseWriter, r *http.Request, rest string) {
	pageHeaders(w)
	t := h.authenticated(w, r)
	if t == nil {
		return
	}
	p := h.newPage(t, "Key")
	segs := strings.Split(rest, "/")
	if len(segs) != 2 {
		h.render(w, r, http.StatusNotFound, "message", &page{Title: "Not found", Who: t, ReadOnly: t.ReadOnly, MonitoringPath: h.o.MonitoringPath,
			Message: "A key's page is " + Root + "/keys/{poller}/{partition} (partition - for an unpartitioned poller)."})
		return
	}
	poller, err1 := url.PathUnescape(segs[0])
	partition, err2 := url.PathUnescape(segs[1])
	if err1 != nil || err2 != nil || poller == "" || partition == "" {
		h.render(w, r, http.StatusNotFound, "message", &page{Title: "Not found", Who: t, ReadOnly: t.ReadOnly, MonitoringPath: h.o.MonitoringPath,
			Message: "The key's path is not valid: " + rest})
		return
	}
	if partition == "-" {
		partition = ""
	}
	ctx, cancel := context.WithTimeout(r.Context(), inspectTimeout)
	defer cancel()
	ki, err := h.o.Engine.Inspect(ctx, watukuytype.Key{Poller: poller, Partition: partition})
	if err != nil {
		p.Title = poller + " / " + partLabel(partition)
		h.engineError(w, r, p, err)
		return
	}
	// One row more than the page shows says whether a next page has any.
	after := r.URL.Query().Get("after")
	rows, _, err := h.o.Engine.Parked().Page(ctx, watukuytype.Key{Poller: poller, Partition: partition}, "", after, h.maxParked+1)
	if err != nil {
		h.engineError(w, r, p, err)
		return
	}
	more := len(rows) > h.maxParked
	rows = rows[:min(len(rows), h.maxParked)]
	p.Title = ki.Poller + " / " + partLabel(ki.Partition)
	p.Key = newKeyDetail(ki, rows, h.o.Now())
	href := keyPath(Root+"/keys", ki.Poller, ki.Partition)
	if more {
		p.Key.ParkedNext = href + "?" + url.Values{"after": {rows[len(rows)-1].ID}}.Encode()
	}
	if after != "" {
		p.Key.ParkedFirst = href
	}
	h.render(w, r, http.StatusOK, "key", p)
}

// engineError renders a failed read: an unknown poller or partition is a 404 naming the
// known ones, anything else (Redis down) a 503 with the error.
func (h *handler) engineError(w http.ResponseWriter, r *http.Request, p *page, err error) {
	var nf *watukuytype.NotFoundError
	if errors.As(err, &nf) {
		p.NotFound = newNotFound(nf)
		h.render(w, r, http.StatusNotFound, "notfound", p)
		return
	}
	h.o.Logger.Error().Err(err).Str("path", r.URL.Path).Msg("status page: reading the keys failed")
	p.Message = "Reading the keys failed: " + err.Error()
	h.render(w, r, http.StatusServiceUnavailable, "message", p)
}

// newPage is a page for the logged-in token t.
func (h *handler) newPage(t *admintoken.Token, title string) *page {
	return &page{Title: title, Who: t, ReadOnly: t.ReadOnly, MonitoringPath: h.o.MonitoringPath, Generated: h.o.Now().UTC().Format(time.RFC3339)}
}

// render executes the page template name into a buffer first, so that a template error
// becomes a 500 rather than half a page.
func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, name string, p *page) {
	var buf bytes.Buffer
	p.Stopped = h.o.Engine.Stopped()
	if err := h.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		h.o.Logger.Error().Err(err).Str("template", name).Msg("status page: rendering failed")
		http.Error(w, "the status page failed to render; see the process's log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(buf.Bytes())
	}
}
