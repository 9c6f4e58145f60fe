package cli

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/redistest"
)

// run and dev exit at once, with the address in the error, when their listener cannot bind
// (the default 9090 is also Prometheus's port), as the worker and the scheduler do: they used
// to keep running and poll nothing.
func TestProcessesFailFastOnBusyListen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	b := redistest.Real(t)
	cfg := writeConfig(t, `pollers:
  - name: orders
    request: {url: http://127.0.0.1:1/list}
    cursor: {strategy: page}
    delivery: {stdout: {}}
`)
	for _, args := range [][]string{
		{"run", "--config", cfg, "--redis", b.URL, "--listen", addr},
		{"dev", "--listen", addr},
		{"worker", "--config", cfg, "--redis", b.URL, "--listen", addr},
		{"scheduler", "--config", cfg, "--redis", b.URL, "--listen", addr},
	} {
		t.Run(args[0], func(t *testing.T) {
			errc := make(chan error, 1)
			go func() { _, _, err := run(t, args...); errc <- err }()
			select {
			case err := <-errc:
				if err == nil || !strings.Contains(err.Error(), addr) || exitCode(err) != ExitFailed {
					t.Fatalf("%s with %s taken: exit %d, %v", args[0], addr, exitCode(err), err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s still running 10s after its listener failed to bind %s", args[0], addr)
			}
		})
	}
}
