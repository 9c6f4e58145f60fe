package watukuy_test

import (
	"testing"

	"github.com/watukuy/watukuy/internal/depcheck"
)

// TestEngineDependenciesStayLight fails when the engine package's import graph reaches the
// distributed pool's queue and monitoring, the HTTP test servers, or the OpenTelemetry SDK and
// exporters (the engine takes a TracerProvider of the API; the binaries bring the SDK, in
// internal/tracing): every program that embeds the engine, and watukuytest, would link them.
// The pool lives in package pool for that reason.
func TestEngineDependenciesStayLight(t *testing.T) {
	heavy := []string{"github.com/hibiken/asynq", "github.com/hibiken/asynqmon", "github.com/prometheus", "net/http/httptest",
		"go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters", "google.golang.org/grpc"}
	for _, b := range depcheck.Entries(t, "github.com/watukuy/watukuy", heavy, nil) {
		t.Errorf("the engine's dependencies: %s", b)
	}
}
