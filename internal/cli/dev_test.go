package cli

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/app"
	"github.com/watukuy/watukuy/internal/command"
)

// dev on an address another process holds prints nothing of its banner (no URL of the other
// process, no token): one error names the address once and says which --listen to pass.
func TestDevBusyListenPrintsNoBanner(t *testing.T) {
	t.Setenv(app.AdminTokenEnv, "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	out, errb, err := run(t, "dev", "--listen", addr)
	if command.ExitCode(err) != command.ExitFailed {
		t.Fatalf("dev with %s taken: exit %d, %v", addr, command.ExitCode(err), err)
	}
	if out != "" {
		t.Errorf("dev with %s taken printed on stdout:\n%s", addr, out)
	}
	for _, s := range []string{out, errb} {
		if strings.Contains(s, "Bearer") || strings.Contains(s, "/status") {
			t.Errorf("dev with %s taken printed a URL or a token:\n%s", addr, s)
		}
	}
	msg := err.Error()
	if n := strings.Count(msg, addr); n != 1 {
		t.Errorf("the error names %s %d times, want once: %s", addr, n, msg)
	}
	for _, want := range []string{"--listen " + addr, "address already in use", "--listen 127.0.0.1:0"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the error does not say %q: %s", want, msg)
		}
	}
}

// dev --listen 127.0.0.1:0 shows the port it picked, and serves there.
func TestDevBannerShowsTheBoundAddress(t *testing.T) {
	t.Setenv(app.AdminTokenEnv, "")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	time.AfterFunc(30*time.Second, cancel)
	lines, errc := startCLI(t, ctx, "dev", "--listen", "127.0.0.1:0")
	var status string
	for status == "" {
		if rest, ok := strings.CutPrefix(next(t, lines), "status page"); ok {
			status = strings.TrimSpace(rest)
		}
	}
	go func() {
		for lines.Scan() {
		}
	}()
	if strings.Contains(status, ":0/") {
		t.Fatalf("the banner shows port 0: %s", status)
	}
	resp, err := http.Get(strings.TrimSuffix(status, "/status") + "/healthz")
	if err != nil {
		t.Fatalf("the banner's address %s: %v", status, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz at the banner's address: %s", resp.Status)
	}
	cancel()
	<-errc
}
