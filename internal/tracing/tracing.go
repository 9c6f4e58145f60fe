// Package tracing builds the processes' OpenTelemetry tracer provider from the standard
// OTEL_* environment variables. It is off by default; it is on when OTEL_TRACES_EXPORTER is
// otlp or console, or, with OTEL_TRACES_EXPORTER unset, when OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set; OTEL_SDK_DISABLED=true or
// OTEL_TRACES_EXPORTER=none turn it off whatever else is set.
//
// The rest is the SDK's and the exporter's own reading of the environment: the OTLP
// endpoint, headers, timeout, compression and certificates (OTEL_EXPORTER_OTLP_*), the
// protocol (OTEL_EXPORTER_OTLP_PROTOCOL or its TRACES_ form: http/protobuf, the default, or
// grpc), the sampler (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG), the batch processor
// (OTEL_BSP_*), and the resource (OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES over the
// default service.name the caller gives, the binary's name).
//
// The engine package links only the OpenTelemetry API; this package, with the SDK and the
// exporters, is linked by the binaries (internal/app).
package tracing

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/watukuy/watukuy/internal/buildinfo"
)

// The environment variables Setup reads itself (the SDK and exporters read the others).
const (
	EnvSDKDisabled    = "OTEL_SDK_DISABLED"                  // true: off, whatever else is set
	EnvTracesExporter = "OTEL_TRACES_EXPORTER"               // otlp, console, none, or a list
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"        // set: on with otlp (exporter unset)
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" // set: on with otlp (exporter unset)
	EnvProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"        // http/protobuf (default) or grpc
	EnvTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" // the same for traces alone, first
)

// Exporter and protocol names, and the service name when the caller gives none.
const (
	exporterOTLP           = "otlp"
	exporterConsole        = "console"
	exporterNone           = "none"
	protocolGRPC           = "grpc"
	protocolHTTPProtobuf   = "http/protobuf"
	defaultServiceFallback = "watukuy"
)

// Shutdown flushes the spans still buffered and stops the exporters; ctx bounds the wait.
type Shutdown func(ctx context.Context) error

// Setup returns the tracer provider the OTEL_* environment asks for, and its Shutdown, which
// a process calls once it has stopped (the last cycles' spans are exported then).
// serviceName is the default service.name (the binary: watukuy-worker, watukuy-scheduler,
// watukuy). With tracing off, the provider is the API's no-op one (the engine then starts no
// span at all) and Shutdown does nothing. The console exporter writes one JSON span a line to
// stderr: stdout carries the events of the stdout sink and of watukuy dev.
func Setup(ctx context.Context, serviceName string) (trace.TracerProvider, Shutdown, error) {
	return setup(ctx, serviceName, os.Stderr)
}

// setup is Setup with the console exporter's writer.
func setup(ctx context.Context, serviceName string, console io.Writer) (trace.TracerProvider, Shutdown, error) {
	off := func(context.Context) error { return nil }
	exporters, err := exportersFromEnv()
	if err != nil || len(exporters) == 0 {
		return noop.NewTracerProvider(), off, err
	}
	if serviceName == "" {
		serviceName = defaultServiceFallback
	}
	// Later options win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES over the default name.
	res, err := resource.New(ctx, resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(serviceName), semconv.ServiceVersion(buildinfo.Read().Version)),
		resource.WithFromEnv())
	if err != nil {
		return noop.NewTracerProvider(), off, fmt.Errorf("tracing: resource from OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
	for _, name := range exporters {
		exp, err := newExporter(ctx, name, console)
		if err != nil {
			return noop.NewTracerProvider(), off, err
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(opts...) // the sampler: OTEL_TRACES_SAMPLER, read by the SDK
	return tp, tp.Shutdown, nil
}

// exportersFromEnv names the exporters the environment asks for; none means tracing is off.
func exportersFromEnv() ([]string, error) {
	if strings.EqualFold(strings.TrimSpace(os.Getenv(EnvSDKDisabled)), "true") {
		return nil, nil
	}
	v := strings.TrimSpace(os.Getenv(EnvTracesExporter))
	if v == "" {
		if os.Getenv(EnvEndpoint) != "" || os.Getenv(EnvTracesEndpoint) != "" {
			return []string{exporterOTLP}, nil
		}
		return nil, nil
	}
	var names []string
	for _, n := range strings.Split(v, ",") {
		switch n = strings.ToLower(strings.TrimSpace(n)); n {
		case exporterNone:
			return nil, nil // none wins over any other name in the list
		case exporterOTLP, exporterConsole:
			names = append(names, n)
		case "":
		default:
			return nil, fmt.Errorf("tracing: %s=%q: unknown exporter %q (otlp, console or none)", EnvTracesExporter, v, n)
		}
	}
	return names, nil
}

// newExporter builds the named exporter; OTLP over HTTP unless the protocol variables say
// grpc. The OTLP exporters read their endpoint, headers, timeout and TLS from the
// environment themselves.
func newExporter(ctx context.Context, name string, console io.Writer) (sdktrace.SpanExporter, error) {
	if name == exporterConsole {
		exp, err := stdouttrace.New(stdouttrace.WithWriter(console))
		if err != nil {
			return nil, fmt.Errorf("tracing: console exporter: %w", err)
		}
		return exp, nil
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch p := protocol(); p {
	case protocolGRPC:
		exp, err = otlptracegrpc.New(ctx)
	case protocolHTTPProtobuf:
		exp, err = otlptracehttp.New(ctx)
	default:
		return nil, fmt.Errorf("tracing: OTLP protocol %q is not supported (http/protobuf or grpc; from %s or %s)", p, EnvTracesProtocol, EnvProtocol)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	return exp, nil
}

// protocol is the OTLP protocol for traces: the TRACES variable, the general one, or the
// default http/protobuf.
func protocol() string {
	for _, k := range []string{EnvTracesProtocol, EnvProtocol} {
		if v := strings.ToLower(strings.TrimSpace(os.Getenv(k))); v != "" {
			return v
		}
	}
	return protocolHTTPProtobuf
}
