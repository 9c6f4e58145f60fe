package app

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/watukuy/watukuy/internal/tracing"
)

// flushTimeout bounds the export of the last spans when a process stops.
const flushTimeout = 5 * time.Second

// traces is an Env's tracing: the provider's shutdown, run once.
type traces struct {
	once     sync.Once
	shutdown tracing.Shutdown
}

// startTracing sets tracing up from the OTEL_* environment (internal/tracing) for the engine
// finish builds; nil when it is off, so the engine starts no span. service is the default
// service.name (Settings.Service, the binary's name).
func (env *Env) startTracing(ctx context.Context, s Settings) (trace.TracerProvider, error) {
	service := s.Service
	if service == "" {
		service = "watukuy"
	}
	tp, shutdown, err := tracing.Setup(ctx, service)
	if err != nil {
		return nil, err
	}
	env.traces.shutdown = shutdown
	if _, off := tp.(noop.TracerProvider); off {
		return nil, nil
	}
	// The SDK reports failed exports through this handler (else the standard logger, in
	// another format than the process's log).
	log := env.Log
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn().Err(err).Msg("tracing: OpenTelemetry error (spans may be lost)")
	}))
	log.Info().Str("service", service).Msg("tracing on: a span tree per cycle, from the OTEL_* environment")
	return tp, nil
}

// FlushTraces exports the spans still buffered and stops tracing, waiting up to 5 s. The
// Run functions call it when they return, after their last cycle ended, and so does a
// command that opened the environment; later calls do nothing.
func (env *Env) FlushTraces() {
	env.traces.once.Do(func() {
		if env.traces.shutdown == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		defer cancel()
		if err := env.traces.shutdown(ctx); err != nil {
			env.Log.Warn().Err(err).Msg("tracing: the last spans were not all exported")
		}
	})
}
