package sink

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/watukuy/watukuy/watukuytype"
)

func TestStdoutConcurrentNDJSON(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer // not safe for concurrent use: the sink's lock must protect it (-race)
	s := &Stdout{W: &buf}
	const workers, each = 32, 50
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				ev := testEvent(fmt.Sprintf("ev_%02d_%03d", w, i))
				// Large items make a torn line likely if writes were not atomic.
				ev.Item = json.RawMessage(fmt.Sprintf(`{"pad":%q}`, strings.Repeat("x", 1000+w*i)))
				if err := s.Handle(context.Background(), ev); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	seen := map[string]bool{}
	sc := bufio.NewScanner(&buf)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var ev watukuytype.Event
		if err := json.Unmarshal(line, &ev); err != nil {
			t.Fatalf("line %d is not JSON: %v: %.80s", len(seen)+1, err, line)
		}
		if want, _ := Envelope(ev); !bytes.Equal(line, want) {
			t.Fatalf("line is not the envelope of its event:\n got %s\nwant %s", line, want)
		}
		if seen[ev.ID] {
			t.Fatalf("%s written twice", ev.ID)
		}
		seen[ev.ID] = true
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(seen) != workers*each {
		t.Fatalf("%d lines, want %d", len(seen), workers*each)
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestStdoutErrors(t *testing.T) {
	t.Parallel()
	if err := (&Stdout{W: failingWriter{}}).Handle(context.Background(), testEvent("ev_w")); err == nil ||
		!strings.Contains(err.Error(), "ev_w") || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("failing writer: %v", err)
	}

	var buf bytes.Buffer
	s := &Stdout{W: &buf}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Handle(ctx, testEvent("ev_c")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
	bad := testEvent("ev_bad")
	bad.Item = []byte("{")
	if err := s.Handle(context.Background(), bad); err == nil || !strings.Contains(err.Error(), "ev_bad") {
		t.Errorf("bad item: %v", err)
	}
	if buf.Len() != 0 {
		t.Errorf("wrote %q", buf.String())
	}
}
