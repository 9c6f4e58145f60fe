package config

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/watukuy/watukuy/httppoll"
	"github.com/watukuy/watukuy/internal/core"
	"github.com/watukuy/watukuy/watukuytype"
)

// TestAllErrorsInOneRun: a short webhook secret, a missing schema file and a typo are all
// reported by one Load, each as file:line:col: pollers[i].key.
func TestAllErrorsInOneRun(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "w.yaml")
	src := `pollers:
  - name: orders
    schema: ./missing.json
    request:
      url: http://api.example.com/orders
      tiemout: 5s
    cursor:
      strategy: page
    delivery:
      webhook: {url: http://h, secret: whsec_c2hvcnQta2V5}
`
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path, envOf(nil))
	if err == nil {
		t.Fatal("no error")
	}
	want := []string{
		path + `:3:13: pollers[0].schema: open ` + filepath.Join(dir, "missing.json") + `: no such file or directory`,
		path + `:6:7: pollers[0].request.tiemout: unknown key "tiemout" (did you mean "timeout"?)`,
		path + `:10:40: pollers[0].delivery.webhook.secret: a webhook secret: key is too short: want at least 24 bytes`,
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("error %d:\n got %s\nwant %s…", i, lines[i], w)
		}
	}
	// Parse reads no other file: the schema is Build's business then.
	if _, err := Parse(path, []byte(strings.Replace(strings.Replace(src, "tiemout", "timeout", 1), "whsec_c2hvcnQta2V5", testSecret, 1)), envOf(nil)); err != nil {
		t.Errorf("Parse: %v", err)
	}
}

// TestBuildErrorsInOneRun: what only Build finds is reported for every poller at once, in the
// decoder's path style.
func TestBuildErrorsInOneRun(t *testing.T) {
	dir := t.TempDir()
	src := valid + `  - name: customers
    schema: ./gone.json
    request: {url: http://api.example.com/customers}
    cursor: {strategy: page}
    delivery: {stdout: {}}
`
	src = strings.Replace(src, "  request:", "  schema: ./gone.json\n    request:", 1)
	cfg, err := Parse(filepath.Join(dir, "w.yaml"), []byte(src), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	_, err = Build(cfg, nil, io.Discard, nil, zerolog.Nop())
	if err == nil {
		t.Fatal("no error")
	}
	lines := strings.Split(err.Error(), "\n")
	want := []string{filepath.Join(dir, "w.yaml") + ":2: pollers[0].schema: open ", filepath.Join(dir, "w.yaml") + ":10: pollers[1].schema: open "}
	if len(lines) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(lines), len(want), err)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("error %d:\n got %s\nwant %s…", i, lines[i], w)
		}
	}
}

// TestKnobs: circuit, the failure backoff, the body limit and jitter reach the built poller;
// an explicit jitter: 0 means none, a jitter left out the engine's default.
func TestKnobs(t *testing.T) {
	src := strings.Replace(valid, "  request:", `  circuit: {failures: 3, probeEvery: 2m}
    schedule: {jitter: 0, backoff: {base: 2s, factor: 3, max: 1m}}
    request:
      maxBodyBytes: 100`, 1)
	cfg, err := Parse("w.yaml", []byte(src), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	pc := cfg.Pollers[0]
	if pc.Circuit != (Circuit{Failures: 3, ProbeEvery: 2 * time.Minute}) || pc.Request.MaxBodyBytes != 100 ||
		pc.Schedule.Backoff != (Backoff{Base: 2 * time.Second, Factor: 3, Max: time.Minute}) || pc.Schedule.Jitter == nil || *pc.Schedule.Jitter != 0 {
		t.Fatalf("decoded %+v", pc)
	}
	ps, err := Build(cfg, nil, io.Discard, nil, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	p := ps[0]
	if p.Failures != 3 || p.ProbeEvery != 2*time.Minute || p.Backoff != (watukuytype.Backoff{Base: 2 * time.Second, Factor: 3, Max: time.Minute}) ||
		!p.Schedule.NoJitter || p.Schedule.Jitter != 0 {
		t.Errorf("built %+v", p)
	}

	// The body limit reaches the poller's requests.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `[{"id":"`+strings.Repeat("x", 200)+`"}]`)
	}))
	defer srv.Close()
	cfg, err = Parse("w.yaml", []byte(strings.Replace(src, "http://api.example.com/orders", srv.URL, 1)), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if ps, err = Build(cfg, nil, io.Discard, nil, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	_, err = core.Probe(context.Background(), ps[0], "")
	var tl *httppoll.BodyTooLargeError
	if !errors.As(err, &tl) || tl.Limit != 100 {
		t.Errorf("probe: %v, want a body over the limit of 100 bytes", err)
	}

	// Left out: zero values, the engine's defaults.
	cfg, err = Parse("w.yaml", []byte(valid), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if ps, err = Build(cfg, nil, io.Discard, nil, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	if p := ps[0]; p.Schedule.NoJitter || p.Schedule.Jitter != 0 || p.Failures != 0 || p.ProbeEvery != 0 || p.Backoff != (watukuytype.Backoff{}) {
		t.Errorf("defaults built %+v", p)
	}
}

// TestKnobErrors: the new keys' ranges, each at its key.
func TestKnobErrors(t *testing.T) {
	for _, tc := range []struct{ name, keys, want string }{
		{"factor below 1", "schedule: {backoff: {factor: 0.5}}", `w.yaml:3:34: pollers[0].schedule.backoff.factor: must be at least 1, got 0.5`},
		{"factor zero", "schedule: {backoff: {factor: 0}}", `w.yaml:3:34: pollers[0].schedule.backoff.factor: must be at least 1, got 0`},
		{"max below base", "schedule: {backoff: {base: 1m, max: 10s}}", `w.yaml:3:41: pollers[0].schedule.backoff.max: max 10s is less than base 1m0s`},
		{"max below the default base", "schedule: {backoff: {max: 500ms}}", `w.yaml:3:31: pollers[0].schedule.backoff.max: max 500ms is less than base 1s`},
		{"failures zero", "circuit: {failures: 0}", `w.yaml:3:25: pollers[0].circuit.failures: must be at least 1, got 0`},
		{"probeEvery not a duration", "circuit: {probeEvery: often}", `w.yaml:3:27: pollers[0].circuit.probeEvery: bad duration "often"`},
		{"body limit zero", "request: {maxBodyBytes: 0, url: http://h}", `w.yaml:3:29: pollers[0].request.maxBodyBytes: must be at least 1, got 0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(valid, "  request:", "  "+tc.keys+"\n    request:", 1)
			if strings.HasPrefix(tc.keys, "request:") {
				src = strings.Replace(valid, "  request:\n      url: http://api.example.com/orders", "  "+tc.keys, 1)
			}
			_, err := Parse("w.yaml", []byte(src), envOf(nil))
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("got:\n%v\nwant:\n%s…", err, tc.want)
			}
		})
	}
}

// TestSchemaSetsEveryField: every field of a decoded Poller is set by a key of the schema, so
// no setting is decoded without a row in docs/configuration.md's table; the rows that decode by a
// function of their own name the field here.
func TestSchemaSetsEveryField(t *testing.T) {
	var p Poller
	for _, f := range schema {
		if f.open != nil {
			f.open(&p)
		}
	}
	set := map[uintptr]string{}
	for _, f := range schema {
		if f.ptr != nil {
			set[reflect.ValueOf(f.ptr(&p)).Pointer()] = f.path
		}
	}
	byDecoder := map[string]any{
		"partitions": &p.Partitions, "schema": &p.Schema, "schedule.jitter": &p.Schedule.Jitter,
		"schedule.backoff.factor": &p.Schedule.Backoff.Factor, "delivery.webhook.secret": &p.Delivery.Webhook.Secrets,
		"delivery.retry.factor": &p.Delivery.Retry.Factor, "delivery.retry.horizon": &p.Delivery.RetryHorizon,
	}
	for _, f := range schema {
		if f.decode != nil {
			ptr, ok := byDecoder[f.path]
			if !ok {
				t.Errorf("%s decodes by a function: name the field it sets here", f.path)
				continue
			}
			set[reflect.ValueOf(ptr).Pointer()] = f.path
		}
	}
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		for i := range v.NumField() {
			fv, name := v.Field(i), path+v.Type().Field(i).Name
			if name == "Line" || name == "budgetAt" {
				continue // where the entry (or a key) is, not a setting
			}
			if _, ok := set[fv.Addr().Pointer()]; ok {
				continue
			}
			switch {
			case fv.Kind() == reflect.Struct:
				walk(fv, name+".")
			case fv.Kind() == reflect.Pointer && fv.Type().Elem().Kind() == reflect.Struct:
				walk(fv.Elem(), name+".")
			default:
				t.Errorf("Poller.%s is set by no key of the schema", name)
			}
		}
	}
	walk(reflect.ValueOf(&p).Elem(), "")
}
