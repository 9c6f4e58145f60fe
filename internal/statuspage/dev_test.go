package statuspage_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/watukuy/watukuy/internal/app"
	"github.com/watukuy/watukuy/internal/cli"
	"github.com/watukuy/watukuy/internal/statuspage"
)

// lineWriter hands the lines written to it to a channel.
type lineWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines chan string
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		l, err := w.buf.ReadString('\n')
		if err != nil {
			w.buf.WriteString(l)
			return len(p), nil
		}
		select {
		case w.lines <- strings.TrimRight(l, "\n"):
		default: // nobody reads any more: the events keep coming
		}
	}
}

// The status page of a running `watukuy dev`: logging in with the token its banner prints
// shows the demo's keys, with no console error.
func TestBrowserDev(t *testing.T) {
	t.Setenv(app.AdminTokenEnv, "")
	ctx := statuspage.Browser(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dctx, cancel := context.WithCancel(t.Context())
	out := &lineWriter{lines: make(chan string, 64)}
	root := cli.Root()
	root.SetOut(out)
	root.SetErr(io.Discard)
	root.SetArgs([]string{"dev", "--listen", addr})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(dctx) }()
	t.Cleanup(func() { cancel(); <-done })

	var secret string
	deadline := time.After(30 * time.Second)
	for served := false; !served; {
		select {
		case l := <-out.lines:
			if rest, ok := strings.CutPrefix(l, "admin API"); ok {
				_, secret, _ = strings.Cut(rest, "Bearer ")
				secret = strings.TrimSuffix(secret, ")")
			}
			served = strings.Contains(l, " created ") // an event: the listener serves
		case err := <-done:
			t.Fatalf("dev ended: %v", err)
		case <-deadline:
			t.Fatal("dev delivered no event in 30s")
		}
	}
	if secret == "" {
		t.Fatal("dev's banner shows no admin token")
	}

	base := "http://" + addr
	var console statuspage.ConsoleLog
	console.Listen(ctx, base)
	err = chromedp.Do(ctx,
		chromedp.Navigate(base+"/status"),
		chromedp.WaitVisible(chromedp.CSS(`input#token`)),
		chromedp.SendKeys(chromedp.CSS(`input#token`), secret),
		chromedp.Click(chromedp.CSS(`form[data-login] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`table[data-keys]`)))
	if err != nil {
		t.Fatalf("log in to dev's status page: %v", err)
	}
	keys, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('tr[data-key]')].map(tr => tr.dataset.key).sort()`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(keys, " ") != "customers/- orders/-" {
		t.Fatalf("dev's status page shows %v, want the demo's customers and orders", keys)
	}
	if link, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!!document.querySelector('a[href="/monitoring/"]')`)); err != nil || !link {
		t.Errorf("no asynqmon link on dev's page (dev runs asynqmon): %v", err)
	}
	for _, e := range console.Take() {
		t.Errorf("console: %s", e)
	}
}
