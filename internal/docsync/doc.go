// Package docsync holds only a test: it keeps README.md and docs/design.md in step with the
// code. Every test cited in them must exist, every link between them must land on a heading,
// and every code comment that cites a section of docs/design.md must name one that exists.
// It reads files only (no Redis), so it runs in well under a second.
package docsync
