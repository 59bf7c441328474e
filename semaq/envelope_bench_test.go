package semaq_test

import (
	"testing"

	"github.com/semaq/semaq/semaq"
)

// benchHeader is a typical inference request: canonical envelope headers,
// a deduplication id, a trace context and two user headers.
func benchHeader() map[string][]string {
	return map[string][]string{
		"AI-Model":         {"llama3-70b"},
		"AI-Priority":      {"2"},
		"AI-Tenant":        {"acme"},
		"AI-Prompt-Tokens": {"512"},
		"Nats-Msg-Id":      {"m-8b1c0f2e"},
		"traceparent":      {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		"Content-Type":     {"application/json"},
		"Request-Id":       {"7"},
	}
}

// BenchmarkNormalize is the ingress hot path for an accepted message that
// needs no rewriting (no stamp: stamping allocates the time string).
func BenchmarkNormalize(b *testing.B) {
	h := benchHeader()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := semaq.Normalize(h, now, semaq.NormalizeOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNormalizeStamp is what the ingress runs: Normalize with Stamp.
func BenchmarkNormalizeStamp(b *testing.B) {
	h := benchHeader()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := semaq.Normalize(h, now, semaq.NormalizeOptions{Stamp: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckHeaders is CheckHeaders alone on the same block.
func BenchmarkCheckHeaders(b *testing.B) {
	h := benchHeader()
	b.ReportAllocs()
	for b.Loop() {
		if err := semaq.CheckHeaders(h); err != nil {
			b.Fatal(err)
		}
	}
}

func TestNormalizeAcceptedDoesNotAllocate(t *testing.T) {
	h := benchHeader()
	h["Nats-Expected-Last-Sequence"] = []string{"42"}
	h["Nats-TTL"] = []string{"1h"}
	if n := testing.AllocsPerRun(100, func() {
		if _, err := semaq.Normalize(h, now, semaq.NormalizeOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := semaq.CheckHeaders(h); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("%v allocations per accepted message, want 0", n)
	}
}
