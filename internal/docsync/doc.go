// Package docsync holds only tests: they keep the documents (README.md, CHANGELOG.md and every
// Markdown file under docs/) in step with the code and with each other. Every test a document
// cites must exist, every relative link must land on a file that exists and, with an anchor,
// on a heading of it, every document under docs/ must say first who it is for and be listed
// in the README's map, and every code comment that cites a section of docs/design.md must name
// a heading there. They read files only (no Redis), so they run in well under a second.
package docsync
