package sink

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/watukuy/watukuy/watukuytype"
)

// Stdout writes one NDJSON line per event (the envelope and "\n") to W, os.Stdout when nil.
// Each line goes out in a single Write under a mutex, so concurrent calls never interleave.
// The zero value is ready to use; a Stdout must not be copied after first use.
type Stdout struct {
	W io.Writer

	mu sync.Mutex
}

// Handle writes one event. A context that is already done writes nothing and returns its error.
func (s *Stdout) Handle(ctx context.Context, ev watukuytype.Event) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("sink: stdout: event %s: %w", ev.ID, err)
	}
	body, err := Envelope(ev)
	if err != nil {
		return err
	}
	line := append(body, '\n')
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.W
	if w == nil {
		w = os.Stdout
	}
	if _, err := w.Write(line); err != nil {
		return fmt.Errorf("sink: stdout: event %s: write: %w", ev.ID, err)
	}
	return nil
}
