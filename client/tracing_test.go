package client

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/semaq/semaq/semaq"
)

const testTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestTraceHeaders(t *testing.T) {
	for _, tc := range []struct {
		name  string
		h     nats.Header
		valid bool
	}{
		{"canonical", nats.Header{"traceparent": {testTP}}, true},
		{"other case", nats.Header{"Traceparent": {testTP}}, true},
		{"invalid", nats.Header{"traceparent": {"00-zz"}}, false},
		{"none", nats.Header{}, false},
		{"nil", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := trace.SpanContextFromContext(ExtractTrace(context.Background(), tc.h))
			if sc.IsValid() != tc.valid {
				t.Fatalf("valid = %v, want %v", sc.IsValid(), tc.valid)
			}
			if tc.valid && (sc.TraceID().String() != testTP[3:35] || sc.SpanID().String() != testTP[36:52] || !sc.IsSampled() || !sc.IsRemote()) {
				t.Errorf("span context %v does not match %s", sc, testTP)
			}
		})
	}
}

func TestInjectIfAbsent(t *testing.T) {
	ctx := ExtractTrace(context.Background(), nats.Header{"traceparent": {testTP}})

	h := nats.Header{}
	injectIfAbsent(ctx, h)
	if h.Get(semaq.HdrTraceParent) != testTP {
		t.Errorf("a publish in a span got traceparent %q, want %q", h.Get(semaq.HdrTraceParent), testTP)
	}
	mine := "00-11111111111111111111111111111111-2222222222222222-01"
	for _, h := range []nats.Header{
		{semaq.HdrTraceParent: {mine}},
		{semaq.AliasTraceID: {"11111111111111111111111111111111"}},
	} {
		before := h.Get(semaq.HdrTraceParent)
		injectIfAbsent(ctx, h)
		if h.Get(semaq.HdrTraceParent) != before {
			t.Errorf("the caller's own trace context %v was replaced", h)
		}
	}
	h = nats.Header{}
	injectIfAbsent(context.Background(), h)
	if len(h) != 0 {
		t.Errorf("a publish outside any span got headers %v", h)
	}
}
