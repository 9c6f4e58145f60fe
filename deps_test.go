package watukuy_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/watukuy/watukuy"
	"github.com/watukuy/watukuy/internal/depcheck"
)

// TestEngineDependenciesStayLight fails when the engine package's import graph reaches the
// distributed pool's queue and monitoring, the HTTP test servers, or the OpenTelemetry SDK and
// exporters (the engine takes a TracerProvider of the API; the binaries bring the SDK, in
// internal/tracing), or a broker's client (each lives in its sink's package under sinks/):
// every program that embeds the engine, and watukuytest, would link them. The pool lives in
// package pool for that reason.
func TestEngineDependenciesStayLight(t *testing.T) {
	heavy := []string{"github.com/hibiken/asynq", "github.com/hibiken/asynqmon", "github.com/prometheus", "net/http/httptest",
		"go.opentelemetry.io/otel/sdk", "go.opentelemetry.io/otel/exporters", "google.golang.org/grpc",
		"github.com/nats-io", "github.com/rabbitmq", "github.com/jackc"}
	for _, b := range depcheck.Entries(t, "github.com/watukuy/watukuy", heavy, nil) {
		t.Errorf("the engine's dependencies: %s", b)
	}
}

// TestPublicTypesHaveOneHome fails on a type alias in a public package: each public type is
// declared where go doc shows its fields and methods, not re-exported under a second name.
func TestPublicTypesHaveOneHome(t *testing.T) {
	public := []string{".", "pool", "webhook", "watukuytest", "watukuytype", "httppoll", "admintoken", "sinks/natssink", "sinks/amqpsink", "sinks/pgsink"}
	fset := token.NewFileSet()
	files := 0
	for _, dir := range public {
		paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range paths {
			if strings.HasSuffix(p, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files++
			for _, d := range f.Decls {
				if gd, ok := d.(*ast.GenDecl); ok && gd.Tok == token.TYPE {
					for _, s := range gd.Specs {
						if ts := s.(*ast.TypeSpec); ts.Assign.IsValid() && ts.Name.IsExported() {
							t.Errorf("%s: type %s is an alias: declare it in one home", fset.Position(ts.Pos()), ts.Name.Name)
						}
					}
				}
			}
		}
	}
	if files < 10 {
		t.Fatalf("read %d files of the public packages", files)
	}
}

// TestOptionsHaveNoHiddenFields fails when watukuy.Options grows an unexported field: what
// configures an engine is all in go doc, and the tests' seams stay out of the public type.
func TestOptionsHaveNoHiddenFields(t *testing.T) {
	typ := reflect.TypeOf(watukuy.Options{})
	for i := range typ.NumField() {
		if f := typ.Field(i); !f.IsExported() {
			t.Errorf("watukuy.Options.%s is unexported", f.Name)
		}
	}
}
