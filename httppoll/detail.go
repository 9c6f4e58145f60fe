package httppoll

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/watukuy/watukuy/watukuytype"
)

// DetailRequest fetches one item by identity, the request that confirms a delete a listing suggests
// (watukuytype.Poller.Detail): URL holds "{id}", replaced by the path-escaped identity. 404 and 410
// mean the item is gone; any other failure is an error, and the listings decide.
type DetailRequest struct {
	// Source sends the request; its URL holds "{id}", and Items, when set, is the gjson path
	// of the item in the body ("" means the body is the item).
	Source
}

// Fetch is the poller's DetailFunc.
func (d *DetailRequest) Fetch(ctx context.Context, key watukuytype.Key, identity string) (json.RawMessage, bool, error) {
	u := strings.ReplaceAll(expand(d.URL, key), "{id}", url.PathEscape(identity))
	resp, err := d.do(ctx, key, u, nil, "")
	var he *watukuytype.HTTPError
	if errors.As(err, &he) && (he.StatusCode == http.StatusNotFound || he.StatusCode == http.StatusGone) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if err := resp.CheckJSON(); err != nil {
		return nil, false, fmt.Errorf("%s: detail of %q: %w", key.Describe(), identity, err)
	}
	item := gjson.ParseBytes(resp.Body)
	if d.Items != "" {
		item = item.Get(d.Items)
	}
	if !item.IsObject() {
		return nil, false, fmt.Errorf("%s: detail of %q: no item object at %q", key.Describe(), identity, d.Items)
	}
	return json.RawMessage(item.Raw), true, nil
}
