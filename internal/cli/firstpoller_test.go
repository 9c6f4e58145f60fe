package cli

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadmeFirstPoller runs the README's "Your first poller" as written: its items file served
// over HTTP, its config (the URL pointed at the test's server), then validate --probe, and
// checks the two items come out with their identities. A walkthrough that stops working fails here.
func TestReadmeFirstPoller(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	start := strings.Index(readme, "\n## Your first poller\n")
	if start < 0 {
		t.Fatal(`README has no "## Your first poller" section`)
	}
	section := readme[start:]
	section = section[:strings.Index(section[1:], "\n## ")+1]

	// The items: the JSON echo'd into first/api/items.json.
	const echo = "echo '"
	i := strings.Index(section, echo)
	j := strings.Index(section[i+len(echo):], "' > first/api/items.json")
	if i < 0 || j < 0 {
		t.Fatal("the walkthrough no longer writes first/api/items.json with echo '…'")
	}
	items := section[i+len(echo) : i+len(echo)+j]
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/items.json" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(items))
	}))
	defer srv.Close()

	// The config: the first yaml block, its URL on the test's server.
	y := strings.Index(section, "```yaml\n")
	if y < 0 {
		t.Fatal("the walkthrough has no yaml block")
	}
	yaml := section[y+len("```yaml\n"):]
	yaml = yaml[:strings.Index(yaml, "```")]
	var lines []string
	for _, l := range strings.Split(yaml, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "   ")) // the block is indented under a list item
	}
	yaml = strings.ReplaceAll(strings.Join(lines, "\n"), "http://127.0.0.1:8765", srv.URL)
	if !strings.Contains(yaml, srv.URL) {
		t.Fatalf("the walkthrough's config does not poll http://127.0.0.1:8765:\n%s", yaml)
	}
	cfg := writeConfig(t, yaml)

	out, errb, err := run(t, "validate", "--config", cfg, "--probe")
	if err != nil {
		t.Fatalf("validate --probe on the walkthrough's config: %v\n%s\n%s", err, out, errb)
	}
	if !strings.Contains(out, "probe items: 2 items, 0 invalid") || !strings.Contains(out, "hasMore no") {
		t.Fatalf("validate --probe does not show the walkthrough's two items on one page:\n%s", out)
	}
}
