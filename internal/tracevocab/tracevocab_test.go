package tracevocab

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/semaq/semaq/semaq"
)

const testTP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func TestExtractInject(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		h     nats.Header
		valid bool
	}{
		{"canonical", nats.Header{"traceparent": {testTP}}, true},
		{"other case", nats.Header{"TRACEPARENT": {testTP}}, true},
		{"invalid", nats.Header{"traceparent": {"00-zz"}}, false},
		{"none", nats.Header{}, false},
		{"nil", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := Extract(context.Background(), tc.h)
			if got := trace.SpanContextFromContext(ctx).IsValid(); got != tc.valid {
				t.Fatalf("valid = %v, want %v", got, tc.valid)
			}
			out := nats.Header{}
			Inject(ctx, out)
			if want := map[bool]string{true: testTP, false: ""}[tc.valid]; out.Get(semaq.HdrTraceParent) != want {
				t.Errorf("injected %v, want traceparent %q", out, want)
			}
		})
	}
}

func TestValidUTF8(t *testing.T) {
	t.Parallel()
	if got := ValidUTF8("ai.ok"); got != "ai.ok" {
		t.Errorf("valid string changed to %q", got)
	}
	if got := ValidUTF8("ai.\xff.x"); got != "ai.\uFFFD.x" {
		t.Errorf("invalid UTF-8 became %q", got)
	}
}

func TestEnvelopeAttributes(t *testing.T) {
	t.Parallel()
	got := map[attribute.Key]attribute.Value{}
	for _, kv := range EnvelopeAttributes(semaq.Envelope{Model: "llama3", PromptTokens: 7, Tenant: "acme", Priority: 2, Session: "s1", MsgID: "m1"}) {
		got[kv.Key] = kv.Value
	}
	want := map[attribute.Key]attribute.Value{
		AttrModel: attribute.StringValue("llama3"), AttrInputTokens: attribute.IntValue(7), AttrTenant: attribute.StringValue("acme"),
		AttrPriority: attribute.IntValue(2), AttrConversation: attribute.StringValue("s1"), AttrMsgID: attribute.StringValue("m1"),
	}
	if len(got) != len(want) {
		t.Fatalf("attributes %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k].String(), v.String())
		}
	}
	// Unset fields leave their keys out; priority is always there.
	if attrs := EnvelopeAttributes(semaq.Envelope{PromptTokens: -1}); len(attrs) != 1 || attrs[0].Key != AttrPriority {
		t.Errorf("empty envelope gave %v", attrs)
	}
}
