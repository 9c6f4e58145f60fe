package sink

import (
	"context"
	"errors"
	"testing"

	"github.com/watukuy/watukuy/watukuytype"
)

// fakeBroker counts its Close calls.
type fakeBroker struct {
	name   string
	closed int
}

func (f *fakeBroker) Handle(context.Context, watukuytype.Event) error { return nil }
func (f *fakeBroker) Kind() string                                    { return "fake" }
func (f *fakeBroker) Target() string                                  { return f.name }
func (f *fakeBroker) Probe(context.Context) (string, error)           { return "ok", nil }
func (f *fakeBroker) Close() error                                    { f.closed++; return nil }

func TestBrokersShareOnePerSettingAndCloseWhatNoPollerNames(t *testing.T) {
	var bs Brokers
	opened := map[string]*fakeBroker{}
	get := func(key string) Broker {
		t.Helper()
		b, err := bs.Get(key, func() (Broker, error) {
			f := &fakeBroker{name: key}
			opened[key] = f
			return f, nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if get("a") != get("a") {
		t.Fatal("two pollers of one setting got two brokers")
	}
	get("b")
	if len(opened) != 2 || len(bs.All()) != 2 {
		t.Fatalf("opened %d, kept %d; want 2 and 2", len(opened), len(bs.All()))
	}

	bs.Mark() // a reload whose pollers name a and c
	get("a")
	get("c")
	if err := bs.CloseUnused(); err != nil {
		t.Fatal(err)
	}
	if opened["a"].closed != 0 || opened["b"].closed != 1 || opened["c"].closed != 0 {
		t.Errorf("after the reload: closed a %d, b %d, c %d; want 0, 1, 0", opened["a"].closed, opened["b"].closed, opened["c"].closed)
	}
	if err := bs.Close(); err != nil {
		t.Fatal(err)
	}
	if opened["a"].closed != 1 || opened["c"].closed != 1 || len(bs.All()) != 0 {
		t.Errorf("after Close: a %d, c %d closed, %d kept; want 1, 1, 0", opened["a"].closed, opened["c"].closed, len(bs.All()))
	}
}

func TestBrokersKeepNothingThatFailedToOpen(t *testing.T) {
	var bs Brokers
	boom := errors.New("bad setting")
	if _, err := bs.Get("x", func() (Broker, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("Get = %v, want the open error", err)
	}
	if n := len(bs.All()); n != 0 {
		t.Errorf("kept %d brokers, want 0", n)
	}
}
