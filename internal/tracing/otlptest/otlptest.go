// Package otlptest is an OTLP/HTTP trace receiver for tests: it decodes the exports a
// process sends to /v1/traces and lists the spans they carried.
package otlptest

import (
	"compress/gzip"
	"io"
	"net/http"
	"sync"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Receiver is an http.Handler that takes OTLP/HTTP trace exports (POST /v1/traces, protobuf,
// gzip or not) and keeps them; anything else is answered 4xx and noted in Bad.
type Receiver struct {
	mu   sync.Mutex
	reqs []*collectortrace.ExportTraceServiceRequest
	bad  []string
}

// ServeHTTP takes one export.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		r.bad = append(r.bad, req.Method+" "+req.URL.Path)
		http.NotFound(w, req)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	raw, _ := io.ReadAll(body)
	msg := &collectortrace.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(raw, msg); err != nil {
		r.bad = append(r.bad, "undecodable body: "+err.Error())
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.reqs = append(r.reqs, msg)
	w.Header().Set("Content-Type", "application/x-protobuf")
	out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
	_, _ = w.Write(out)
}

// Spans lists "service.name/span name" of every span received, in order.
func (r *Receiver) Spans() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Spans(r.reqs)
}

// Bad lists the requests that were no trace export.
func (r *Receiver) Bad() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.bad...)
}

// Spans lists "service.name/span name" of every span of reqs (exports received another way,
// such as over gRPC).
func Spans(reqs []*collectortrace.ExportTraceServiceRequest) []string {
	var out []string
	for _, req := range reqs {
		for _, rs := range req.GetResourceSpans() {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				for _, s := range ss.GetSpans() {
					out = append(out, service+"/"+s.GetName())
				}
			}
		}
	}
	return out
}
