// Package cursor turns HTTP APIs into FetchFuncs, one per cursor strategy: timestamp (a change
// time with an inclusive re-query), token (an opaque next/sync token), page (page number or
// offset, for full listings: snapshotDiff and reconcile). The custom strategy is any
// watukuytype.FetchFunc written in Go.
package httppoll

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/watukuy/watukuy/watukuytype"
)

// Source is an HTTP endpoint that returns a page of items as JSON. "${partition}" in URL,
// Query values and Header values is replaced by the key's partition.
type Source struct {
	// Client sends the requests (timeouts, size limit, logging).
	Client *Client
	// URL is the endpoint.
	URL string
	// Query is merged into every request.
	Query url.Values
	// Header is sent with every request.
	Header http.Header
	// Items is the gjson path of the item array in the body; "" means the body is the array.
	Items string
}

// response is one decoded page.
type response struct {
	*Response
	items []json.RawMessage
	body  gjson.Result
}

func expand(s string, key watukuytype.Key) string {
	return strings.ReplaceAll(s, "${partition}", key.Partition)
}

// do sends a GET of rawURL with the Source's query (params added) and headers, ${partition}
// expanded.
func (s *Source) do(ctx context.Context, key watukuytype.Key, rawURL string, params url.Values, etag string) (*Response, error) {
	q := url.Values{}
	for k, vs := range s.Query {
		for _, v := range vs {
			q.Add(k, expand(v, key))
		}
	}
	for k, vs := range params {
		q[k] = vs
	}
	h := http.Header{}
	for k, vs := range s.Header {
		for _, v := range vs {
			h.Add(k, expand(v, key))
		}
	}
	client := s.Client
	if client == nil {
		client = &Client{}
	}
	return client.Do(ctx, Request{Key: key, URL: rawURL, Query: q, Header: h, ETag: etag})
}

// get requests rawURL (the Source URL when "") with params added, then decodes the items.
func (s *Source) get(ctx context.Context, key watukuytype.Key, rawURL string, params url.Values, etag string) (*response, error) {
	if rawURL == "" {
		rawURL = expand(s.URL, key)
	}
	resp, err := s.do(ctx, key, rawURL, params, etag)
	if err != nil {
		return nil, err
	}
	r := &response{Response: resp}
	if resp.NotModified {
		return r, nil
	}
	if err := resp.CheckJSON(); err != nil {
		return nil, fmt.Errorf("%s: response of %s: %w", key.Describe(), rawURL, err)
	}
	r.body = gjson.ParseBytes(resp.Body)
	arr := r.body
	if s.Items != "" {
		arr = r.body.Get(s.Items)
	}
	if !arr.IsArray() {
		if !arr.Exists() {
			return r, nil // an empty page may leave the array out
		}
		return nil, &watukuytype.ConfigError{Poller: key.Poller, Field: "items", Msg: fmt.Sprintf("path %q is %s in the response, want an array", s.Items, arr.Type)}
	}
	arr.ForEach(func(_, v gjson.Result) bool {
		r.items = append(r.items, json.RawMessage(v.Raw))
		return true
	})
	return r, nil
}

// page converts a response into a watukuytype.Page.
func (r *response) page(next string, hasMore bool) watukuytype.Page {
	return watukuytype.Page{Items: r.items, Next: next, HasMore: hasMore, NotModified: r.NotModified, RateLimit: r.RateLimit, ETag: r.ETag}
}

// boolAt reads an optional boolean path of the body; ok is false when the path is unset or absent.
func (r *response) boolAt(path string) (v, ok bool) {
	if path == "" {
		return false, false
	}
	res := r.body.Get(path)
	return res.Bool(), res.Exists()
}
