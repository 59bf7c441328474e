package tokens

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/metrics"
)

// A token stream's terminal record comes from any writer: nothing in it
// may break the broker's metrics or tracing.
func FuzzObserveTokenEnd(f *testing.F) {
	f.Add([]byte(`{"s":3,"o":2,"fin":{"r":"stop"}}`), "200ms", "2s", "llama3")
	f.Add([]byte(`{"s":1,"err":{"c":"cancelled"},"tp":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`), "-1s", "99999h", "")
	f.Add([]byte(`{"s":1,"o":18446744073709551615,"fin":{"r":"x"}}`), "1ns", "1ns", "m")
	ts := &Store{metrics: metrics.New(metrics.Options{NoRuntime: true})}
	f.Fuzz(func(t *testing.T, data []byte, first, elapsed, model string) {
		m := &nats.Msg{Subject: "$SQ.tok.req-1.end", Data: data, Header: nats.Header{
			"SQ-Token-First": {first}, "SQ-Token-Elapsed": {elapsed}, "AI-Model": {model},
		}}
		ts.observeEnd(m)
	})
}
