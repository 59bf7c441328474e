package broker

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/metrics"
)

func TestParseLatencyAck(t *testing.T) {
	const p = "_SQ_LAT.abc."
	for _, tc := range []struct {
		subject string
		ok      bool
		id      int
		ts      int64
		reply   string
	}{
		{p + "3.1700000000000000000._INBOX.x.y", true, 3, 1700000000000000000, "_INBOX.x.y"},
		{p + "0.1.r", true, 0, 1, "r"},
		{p + "x.1.r", false, 0, 0, ""},
		{p + "1.x.r", false, 0, 0, ""},
		{p + "1.1", false, 0, 0, ""},
		{p + "-1.1.r", false, 0, 0, ""},
		{p + "1.1.$SQ.w.ai.x", false, 0, 0, ""}, // never forward into a reserved namespace
		{"_SQ_LAT.other.1.1.r", false, 0, 0, ""},
	} {
		id, ts, reply, ok := parseLatencyAck(tc.subject, p)
		if ok != tc.ok || id != tc.id || ts != tc.ts || reply != tc.reply {
			t.Errorf("%s: got %d %d %q %v, want %d %d %q %v", tc.subject, id, ts, reply, ok, tc.id, tc.ts, tc.reply, tc.ok)
		}
	}
}

// The sampled-ack subject is built by the broker but arrives over NATS,
// where anyone allowed to publish could forge one.
func FuzzParseLatencyAck(f *testing.F) {
	const p = "_SQ_LAT.abc."
	f.Add(p + "3.1700000000000000000._INBOX.x.y")
	f.Add(p + "1.1.$JS.API.STREAM.DELETE.X")
	f.Add(p + "..")
	f.Fuzz(func(t *testing.T, subject string) {
		id, ts, reply, ok := parseLatencyAck(subject, p)
		if !ok {
			return
		}
		if id < 0 || ts <= 0 || reply == "" || strings.HasPrefix(reply, "$") || !strings.HasSuffix(subject, "."+reply) {
			t.Fatalf("%q parsed to %d %d %q", subject, id, ts, reply)
		}
	})
}

// A token stream's terminal record comes from any writer: nothing in it
// may break the broker's metrics or tracing.
func FuzzObserveTokenEnd(f *testing.F) {
	f.Add([]byte(`{"s":3,"o":2,"fin":{"r":"stop"}}`), "200ms", "2s", "llama3")
	f.Add([]byte(`{"s":1,"err":{"c":"cancelled"},"tp":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`), "-1s", "99999h", "")
	f.Add([]byte(`{"s":1,"o":18446744073709551615,"fin":{"r":"x"}}`), "1ns", "1ns", "m")
	s := &Server{metrics: metrics.New(metrics.Options{NoRuntime: true})}
	f.Fuzz(func(t *testing.T, data []byte, first, elapsed, model string) {
		m := &nats.Msg{Subject: "$SQ.tok.req-1.end", Data: data, Header: nats.Header{
			"SQ-Token-First": {first}, "SQ-Token-Elapsed": {elapsed}, "AI-Model": {model},
		}}
		s.observeTokenEnd(m)
	})
}
