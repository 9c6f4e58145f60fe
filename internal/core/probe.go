package core

import (
	"context"
	"encoding/hex"

	"github.com/watukuy/watukuy/watukuytype"
)

// Probe fetches the first page of p's live lane for partition, from the very beginning, and
// reports the identity, version and fingerprint of every item and the cursor the lane would
// commit. It writes nothing anywhere: for checking a new API before it goes live.
func Probe(ctx context.Context, p watukuytype.Poller, partition string) (watukuytype.ProbeResult, error) {
	p, err := withDefaults(p)
	if err != nil {
		return watukuytype.ProbeResult{}, err
	}
	key := watukuytype.Key{Poller: p.Name, Partition: partition}
	res := watukuytype.ProbeResult{Poller: p.Name, Partition: partition, Items: []watukuytype.ProbeItem{}}
	page, err := p.Fetch(ctx, watukuytype.FetchRequest{Key: key, Lane: watukuytype.LaneLive})
	if err != nil {
		return res, keyErr("watukuy: probe", key, err)
	}
	res.Next, res.HasMore, res.NotModified = page.Next, page.HasMore, page.NotModified
	c := &cycle{p: &p, key: key}
	for _, raw := range page.Items {
		o, issue := c.observe(raw)
		it := watukuytype.ProbeItem{Identity: o.identity, Version: o.version, Tombstone: o.tombstone, Issue: issue}
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
