// Package health serves the HTTP endpoints of workers and schedulers: /healthz (liveness),
// /readyz (readiness), /metrics (Prometheus) and, optionally, the asynqmon UI under
// /monitoring/, the admin API under /api/ and the status page at /status.
package health

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

const (
	// readyTimeout bounds one call of Server.Ready.
	readyTimeout = 2 * time.Second
	// shutdownTimeout bounds the graceful shutdown once the context is done; connections still
	// open after it are closed.
	shutdownTimeout = 5 * time.Second
	// Off is the Listen value that disables the server.
	Off = "off"
	// UIPath is where the UI handler is mounted. The handler receives the full path
	// (/monitoring/...), so asynqmon must be built with RootPath "/monitoring".
	UIPath = "/monitoring"
)

// Server is the HTTP server of a worker or scheduler process.
type Server struct {
	// Listen is the address to listen on, e.g. "127.0.0.1:9090" (port 0 picks a free port);
	// "off" disables the server.
	Listen string
	// Ready reports readiness (e.g. a Redis PING): /readyz answers 200 "ok" when it returns
	// nil, 503 with the error text otherwise. It is called with a 2s timeout; a Ready that
	// ignores its context still gets a 503 after 2s. nil means always ready.
	Ready func(ctx context.Context) error
	// Metrics is served at /metrics, e.g. promhttp.HandlerFor(registry, promhttp.HandlerOpts{});
	// nil answers 404.
	Metrics http.Handler
	// UI is mounted at /monitoring/ (asynqmon, built with RootPath "/monitoring"); nil answers 404.
	UI http.Handler
	// API is mounted at /api/ (the admin API, internal/admin); nil answers 404.
	API http.Handler
	// Status is mounted at /status and below it (the status page); nil answers 404.
	Status http.Handler
	// Logger logs the address and serving errors.
	Logger zerolog.Logger

	done chan struct{}
}

// Handler returns the server's routes, for embedding them in another server or a test.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		text(w, http.StatusOK, "ok")
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	if s.Metrics != nil {
		mux.Handle("/metrics", s.Metrics)
	}
	if s.UI != nil {
		// The subtree pattern also redirects /monitoring to /monitoring/.
		mux.Handle(UIPath+"/", s.UI)
	}
	if s.API != nil {
		mux.Handle("/api/", s.API)
	}
	if s.Status != nil {
		mux.Handle("/status", s.Status)
		mux.Handle("/status/", s.Status)
	}
	return mux
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.Ready == nil {
		text(w, http.StatusOK, "ok")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	res := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				res <- fmt.Errorf("readiness check panicked: %v", p)
			}
		}()
		res <- s.Ready(ctx)
	}()
	var err error
	select {
	case err = <-res:
	case <-ctx.Done():
		err = fmt.Errorf("readiness check: %w", context.Cause(ctx))
	}
	if err != nil {
		text(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	text(w, http.StatusOK, "ok")
}

func text(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(strings.TrimRight(body, "\n") + "\n"))
}

// Start listens on Listen and serves in the background until ctx is done, then shuts down
// gracefully (in-flight requests get 5s, then their connections are closed). It returns the
// bound address (useful with port 0). With Listen "off" it serves nothing and returns "", nil.
// A listen error (address in use, bad address) is returned at once. Start a Server once.
func (s *Server) Start(ctx context.Context) (string, error) {
	s.done = make(chan struct{})
	if s.Listen == Off {
		close(s.done)
		s.Logger.Info().Msg("health server disabled (listen: off)")
		return "", nil
	}
	if s.Listen == "" {
		close(s.done)
		return "", errors.New(`health: Listen is empty (set an address such as "127.0.0.1:9090", or "off")`)
	}
	ln, err := net.Listen("tcp", s.Listen)
	if err != nil {
		close(s.done)
		return "", fmt.Errorf("health: listen %s: %w", s.Listen, err)
	}
	addr := ln.Addr().String()
	srv := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.Logger.Error().Err(err).Str("addr", addr).Msg("health server stopped")
		}
	}()
	go func() {
		defer close(s.done)
		select {
		case <-ctx.Done():
		case <-served: // Serve failed by itself
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			s.Logger.Warn().Err(err).Str("addr", addr).Msg("health server: graceful shutdown timed out; closing connections")
			_ = srv.Close()
		}
		<-served
	}()
	s.Logger.Info().Str("addr", addr).Bool("metrics", s.Metrics != nil).Bool("ui", s.UI != nil).Bool("admin", s.API != nil).Msg("health server listening")
	return addr, nil
}

// Done is closed once the server has stopped after its context was done (at once for "off"
// or a failed Start). It is nil before Start.
func (s *Server) Done() <-chan struct{} { return s.done }
