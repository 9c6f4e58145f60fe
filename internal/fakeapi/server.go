package fakeapi

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ServerOptions shape the HTTP API. The zero value is a valid configuration.
type ServerOptions struct {
	// PageSize is the page size when a request names none (limit / per_page); default 100.
	PageSize int
	// MaxPageSize caps any requested page size (silently, as real APIs do); default 1000.
	MaxPageSize int
	// TieBreaker makes /items honour after_id. Without it after_id is ignored, as by a real
	// API that has no tie-breaker.
	TieBreaker bool
	// LinkHeader makes every endpoint send `Link: <absolute next URL>; rel="next"` when there
	// is a next page.
	LinkHeader bool
}

// Request is one request the server received.
type Request struct {
	At     time.Time // API clock on arrival
	Wall   time.Time // time.Now on arrival
	Method string
	// Path is the URL path, unescaped: for the detail endpoint "/items/" + the item's id.
	Path   string
	Query  url.Values
	Header http.Header
	// Status is the status code answered; 0 while the request is in flight, or when the
	// client went away before an answer (e.g. it timed out during a Fault.Delay).
	Status int
	// Held reports that a Fault's Delay held the answer.
	Held bool
}

// Server serves an API over real HTTP on a loopback port (an http.Server of its own, not
// httptest: watukuytest's chaos runs serve it, and user test binaries stay free of httptest).
//
// Endpoints (GET only; every body is JSON with Content-Type application/json):
//
//	/items?updated_since=<RFC 3339>&limit=N[&after_id=ID]   timestamp API
//	/sync?cursor=<token>&limit=N                             token/delta API with tombstones
//	/list?page=P&per_page=N  or  /list?offset=O&limit=N      full listing by id, with ETag
//	/items/<url-escaped id>                                  one item (detail)
//
// Pages are {"data": [items…], …}; the detail endpoint answers the bare item object, the same
// object as in the pages, or 404 when the id was never created or is deleted. Errors are
// {"error": "<message>", "status": <code>}.
type Server struct {
	// URL is the base URL, e.g. http://127.0.0.1:41234 (no trailing slash).
	URL string

	api  *API
	opts ServerOptions
	srv  *http.Server

	closing   chan struct{}
	closeOnce sync.Once

	mu        sync.Mutex
	reqs      []Request
	faults    []Fault // queue; Times already normalized to >= 1
	onRequest func(n int, r *http.Request)
	rl        rateLimiter
	pagingDel pagingDeletes

	afterHandle func(n int) // test hook: runs when a handler returns
}

// NewServer starts serving a on a loopback port. The caller must Close it.
func NewServer(a *API, opts ServerOptions) *Server {
	if opts.MaxPageSize <= 0 {
		opts.MaxPageSize = 1000
	}
	if opts.PageSize <= 0 {
		opts.PageSize = 100
	}
	opts.PageSize = min(opts.PageSize, opts.MaxPageSize)
	s := &Server{api: a, opts: opts, closing: make(chan struct{})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("fakeapi: listen on a loopback port: %v", err)) // as httptest.NewServer does
	}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	s.URL = "http://" + ln.Addr().String()
	return s
}

// Close ends any delayed answer at once, then shuts the server down and waits for the
// handlers to return.
func (s *Server) Close() {
	s.closeOnce.Do(func() { close(s.closing) })
	_ = s.srv.Shutdown(context.Background()) // waits for the handlers, closes idle connections
}

// Requests returns every request received so far, in arrival order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.reqs...)
}

// OnRequest installs a hook that runs before each request is answered (after it is recorded,
// before faults and the rate limit): n counts requests from 1. Use it to change the collection
// between the pages of one listing. The hook runs on the handler goroutine, concurrently when
// requests are concurrent; nil removes it.
func (s *Server) OnRequest(f func(n int, r *http.Request)) {
	s.mu.Lock()
	s.onRequest = f
	s.mu.Unlock()
}

// ServeHTTP answers one request; a Server is an http.Handler, so it can also be mounted on
// another listener (the Link header is built from the request's Host).
//
// Order of work: record the request; OnRequest; take the first queued Fault whose Path
// matches; wait out its Delay; consume one unit of the rate-limit quota; then answer with the
// fault's Status if it has one, else 429 if the quota is exhausted, else the endpoint's page or
// item (rewritten by Malformed / NoIdentity; a /list page after the first is served after
// DeleteWhilePaging's deletes). The fault's Header and Retry-After are added to whatever is
// answered.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	at := s.api.Now() // before s.mu: the server never holds s.mu while taking the API's lock
	s.mu.Lock()
	s.reqs = append(s.reqs, Request{
		At: at, Wall: time.Now(), Method: r.Method, Path: r.URL.Path,
		Query: r.URL.Query(), Header: r.Header.Clone(),
	})
	n := len(s.reqs)
	hook := s.onRequest
	after := s.afterHandle
	s.mu.Unlock()
	if after != nil {
		defer after(n)
	}
	rw := &statusWriter{ResponseWriter: w, s: s, idx: n - 1}

	if hook != nil {
		hook(n, r)
	}
	f, faulted := s.takeFault(endpoint(r.URL.Path), r.URL.Path)
	if faulted && f.Delay > 0 {
		s.mu.Lock()
		s.reqs[n-1].Held = true
		s.mu.Unlock()
		t := time.NewTimer(f.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		case <-s.closing:
			t.Stop()
			return
		}
	}
	h := rw.Header()
	exhausted, retryAfter := s.consumeQuota(h)
	if faulted {
		for k, v := range f.Header {
			h[http.CanonicalHeaderKey(k)] = append([]string(nil), v...)
		}
		if f.RetryAfter != "" {
			h.Set("Retry-After", f.RetryAfter)
		}
	}
	switch {
	case faulted && f.Status != 0:
		writeError(rw, f.Status, "injected fault: "+http.StatusText(f.Status))
		return
	case exhausted:
		if !faulted || f.RetryAfter == "" {
			h.Set("Retry-After", retryAfter)
		}
		writeError(rw, http.StatusTooManyRequests, "rate limit exceeded")
		return
	}

	if r.Method != http.MethodGet {
		h.Set("Allow", http.MethodGet)
		writeError(rw, http.StatusMethodNotAllowed, "only GET is supported")
		return
	}
	var (
		res *result
		err *apiError
	)
	q := r.URL.Query()
	switch endpoint(r.URL.Path) {
	case "/items":
		res, err = s.items(q)
	case "/sync":
		res, err = s.sync(q)
	case "/list":
		res, err = s.list(q)
	case detailEndpoint:
		res, err = s.detail(r.URL)
	default:
		err = &apiError{http.StatusNotFound, "no such endpoint: " + r.URL.Path}
	}
	if err != nil {
		writeError(rw, err.status, err.msg)
		return
	}
	rewrite := faulted && (f.Malformed || f.NoIdentity)
	if res.etag != "" {
		h.Set("ETag", res.etag)
		if !rewrite && etagMatch(r.Header.Get("If-None-Match"), res.etag) {
			rw.WriteHeader(http.StatusNotModified)
			return
		}
	}
	if res.next != nil && s.opts.LinkHeader {
		scheme := "http"
		if r.TLS != nil {
			scheme = "https"
		}
		u := url.URL{Scheme: scheme, Host: r.Host, Path: r.URL.Path, RawQuery: res.next.Encode()}
		h.Set("Link", "<"+u.String()+`>; rel="next"`)
	}
	var b []byte
	if res.item != nil {
		b = res.item
		if faulted && f.NoIdentity {
			b = stripID(b)
		}
	} else {
		if faulted && f.NoIdentity {
			res.data = stripFirstID(res.data)
		}
		body := map[string]any{"data": res.data}
		for k, v := range res.extra {
			body[k] = v
		}
		b, _ = json.Marshal(body)
	}
	if faulted && f.Malformed {
		b = b[:len(b)/2]
	}
	h.Set("Content-Type", "application/json")
	rw.WriteHeader(http.StatusOK)
	_, _ = rw.Write(b)
}

// statusWriter records the answered status in the request log before the answer leaves, so a
// client that got a response always finds its status in Requests.
type statusWriter struct {
	http.ResponseWriter
	s     *Server
	idx   int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.wrote = true
		w.s.mu.Lock()
		w.s.reqs[w.idx].Status = code
		w.s.mu.Unlock()
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

type apiError struct {
	status int
	msg    string
}

// result is an endpoint's 200 answer before encoding: a page, or one item.
type result struct {
	item  json.RawMessage // the detail endpoint's body; nil for a page
	data  []json.RawMessage
	extra map[string]any // has_more, next_cursor, total
	next  url.Values     // query of the next page, nil on the last one
	etag  string
}

func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]any{"error": msg, "status": status})
	_, _ = w.Write(b)
}

// pageSize reads the first of names present in q: absent or 0 means the default, anything
// above MaxPageSize is capped, a negative or non-numeric value is a 400.
func (s *Server) pageSize(q url.Values, names ...string) (int, *apiError) {
	for _, name := range names {
		v := q.Get(name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, &apiError{http.StatusBadRequest, fmt.Sprintf("invalid %s %q", name, v)}
		}
		if n == 0 {
			break
		}
		return min(n, s.opts.MaxPageSize), nil
	}
	return s.opts.PageSize, nil
}

// items serves GET /items: live items with updated_at >= updated_since, ordered by
// (updated_at, id). With TieBreaker and after_id: updated_at > since, or == since and id >
// after_id.
func (s *Server) items(q url.Values) (*result, *apiError) {
	limit, aerr := s.pageSize(q, "limit")
	if aerr != nil {
		return nil, aerr
	}
	var since time.Time
	if v := q.Get("updated_since"); v != "" {
		// A client that forgot to escape "+" in an offset sends a space.
		t, err := time.Parse(time.RFC3339, strings.ReplaceAll(v, " ", "+"))
		if err != nil {
			return nil, &apiError{http.StatusBadRequest, fmt.Sprintf("invalid updated_since %q: want RFC 3339", v)}
		}
		since = t
	}
	afterID := ""
	if s.opts.TieBreaker {
		afterID = q.Get("after_id")
	}
	a := s.api
	a.mu.Lock()
	defer a.mu.Unlock()
	recs := a.index().byTime
	start := sort.Search(len(recs), func(i int) bool {
		r := recs[i]
		if afterID == "" {
			return !r.updated.Before(since)
		}
		return r.updated.After(since) || r.updated.Equal(since) && r.id > afterID
	})
	end := min(start+limit, len(recs))
	res := &result{extra: map[string]any{"has_more": end < len(recs)}}
	res.data = make([]json.RawMessage, 0, end-start)
	for _, r := range recs[start:end] {
		res.data = append(res.data, r.json())
	}
	if end < len(recs) && end > start {
		last := recs[end-1]
		res.next = url.Values{"updated_since": {last.updated.Format(time.RFC3339)}, "limit": {strconv.Itoa(limit)}}
		if s.opts.TieBreaker {
			res.next.Set("after_id", last.id)
		}
	}
	return res, nil
}

const tokenPrefix = "seq:"

// syncToken is the opaque /sync cursor for a change sequence position.
func syncToken(seq int64) string {
	return base64.RawURLEncoding.EncodeToString([]byte(tokenPrefix + strconv.FormatInt(seq, 10)))
}

func parseSyncToken(tok string) (int64, bool) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || !strings.HasPrefix(string(b), tokenPrefix) {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimPrefix(string(b), tokenPrefix), 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// sync serves GET /sync: every item whose last change (create, update or delete) comes after
// the cursor's position, in change order; a deleted item is a tombstone.
func (s *Server) sync(q url.Values) (*result, *apiError) {
	limit, aerr := s.pageSize(q, "limit")
	if aerr != nil {
		return nil, aerr
	}
	cursor := q.Get("cursor")
	var after int64
	if cursor != "" {
		n, ok := parseSyncToken(cursor)
		if !ok {
			return nil, &apiError{http.StatusBadRequest, fmt.Sprintf("invalid cursor %q", cursor)}
		}
		after = n
	}
	a := s.api
	a.mu.Lock()
	defer a.mu.Unlock()
	recs := a.index().bySeq
	start := sort.Search(len(recs), func(i int) bool { return recs[i].seq > after })
	end := min(start+limit, len(recs))
	next := cursor
	if next == "" {
		next = syncToken(after)
	}
	res := &result{data: make([]json.RawMessage, 0, end-start)}
	for _, r := range recs[start:end] {
		if r.deleted {
			b, _ := json.Marshal(map[string]any{"id": r.id, "deleted": true, "updated_seq": r.seq})
			res.data = append(res.data, b)
		} else {
			res.data = append(res.data, r.json())
		}
		next = syncToken(r.seq)
	}
	res.extra = map[string]any{"next_cursor": next, "has_more": end < len(recs)}
	if end < len(recs) {
		res.next = url.Values{"cursor": {next}, "limit": {strconv.Itoa(limit)}}
	}
	return res, nil
}

// list serves GET /list, the live items ordered by id, by page (?page=P&per_page=N, P from 1)
// or by offset (?offset=O&limit=N), with the collection's ETag.
func (s *Server) list(q url.Values) (*result, *apiError) {
	if q.Has("page") && q.Has("offset") {
		return nil, &apiError{http.StatusBadRequest, "use either page or offset, not both"}
	}
	byOffset := q.Has("offset")
	var size, off, page int
	var aerr *apiError
	if byOffset {
		size, aerr = s.pageSize(q, "limit", "per_page")
		if aerr != nil {
			return nil, aerr
		}
		v := q.Get("offset")
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return nil, &apiError{http.StatusBadRequest, fmt.Sprintf("invalid offset %q", v)}
		}
		off = n
	} else {
		size, aerr = s.pageSize(q, "per_page", "limit")
		if aerr != nil {
			return nil, aerr
		}
		page = 1
		if v := q.Get("page"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return nil, &apiError{http.StatusBadRequest, fmt.Sprintf("invalid page %q: pages count from 1", v)}
			}
			page = n
		}
		if page-1 > (1<<31)/size {
			page = (1<<31)/size + 1 // far past any collection; avoids overflow
		}
		off = (page - 1) * size
	}
	del := 0
	if off > 0 {
		del = s.claimPagingDelete()
	}
	a := s.api
	a.mu.Lock()
	// The deletes and the page are one critical section, so no other change slips between.
	deleted := a.deleteBefore(off, del)
	ix := a.index()
	recs := ix.byID
	start := min(off, len(recs))
	end := min(start+size, len(recs))
	res := &result{etag: ix.etag, data: make([]json.RawMessage, 0, end-start)}
	for _, r := range recs[start:end] {
		res.data = append(res.data, r.json())
	}
	a.mu.Unlock()
	if deleted > 0 {
		s.mu.Lock() // only once a.mu is released: the two locks are never nested
		s.pagingDel.deleted += deleted
		s.mu.Unlock()
	}
	res.extra = map[string]any{"has_more": end < len(recs), "total": len(recs)}
	if end < len(recs) {
		if byOffset {
			res.next = url.Values{"offset": {strconv.Itoa(end)}, "limit": {strconv.Itoa(size)}}
		} else {
			res.next = url.Values{"page": {strconv.Itoa(page + 1)}, "per_page": {strconv.Itoa(size)}}
		}
	}
	return res, nil
}

// detailEndpoint is the endpoint name of GET /items/<id>, the Path a Fault names to target
// every detail request.
const detailEndpoint = "/items/{id}"

// endpoint names the endpoint a request path belongs to: the path itself, except that every
// detail path is detailEndpoint.
func endpoint(path string) string {
	if strings.HasPrefix(path, "/items/") {
		return detailEndpoint
	}
	return path
}

// detail serves GET /items/<id>: the live item, or 404. The id is the rest of the escaped path,
// unescaped, so an id with "/" must be sent as %2F; a literal "/" there is another path, as in
// a real router.
func (s *Server) detail(u *url.URL) (*result, *apiError) {
	rest, ok := strings.CutPrefix(u.EscapedPath(), "/items/")
	if !ok || strings.Contains(rest, "/") {
		return nil, &apiError{http.StatusNotFound, "no such endpoint: " + u.Path}
	}
	id, err := url.PathUnescape(rest)
	if err != nil {
		return nil, &apiError{http.StatusBadRequest, fmt.Sprintf("invalid item id %q", rest)}
	}
	item, found := s.api.detail(id)
	if !found {
		return nil, &apiError{http.StatusNotFound, fmt.Sprintf("no such item %q", id)}
	}
	return &result{item: item}, nil
}

// pagingDeletes is DeleteWhilePaging's state.
type pagingDeletes struct {
	n       int // items to delete per request
	times   int // requests left that delete
	deleted int // items deleted so far
}

// DeleteWhilePaging makes each of the next `times` /list requests for a page after the first
// (offset > 0, or page > 1) delete, before that page is read, the n live items that sort just
// before the page's start. Later items shift onto pages the client has already read, so a
// client paging through one listing never sees some items that stay live: the false-delete
// setup of a snapshotDiff poller. The deletes are the API's own (Delete), recorded in Changes
// and Final. Only a request answered with a page counts: one answered by a Fault's Status, a
// 429 or a 400 deletes nothing. n <= 0 or times <= 0 turns it off.
func (s *Server) DeleteWhilePaging(n, times int) {
	if n <= 0 || times <= 0 {
		n, times = 0, 0
	}
	s.mu.Lock()
	s.pagingDel.n, s.pagingDel.times = n, times
	s.mu.Unlock()
}

// DeletedWhilePaging returns how many items DeleteWhilePaging has deleted over the server's
// life.
func (s *Server) DeletedWhilePaging() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pagingDel.deleted
}

// claimPagingDelete takes one of DeleteWhilePaging's requests and returns how many items it
// deletes (0 when off or used up).
func (s *Server) claimPagingDelete() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pagingDel.times <= 0 {
		return 0
	}
	s.pagingDel.times--
	return s.pagingDel.n
}

// deleteBefore deletes the n live items that sort (by id) just before position off of the
// listing, and returns how many it deleted; a.mu must be held.
func (a *API) deleteBefore(off, n int) int {
	if n <= 0 {
		return 0
	}
	recs := a.index().byID // a snapshot: delete marks records, it never reorders this slice
	start := min(off, len(recs))
	deleted := 0
	for _, r := range recs[max(start-n, 0):start] {
		if a.delete(r.id) {
			deleted++
		}
	}
	return deleted
}

// index holds sorted views of the collection, rebuilt lazily after a change.
type index struct {
	seq    int64
	byID   []*record // live, by id
	byTime []*record // live, by (updated, id)
	bySeq  []*record // live and deleted, by seq
	etag   string    // quoted hash of the live collection
}

// index returns the current sorted views; a.mu must be held. Every mutation bumps a.seq, so a
// view built at the current seq is up to date.
func (a *API) index() *index {
	if a.idx != nil && a.idx.seq == a.seq {
		return a.idx
	}
	ix := &index{seq: a.seq}
	for _, r := range a.items {
		ix.bySeq = append(ix.bySeq, r)
		if !r.deleted {
			ix.byID = append(ix.byID, r)
		}
	}
	sort.Slice(ix.byID, func(i, j int) bool { return ix.byID[i].id < ix.byID[j].id })
	ix.byTime = append([]*record(nil), ix.byID...)
	sort.SliceStable(ix.byTime, func(i, j int) bool { return ix.byTime[i].updated.Before(ix.byTime[j].updated) })
	sort.Slice(ix.bySeq, func(i, j int) bool { return ix.bySeq[i].seq < ix.bySeq[j].seq })
	h := sha256.New()
	var buf [16]byte
	for _, r := range ix.byID {
		h.Write([]byte(r.id))
		binary.BigEndian.PutUint64(buf[:8], uint64(r.version))
		binary.BigEndian.PutUint64(buf[8:], uint64(r.seq))
		h.Write([]byte{0})
		h.Write(buf[:])
	}
	ix.etag = `"` + hex.EncodeToString(h.Sum(nil)[:12]) + `"`
	a.idx = ix
	return ix
}

// etagMatch reports whether an If-None-Match header matches etag (weak comparison; "*"
// matches anything).
func etagMatch(header, etag string) bool {
	if header == "" {
		return false
	}
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimPrefix(strings.TrimSpace(t), "W/")
		if t == "*" || t == etag {
			return true
		}
	}
	return false
}

// stripFirstID removes "id" from the first item; an empty page gets one item without an id.
func stripFirstID(data []json.RawMessage) []json.RawMessage {
	if len(data) == 0 {
		return []json.RawMessage{json.RawMessage(`{"version":1}`)}
	}
	return append([]json.RawMessage{stripID(data[0])}, data[1:]...)
}

// stripID removes "id" from one item.
func stripID(item json.RawMessage) json.RawMessage {
	var m map[string]any
	if err := json.Unmarshal(item, &m); err != nil {
		return item
	}
	delete(m, "id")
	b, _ := json.Marshal(m)
	return b
}
