package tracing

import (
	"bytes"
	"context"
	"net"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/watukuy/watukuy/internal/tracing/otlptest"
)

// otelVars are the variables these tests set; each test starts with none of them set.
var otelVars = []string{EnvSDKDisabled, EnvTracesExporter, EnvEndpoint, EnvTracesEndpoint, EnvProtocol, EnvTracesProtocol,
	"OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_EXPORTER_OTLP_HEADERS"}

// cleanEnv unsets every OTEL_* variable the tests use, and sets vars (name, value pairs);
// t.Setenv puts the process's own values back when the test ends.
func cleanEnv(t *testing.T, vars ...string) {
	t.Helper()
	for _, k := range otelVars {
		t.Setenv(k, "")
		_ = os.Unsetenv(k)
	}
	for i := 0; i+1 < len(vars); i += 2 {
		t.Setenv(vars[i], vars[i+1])
	}
}

// emit ends one span named name on tp and runs shutdown, which exports it.
func emit(t *testing.T, tp trace.TracerProvider, shutdown Shutdown, name string) {
	t.Helper()
	_, span := tp.Tracer("test").Start(context.Background(), name)
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}

// Off unless the environment asks: no variable, or the disabling ones whatever else is set,
// give the API's no-op provider (the engine then starts no span).
func TestSetupOff(t *testing.T) {
	for name, vars := range map[string][]string{
		"no variable":       nil,
		"sdk disabled":      {EnvSDKDisabled, "true", EnvTracesExporter, "otlp", EnvEndpoint, "http://127.0.0.1:1"},
		"sdk disabled TRUE": {EnvSDKDisabled, "TRUE", EnvTracesExporter, "console"},
		"exporter none":     {EnvTracesExporter, "none", EnvEndpoint, "http://127.0.0.1:1"},
		"none in a list":    {EnvTracesExporter, "console,none"},
		"only a protocol":   {EnvProtocol, "grpc"},
	} {
		t.Run(name, func(t *testing.T) {
			cleanEnv(t, vars...)
			tp, shutdown, err := Setup(context.Background(), "watukuy")
			if err != nil {
				t.Fatal(err)
			}
			if _, off := tp.(noop.TracerProvider); !off {
				t.Fatalf("provider %T, want the no-op one", tp)
			}
			if err := shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// OTEL_TRACES_EXPORTER=console writes each span as JSON with the resource: service.name is the
// binary's unless OTEL_SERVICE_NAME (or OTEL_RESOURCE_ATTRIBUTES) names another.
func TestSetupConsole(t *testing.T) {
	for _, tc := range []struct {
		name    string
		vars    []string
		service string
	}{
		{"default service name", nil, "watukuy-worker"},
		{"OTEL_SERVICE_NAME", []string{"OTEL_SERVICE_NAME", "orders-worker"}, "orders-worker"},
		{"OTEL_RESOURCE_ATTRIBUTES", []string{"OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attrs,deployment.environment=test"}, "from-attrs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cleanEnv(t, append([]string{EnvTracesExporter, "console"}, tc.vars...)...)
			if tp, shutdown, err := Setup(context.Background(), "watukuy-worker"); err != nil {
				t.Fatal(err)
			} else if _, sdk := tp.(*sdktrace.TracerProvider); !sdk {
				t.Fatalf("Setup with console: provider %T, want the SDK's", tp)
			} else {
				_ = shutdown(context.Background())
			}
			var out bytes.Buffer
			tp, shutdown, err := setup(context.Background(), "watukuy-worker", &out)
			if err != nil {
				t.Fatal(err)
			}
			emit(t, tp, shutdown, "probe-span")
			s := out.String()
			if !strings.Contains(s, `"Name":"probe-span"`) || !strings.Contains(s, `"Key":"service.name","Value":{"Type":"STRING","Value":"`+tc.service+`"}`) {
				t.Fatalf("console output lacks the span or service.name %q:\n%s", tc.service, s)
			}
		})
	}
}

// An OTLP endpoint turns tracing on (OTLP over HTTP, the default protocol): the span reaches
// the receiver by the time shutdown returns, with the default service name; the traces
// endpoint (a full URL) does too, and OTEL_TRACES_SAMPLER is the SDK's.
func TestSetupOTLPHTTP(t *testing.T) {
	for _, tc := range []struct {
		name string
		vars func(url string) []string
		want []string
	}{
		{"OTEL_EXPORTER_OTLP_ENDPOINT", func(u string) []string { return []string{EnvEndpoint, u} }, []string{"watukuy-scheduler/a-span"}},
		{"otlp and the traces endpoint", func(u string) []string {
			return []string{EnvTracesExporter, "otlp", EnvTracesEndpoint, u + "/v1/traces", EnvTracesProtocol, "http/protobuf"}
		}, []string{"watukuy-scheduler/a-span"}},
		{"sampler always_off", func(u string) []string { return []string{EnvEndpoint, u, "OTEL_TRACES_SAMPLER", "always_off"} }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			recv := &otlptest.Receiver{}
			srv := httptest.NewServer(recv)
			defer srv.Close()
			cleanEnv(t, tc.vars(srv.URL)...)
			tp, shutdown, err := Setup(context.Background(), "watukuy-scheduler")
			if err != nil {
				t.Fatal(err)
			}
			emit(t, tp, shutdown, "a-span")
			if got := recv.Spans(); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("received %q, want %q", got, tc.want)
			}
			if bad := recv.Bad(); len(bad) > 0 {
				t.Errorf("unexpected requests: %q", bad)
			}
		})
	}
}

// grpcReceiver is an OTLP/gRPC trace service keeping what it receives.
type grpcReceiver struct {
	collectortrace.UnimplementedTraceServiceServer
	mu   sync.Mutex
	reqs []*collectortrace.ExportTraceServiceRequest
}

func (g *grpcReceiver) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.reqs = append(g.reqs, req)
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

// OTEL_EXPORTER_OTLP_PROTOCOL=grpc exports over gRPC.
func TestSetupOTLPGRPC(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	recv := &grpcReceiver{}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, recv)
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()
	cleanEnv(t, EnvEndpoint, "http://"+lis.Addr().String(), EnvProtocol, "grpc")
	tp, shutdown, err := Setup(context.Background(), "watukuy")
	if err != nil {
		t.Fatal(err)
	}
	emit(t, tp, shutdown, "over-grpc")
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if got := otlptest.Spans(recv.reqs); strings.Join(got, ",") != "watukuy/over-grpc" {
		t.Errorf("received %q over gRPC", got)
	}
}

// A misspelt exporter or an unsupported protocol is an error naming the variable, not
// silence.
func TestSetupErrors(t *testing.T) {
	for name, tc := range map[string]struct {
		vars []string
		want string
	}{
		"unknown exporter": {[]string{EnvTracesExporter, "otlp,zipkin"}, `OTEL_TRACES_EXPORTER="otlp,zipkin": unknown exporter "zipkin"`},
		"http/json":        {[]string{EnvEndpoint, "http://127.0.0.1:1", EnvProtocol, "http/json"}, `OTLP protocol "http/json" is not supported`},
	} {
		t.Run(name, func(t *testing.T) {
			cleanEnv(t, tc.vars...)
			tp, _, err := Setup(context.Background(), "watukuy")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if _, off := tp.(noop.TracerProvider); !off {
				t.Errorf("provider %T after an error, want the no-op one", tp)
			}
		})
	}
}
