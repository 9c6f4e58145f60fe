package core

import (
	"context"
	"encoding/hex"
	"fmt"
)

// ProbeItem is one item of a probed page, as the diff would see it.
type ProbeItem struct {
	Identity string `json:"identity"`
	Version  string `json:"version,omitempty"`
	// Fingerprint is the start of the version fingerprint the item's row would store.
	Fingerprint string `json:"fingerprint,omitempty"`
	Tombstone   bool   `json:"tombstone,omitempty"`
	// Issue says why the item would be parked as invalid ("" when it is fine).
	Issue string `json:"issue,omitempty"`
}

// ProbeResult is what Probe saw on a poller's first page.
type ProbeResult struct {
	Poller      string      `json:"poller"`
	Partition   string      `json:"partition"`
	Items       []ProbeItem `json:"items"`
	Next        string      `json:"nextCursor"`
	HasMore     bool        `json:"hasMore"`
	NotModified bool        `json:"notModified,omitempty"`
	Invalid     int         `json:"invalid"`
}

// Probe fetches the first page of p's live lane for partition, from the very beginning, and
// reports the identity, version and fingerprint of every item and the cursor the lane would
// commit. It writes nothing anywhere: for checking a new API before it goes live.
func Probe(ctx context.Context, p Poller, partition string) (ProbeResult, error) {
	p, err := p.withDefaults()
	if err != nil {
		return ProbeResult{}, err
	}
	key := Key{Poller: p.Name, Partition: partition}
	res := ProbeResult{Poller: p.Name, Partition: partition, Items: []ProbeItem{}}
	page, err := p.Fetch(ctx, FetchRequest{Key: key, Lane: "live"})
	if err != nil {
		return res, fmt.Errorf("watukuy: probe %s: %w", key, err)
	}
	res.Next, res.HasMore, res.NotModified = page.Next, page.HasMore, page.NotModified
	c := &cycle{p: &p, key: key}
	for _, raw := range page.Items {
		o, issue := c.observe(raw)
		it := ProbeItem{Identity: o.identity, Version: o.version, Tombstone: o.tombstone, Issue: issue}
		if issue == "" && !o.tombstone {
			it.Fingerprint = hex.EncodeToString(o.vf[:])
		}
		if issue != "" {
			res.Invalid++
		}
		res.Items = append(res.Items, it)
	}
	return res, nil
}
