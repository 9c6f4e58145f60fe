package app

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/watukuy/watukuy/internal/redistest"
)

// Console logs written to a file, a pipe or a buffer carry no ANSI colour codes: a log
// collector, a CI log or `2>file` gets plain text.
func TestConsoleLogsPlainWhenNotATerminal(t *testing.T) {
	t.Setenv("NO_COLOR", "")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	var buf bytes.Buffer
	for name, w := range map[string]interface{ Write([]byte) (int, error) }{"buffer": &buf, "pipe": pw} {
		log, err := Logger("console", "", w)
		if err != nil {
			t.Fatal(err)
		}
		log.Warn().Str("poller", "orders").Msg("cycle failed")
		if name == "pipe" {
			pw.Close()
			b := make([]byte, 4096)
			n, _ := pr.Read(b)
			buf.Reset()
			buf.Write(b[:n])
		}
		if line := buf.String(); strings.Contains(line, "\x1b[") || !strings.Contains(line, "WRN cycle failed poller=orders") {
			t.Errorf("console line to a %s: %q, want plain text", name, line)
		}
		buf.Reset()
	}
}

// A server that answers the connection with an error (a DB index it does not have) is said to
// have answered, with its own words and, when its CONFIG tells, how many databases it has:
// it does not "not answer".
func TestConnectSaysDBOutOfRange(t *testing.T) {
	t.Run("redis-server", func(t *testing.T) {
		b := redistest.RealTCP(t, "--databases", "4")
		_, err := Connect(context.Background(), b.URL+"/7")
		want := "redis at " + b.URL + "/7: DB 7 is out of range (the server has 4 databases: 0 to 3): ERR DB index is out of range"
		if err == nil || err.Error() != want {
			t.Fatalf("Connect to DB 7 of 4: %v\nwant %s", err, want)
		}
	})
	t.Run("CONFIG hidden", func(t *testing.T) { // as a managed Redis hides it: no count
		b := redistest.RealTCP(t, "--databases", "4", "--rename-command", "CONFIG", "")
		_, err := Connect(context.Background(), b.URL+"/99")
		want := "redis at " + b.URL + "/99: DB 99 is out of range: ERR DB index is out of range"
		if err == nil || err.Error() != want {
			t.Fatalf("Connect to DB 99 of 4: %v\nwant %s", err, want)
		}
	})
}
