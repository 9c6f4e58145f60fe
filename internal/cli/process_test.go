package cli

import (
	"context"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/watukuy/watukuy/internal/command"
	"github.com/watukuy/watukuy/internal/redistest"
	"github.com/watukuy/watukuy/watukuytype"
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
				if err == nil || !strings.Contains(err.Error(), addr) || command.ExitCode(err) != command.ExitFailed {
					t.Fatalf("%s with %s taken: exit %d, %v", args[0], addr, command.ExitCode(err), err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("%s still running 10s after its listener failed to bind %s", args[0], addr)
			}
		})
	}
}

// SIGHUP makes a running `run` re-read its config file: a poller added to the file starts
// delivering without a restart.
func TestRunReloadsOnSIGHUP(t *testing.T) {
	b := redistest.Real(t)
	poller := listPoller(t)
	cfg := writeConfig(t, "pollers:\n"+poller("orders"))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	time.AfterFunc(30*time.Second, cancel) // then next fails instead of waiting for ever
	lines, errc := startCLI(t, ctx, "run", "--config", cfg, "--redis", b.URL, "--listen", "off")
	if ev := jsonOf[watukuytype.Event](t, next(t, lines)); ev.Poller != "orders" {
		t.Fatalf("run delivered %+v", ev)
	} // an event came: the SIGHUP handler is installed (before the run starts)
	if err := os.WriteFile(cfg, []byte("pollers:\n"+poller("orders")+poller("customers")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for {
		if ev := jsonOf[watukuytype.Event](t, next(t, lines)); ev.Poller == "customers" {
			break
		}
	}
	cancel()
	if err := drain(lines, errc); err != nil {
		t.Fatalf("run after Ctrl-C: %v", err)
	}
}
