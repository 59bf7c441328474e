// Package otlptest is an in-process OTLP/HTTP trace receiver for tests: an
// httptest server that decodes the collector's ExportTraceServiceRequest
// (protobuf or JSON, gzip or not) and keeps the spans, with helpers to wait
// for spans and walk the tree of one trace.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Span is one received span, flattened for assertions.
type Span struct {
	TraceID, SpanID, ParentID string // hex; ParentID is "" for a root
	Name                      string
	Kind                      string // SPAN_KIND_SERVER, ...
	Service                   string // the resource's service.name
	Scope                     string // the instrumentation scope name
	Attrs                     map[string]any
	StatusCode                string // STATUS_CODE_UNSET, _OK, _ERROR
	StatusMessage             string
	Start, End                time.Time
}

// Receiver collects the spans exported to it. Safe for concurrent use.
type Receiver struct {
	srv *httptest.Server

	mu      sync.Mutex
	spans   []Span
	bad     []string // requests that could not be decoded
	changed chan struct{}
}

// Start runs a receiver for the test; it stops at the end of the test.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r := &Receiver{changed: make(chan struct{})}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

// URL is the receiver's base URL, for --otlp-endpoint (exporters add
// /v1/traces).
func (r *Receiver) URL() string { return r.srv.URL }

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.Error(w, "want POST /v1/traces", http.StatusNotFound)
		return
	}
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			r.fail(w, fmt.Sprintf("gzip: %v", err))
			return
		}
		defer zr.Close()
		body = zr
	}
	b, err := io.ReadAll(io.LimitReader(body, 64<<20))
	if err != nil {
		r.fail(w, fmt.Sprintf("reading body: %v", err))
		return
	}
	var msg coltracepb.ExportTraceServiceRequest
	jsonBody := strings.HasPrefix(req.Header.Get("Content-Type"), "application/json")
	if jsonBody {
		err = protojson.Unmarshal(b, &msg)
	} else {
		err = proto.Unmarshal(b, &msg)
	}
	if err != nil {
		r.fail(w, fmt.Sprintf("decoding ExportTraceServiceRequest: %v", err))
		return
	}
	r.add(&msg)
	var out []byte
	if jsonBody {
		out, _ = protojson.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/json")
	} else {
		out, _ = proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
	}
	_, _ = w.Write(out)
}

func (r *Receiver) fail(w http.ResponseWriter, why string) {
	r.mu.Lock()
	r.bad = append(r.bad, why)
	r.mu.Unlock()
	http.Error(w, why, http.StatusBadRequest)
}

func (r *Receiver) add(msg *coltracepb.ExportTraceServiceRequest) {
	var got []Span
	for _, rs := range msg.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s := Span{
					TraceID: hex.EncodeToString(sp.GetTraceId()), SpanID: hex.EncodeToString(sp.GetSpanId()),
					ParentID: hex.EncodeToString(sp.GetParentSpanId()),
					Name:     sp.GetName(), Kind: sp.GetKind().String(), Service: service, Scope: ss.GetScope().GetName(),
					Attrs:      make(map[string]any, len(sp.GetAttributes())),
					StatusCode: sp.GetStatus().GetCode().String(), StatusMessage: sp.GetStatus().GetMessage(),
					Start: time.Unix(0, int64(sp.GetStartTimeUnixNano())), End: time.Unix(0, int64(sp.GetEndTimeUnixNano())),
				}
				for _, kv := range sp.GetAttributes() {
					s.Attrs[kv.GetKey()] = value(kv.GetValue())
				}
				got = append(got, s)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// value flattens an attribute value: string, int64, float64, bool, or a
// slice of those.
func value(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		return x.DoubleValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_ArrayValue:
		out := make([]any, 0, len(x.ArrayValue.GetValues()))
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, value(e))
		}
		return out
	}
	return nil
}

// Spans returns a copy of every span received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Errors lists the requests the receiver could not decode.
func (r *Receiver) Errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.bad...)
}

// WaitFor waits until ok holds for the spans received, and returns them.
// It fails the test after timeout, listing what did arrive.
func (r *Receiver) WaitFor(t testing.TB, timeout time.Duration, ok func([]Span) bool) []Span {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		spans, ch := append([]Span(nil), r.spans...), r.changed
		r.mu.Unlock()
		if ok(spans) {
			return spans
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("otlptest: condition not met within %s; received %d spans:\n%s", timeout, len(spans), Format(spans))
			return nil
		}
	}
}

// Trace returns the spans of one trace.
func Trace(spans []Span, traceID string) []Span {
	var out []Span
	for _, s := range spans {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

// Named returns the spans whose name is name or starts with name + " ".
func Named(spans []Span, name string) []Span {
	var out []Span
	for _, s := range spans {
		if s.Name == name || strings.HasPrefix(s.Name, name+" ") {
			out = append(out, s)
		}
	}
	return out
}

// Children returns the spans whose parent is parent.
func Children(spans []Span, parent Span) []Span {
	var out []Span
	for _, s := range spans {
		if s.ParentID == parent.SpanID && s.TraceID == parent.TraceID {
			out = append(out, s)
		}
	}
	return out
}

// Format renders spans as an indented tree per trace, for failure messages.
func Format(spans []Span) string {
	var b strings.Builder
	ids := make(map[string]bool, len(spans))
	for _, s := range spans {
		ids[s.TraceID+s.SpanID] = true
	}
	var walk func(s Span, depth int)
	walk = func(s Span, depth int) {
		fmt.Fprintf(&b, "%s%s [%s %s/%s parent %s] %v\n", strings.Repeat("  ", depth), s.Name, s.Kind, s.TraceID, s.SpanID, s.ParentID, s.Attrs)
		for _, c := range Children(spans, s) {
			walk(c, depth+1)
		}
	}
	for _, s := range spans {
		if s.ParentID == "" || !ids[s.TraceID+s.ParentID] {
			walk(s, 0)
		}
	}
	return b.String()
}
