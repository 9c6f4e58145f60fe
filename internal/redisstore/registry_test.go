package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
)

// entryListing is a pollers entry that lists parts (none: the unpartitioned key).
func entryListing(parts ...string) []byte {
	raw, _ := json.Marshal(map[string]any{"poller": "orders", "partitions": parts})
	return raw
}

// registerListing registers poller orders with an entry listing parts, and its keys, as
// core's registration does.
func registerListing(t *testing.T, s *Store, parts ...string) {
	t.Helper()
	keys := map[watukuytype.Key][]byte{}
	for _, p := range parts {
		keys[watukuytype.Key{Poller: "orders", Partition: p}] = []byte(`{"source":"config"}`)
	}
	if len(parts) == 0 {
		keys[watukuytype.Key{Poller: "orders"}] = []byte(`{"source":"config"}`)
	}
	if err := s.Register(context.Background(), map[string][]byte{"orders": entryListing(parts...)}, keys); err != nil {
		t.Fatal(err)
	}
}

// Each registration of a changed entry brings the registry in line with it: listed keys have
// no entry (a cli entry of a key the config now lists goes), a key the config drops keeps a
// {"source":"config"} entry, one the config lists again loses it; an unchanged entry writes
// nothing.
func TestRegisterKeepsOnlyUnlistedEntries(t *testing.T) {
	const cfg, cli = `{"source":"config"}`, `{"source":"cli","addedAt":7}`
	steps := []struct {
		name  string
		list  []string // the entry's partitions; nil: a cli add of add
		add   string
		want  map[string]string // the registry after the step
		moved bool              // registerPoller reports the entry changed
	}{
		{name: "first registration", list: []string{"a", "b"}, want: map[string]string{}, moved: true},
		{name: "cli add of c", add: "c", want: map[string]string{"orders|c": cli}},
		{name: "cli add of the listed b writes nothing", add: "b", want: map[string]string{"orders|c": cli}},
		{name: "same entry again", list: []string{"a", "b"}, want: map[string]string{"orders|c": cli}},
		{name: "b dropped, c listed", list: []string{"a", "c"}, want: map[string]string{"orders|b": cfg}, moved: true},
		{name: "b listed again", list: []string{"a", "b", "c"}, want: map[string]string{}, moved: true},
		{name: "unpartitioned", list: []string{}, want: map[string]string{"orders|a": cfg, "orders|b": cfg, "orders|c": cfg}, moved: true},
		{name: "partitioned again", list: []string{"a"}, want: map[string]string{"orders|": cfg, "orders|b": cfg, "orders|c": cfg}, moved: true},
	}
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, _ := newStore(t, b)
		for _, st := range steps {
			if st.add != "" {
				if err := s.AddPartition(ctx, watukuytype.Key{Poller: "orders", Partition: st.add}, []byte(cli)); err != nil {
					t.Fatalf("%s: %v", st.name, err)
				}
			} else {
				// The poller's part on its own first, for what it reports, then the whole Register.
				set, err := listedSet(entryListing(st.list...))
				if err != nil {
					t.Fatal(err)
				}
				changed, err := s.registerPoller(ctx, "orders", entryListing(st.list...), set)
				if err != nil || changed != st.moved {
					t.Fatalf("%s: registerPoller: %v, %v; want changed %v", st.name, changed, err, st.moved)
				}
				registerListing(t, s, st.list...)
			}
			got, err := b.Client.HGetAll(ctx, s.registryKey()).Result()
			if err != nil || !maps.Equal(got, st.want) {
				t.Fatalf("%s: registry %v, %v; want %v", st.name, got, err, st.want)
			}
			for _, p := range st.list {
				if err := b.Client.ZScore(ctx, s.DueKey("orders"), "orders|"+p).Err(); err != nil {
					t.Fatalf("%s: orders|%s has no due entry: %v", st.name, p, err)
				}
			}
		}
		// A key whose poller comes without an entry in the same call gets a registry entry.
		other := watukuytype.Key{Poller: "invoices", Partition: "x"}
		if err := s.Register(ctx, nil, map[watukuytype.Key][]byte{other: []byte(cfg)}); err != nil {
			t.Fatal(err)
		}
		if got := b.Client.HGet(ctx, s.registryKey(), other.String()).Val(); got != cfg {
			t.Fatalf("a key registered without its poller: entry %q", got)
		}
		// An entry that is not JSON is refused before anything is written.
		before := b.Dump(t)
		if err := s.Register(ctx, map[string][]byte{"orders": []byte("{")}, nil); err == nil {
			t.Fatal("a pollers entry that is not JSON was registered")
		}
		if after := b.Dump(t); !maps.Equal(before, after) {
			t.Fatalf("a refused registration wrote:\nbefore %v\nafter  %v", before, after)
		}
	})
}

// With the Redis URL alone, an operator's tool knows config keys by their poller's entry,
// cli keys by their registry entries: listing, inspect, and the known partitions of a
// not-found error.
func TestConfigKeysKnownByTheirPollersEntry(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, _ := newStore(t, b)
		worker, err := core.NewEngine(core.Options{Store: s, InstanceID: "worker"})
		if err != nil {
			t.Fatal(err)
		}
		noop := func(_ context.Context, req watukuytype.FetchRequest) (watukuytype.Page, error) {
			return watukuytype.Page{Next: req.Cursor}, nil
		}
		handler := func(context.Context, watukuytype.Event) error { return nil }
		for _, p := range []watukuytype.Poller{{Name: "orders", Partitions: []string{"a", "b"}, Fetch: noop, Handler: handler},
			{Name: "single", Fetch: noop, Handler: handler}} {
			if err := worker.Register(p); err != nil {
				t.Fatal(err)
			}
		}
		if err := worker.Setup(ctx); err != nil {
			t.Fatal(err)
		}
		if n := b.Client.HLen(ctx, s.registryKey()).Val(); n != 0 {
			t.Fatalf("config keys wrote %d registry entries", n)
		}
		tool, err := core.NewEngine(core.Options{Store: s, InstanceID: "tool"})
		if err != nil {
			t.Fatal(err)
		}
		if err := tool.AddPartition(ctx, watukuytype.Key{Poller: "orders", Partition: "c"}); err != nil {
			t.Fatal(err)
		}
		kis, err := tool.InspectAll(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ki := range kis {
			got = append(got, ki.Poller+"|"+ki.Partition+" "+ki.Source)
		}
		if want := []string{"orders|a config", "orders|b config", "orders|c cli", "single| config"}; !slices.Equal(got, want) {
			t.Fatalf("inspect from the URL alone: %v, want %v", got, want)
		}
		if ki, err := tool.Inspect(ctx, watukuytype.Key{Poller: "orders", Partition: "a"}); err != nil || ki.Source != "config" {
			t.Fatalf("inspect orders|a: %+v, %v", ki, err)
		}
		var nf *watukuytype.NotFoundError
		err = tool.Trigger(ctx, watukuytype.Key{Poller: "orders", Partition: "zz"})
		if !errors.As(err, &nf) || !nf.PartitionMissing || !slices.Equal(nf.Known, []string{"a", "b", "c"}) {
			t.Fatalf("trigger of an unknown partition: %v (%+v), want one listing a, b, c", err, nf)
		}
		if err := tool.Trigger(ctx, watukuytype.Key{Poller: "single"}); err != nil {
			t.Fatalf("trigger of the unpartitioned config key: %v", err)
		}
	})
}

// partitions delete of a config key: its data goes and it leaves the due set, but it stays
// listed (deleted: workers skip it), also across registrations, until partitions add brings
// it back, without a registry entry. A config that drops it leaves it registered, deleted. An
// add landing between the deletion of its data and the global cleanup keeps its due entry.
func TestDeleteConfigKey(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, clk := newStore(t, b)
		key := watukuytype.Key{Poller: "orders", Partition: "a"}
		registerListing(t, s, "a", "b")
		del := func() { t.Helper(); deleteKey(t, s, key) }
		deleted := func() bool { return b.Client.HGet(ctx, s.Key(key, "state"), "deleted").Val() == "1" }
		due := func() error { return b.Client.ZScore(ctx, s.DueKey("orders"), key.String()).Err() }
		del()
		if !deleted() || !errors.Is(due(), redis.Nil) || b.Client.HExists(ctx, s.registryKey(), key.String()).Val() {
			t.Fatalf("after delete: deleted %v, due entry %v, registry entry %v", deleted(), due(), b.Client.HExists(ctx, s.registryKey(), key.String()).Val())
		}
		if got, err := s.RepairDue(ctx); err != nil || len(got) != 0 {
			t.Fatalf("the sweep after delete: %v, %v; a deleted key stays out of the due set", got, err)
		}
		registerListing(t, s, "a", "b", "c") // a registration that lists it: still deleted
		if !deleted() || b.Client.HExists(ctx, s.registryKey(), key.String()).Val() {
			t.Fatal("a registration revived or re-entered the deleted config key")
		}

		// The add lands just before the cleanup script: its due entry stays.
		add := &beforeScript{key: s.registryKey(), run: func() {
			clk.Advance(time.Millisecond) // the add's due-now entry is another score than the one read
			if err := s.AddPartition(ctx, key, []byte(`{"source":"cli","addedAt":2}`)); err != nil {
				t.Error(err)
			}
		}}
		b.Client.AddHook(add)
		del()
		if !add.ran.Load() {
			t.Fatal("the add never ran")
		}
		if deleted() || due() != nil || b.Client.HExists(ctx, s.registryKey(), key.String()).Val() {
			t.Fatalf("delete raced by add: deleted %v, due entry %v, registry entry %v; want a live listed key, due",
				deleted(), due(), b.Client.HExists(ctx, s.registryKey(), key.String()).Val())
		}

		del()
		registerListing(t, s, "b", "c") // the config drops it: registered, deleted
		if got := b.Client.HGet(ctx, s.registryKey(), key.String()).Val(); got != `{"source":"config"}` || !deleted() {
			t.Fatalf("a deleted config key the config dropped: entry %q, deleted %v", got, deleted())
		}
	})
}

// dropListedRegistryEntries removes, in batches, the entries of the keys their poller's
// entry lists (as older releases wrote them), keeps every other, and removes nothing the
// second time.
func TestDropListedRegistryEntries(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, _ := newStore(t, b)
		n := 2*registryBatch + 50
		parts := make([]string, n)
		old := map[string]any{}
		for i := range parts {
			parts[i] = fmt.Sprintf("t%d", i)
			old["orders|"+parts[i]] = `{"source":"config"}`
		}
		keep := map[string]string{
			"orders|cli":  `{"source":"cli","addedAt":1}`, // added at run time
			"orders|gone": `{"source":"config"}`,          // dropped from the config
			"retired|x":   `{"source":"config"}`,          // a poller without an entry
		}
		for k, v := range keep {
			old[k] = v
		}
		old["single|"] = `{"source":"config"}` // an unpartitioned poller's key
		if err := b.Client.HSet(ctx, s.pollersKey(), "orders", entryListing(parts...), "single", `{"poller":"single"}`).Err(); err != nil {
			t.Fatal(err)
		}
		if err := b.Client.HSet(ctx, s.registryKey(), old).Err(); err != nil {
			t.Fatal(err)
		}
		dropped, err := s.dropListedRegistryEntries(ctx)
		if err != nil || dropped != n+1 {
			t.Fatalf("dropped %d, %v; want %d", dropped, err, n+1)
		}
		if got := b.Client.HGetAll(ctx, s.registryKey()).Val(); !maps.Equal(got, keep) {
			t.Fatalf("registry after the drop: %d entries %v, want %v", len(got), got, keep)
		}
		if dropped, err := s.dropListedRegistryEntries(ctx); err != nil || dropped != 0 {
			t.Fatalf("a second run dropped %d, %v", dropped, err)
		}
		if err := b.Client.HSet(ctx, s.pollersKey(), "broken", "{").Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := s.dropListedRegistryEntries(ctx); err == nil {
			t.Fatal("a pollers entry that is not JSON went unnoticed")
		}
	})
}

// A pause checks the deletion mark in the script that writes it: a key deleted since the
// engine looked takes no pause (partitions add would bring it back paused).
func TestPauseRefusesDeletedKey(t *testing.T) {
	redistest.Each(t, func(t *testing.T, b redistest.Backend) {
		ctx := context.Background()
		s, _ := newStore(t, b)
		key := watukuytype.Key{Poller: "orders", Partition: "a"}
		registerListing(t, s, "a")
		if err := s.Pause(ctx, key); err != nil {
			t.Fatal(err)
		}
		if b.Client.HGet(ctx, s.Key(key, "state"), "paused").Val() != "1" {
			t.Fatal("a live key was not paused")
		}
		deleteKey(t, s, key)
		if err := s.Pause(ctx, key); !errors.Is(err, core.ErrKeyDeleted) {
			t.Fatalf("pause of a deleted key: %v, want core.ErrKeyDeleted", err)
		}
		if v := b.Client.HGet(ctx, s.Key(key, "state"), "paused").Val(); v != "" {
			t.Fatalf("a deleted key holds paused %q", v)
		}
	})
}
