package broker_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/telemetry/otlptest"
	"github.com/semaq/semaq/semaq"
)

// TestTokenStreamMetrics: the terminal record of a token stream is
// measured. A writer that sends the timing headers gets time to first
// token, time per output token and tokens per second; the SDK writer as it
// is gets tokens and outcome. A traced stream gets a "tokens" span.
func TestTokenStreamMetrics(t *testing.T) {
	t.Parallel()
	rcv := otlptest.Start(t)
	s := brokertest.Start(t, func(cfg *broker.Config) { cfg.OTLPEndpoint = rcv.URL() })
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The SDK writer.
	w, err := c.OpenTokenStream(ctx, "req-sdk")
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"Hel", "lo", "!"} {
		if err := w.Write(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx, semaq.TokenFinal{FinishReason: "stop"}); err != nil {
		t.Fatal(err)
	}

	// The SDK writer of a request received a second ago: labelled, timed
	// from the request's AI-Received.
	reqHdr := nats.Header{semaq.HdrModel: {"mistral"}, semaq.HdrTenant: {"beta"},
		semaq.HdrReceived: {time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)}}
	w2, err := c.OpenTokenStream(ctx, "req-labelled", client.WithStreamRequest(reqHdr))
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if err := w2.Write(ctx, "tok"); err != nil {
			t.Fatal(err)
		}
	}
	if err := w2.Close(ctx, semaq.TokenFinal{}); err != nil {
		t.Fatal(err)
	}

	// A writer that reports its timing: 21 tokens, the first at 200ms,
	// the terminal record at 2.2s.
	const traceID = "6e0c63257de34c92bf9efcd03927272e"
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	const key = "timed-writer-key-0123"
	for _, r := range []semaq.TokenChunk{
		{Seq: 1, Offset: 0, N: 18, Text: strings.Repeat("x", 18), Lens: slices.Repeat([]int{1}, 18)},
		{Seq: 2, Offset: 18, N: 1, Text: "y"}, {Seq: 3, Offset: 19, N: 1, Text: "y"}, {Seq: 4, Offset: 20, N: 1, Text: "y"},
	} {
		cm := nats.NewMsg(semaq.TokenWriteChunkSubject("req-timed"))
		cm.Data = semaq.AppendTokenChunk(nil, &r)
		cm.Header.Set(semaq.HdrTokenKey, key)
		if _, err := js.PublishMsg(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	m := nats.NewMsg(semaq.TokenWriteEndSubject("req-timed"))
	m.Header.Set(semaq.HdrTokenKey, key)
	m.Data = semaq.AppendTokenChunk(nil, &semaq.TokenChunk{Seq: 5, Offset: 21,
		Final:       &semaq.TokenFinal{FinishReason: "stop", Usage: &semaq.TokenUsage{Prompt: 12, Completion: 21, Total: 33}},
		TraceParent: "00-" + traceID + "-1111111111111111-01"})
	m.Header.Set(semaq.HdrModel, "llama3")
	m.Header.Set(semaq.HdrTenant, "acme")
	m.Header.Set(semaq.HdrTokenFirst, "200ms")
	m.Header.Set(semaq.HdrTokenElapsed, "2.2s")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	// An aborted one.
	if err := c.AbortTokenStream(ctx, "req-lost", &semaq.TokenError{Code: semaq.TokenErrDeadline}); err != nil {
		t.Fatal(err)
	}

	waitMetrics(t, s,
		`semaq_token_streams_total{model="none",outcome="done",tenant="none"} 1`,
		`semaq_token_stream_tokens_total{model="none",tenant="none"} 3`,
		`semaq_token_streams_total{model="none",outcome="timeout",tenant="none"} 1`,
		`semaq_token_streams_total{model="llama3",outcome="done",tenant="acme"} 1`,
		`semaq_token_stream_tokens_total{model="llama3",tenant="acme"} 21`,
		`semaq_token_stream_time_to_first_token_seconds_sum{model="llama3",tenant="acme"} 0.2`,
		`semaq_token_stream_time_per_output_token_seconds_sum{model="llama3",tenant="acme"} 0.1`,
		`semaq_token_stream_output_tokens_per_second_count{model="llama3",tenant="acme"} 1`,
		`semaq_token_stream_tokens_total{model="mistral",tenant="beta"} 4`,
		`semaq_token_stream_time_to_first_token_seconds_count{model="mistral",tenant="beta"} 1`,
		`semaq_token_stream_time_per_output_token_seconds_count{model="mistral",tenant="beta"} 1`,
	)
	// Time to first token counts from the request's AI-Received.
	if v := sampleValue(t, getMetrics(t, s), `semaq_token_stream_time_to_first_token_seconds_sum{model="mistral",tenant="beta"}`); v < 1 {
		t.Errorf("time to first token %gs, want at least the 1s since AI-Received", v)
	}

	if err := s.FlushTraces(ctx); err != nil {
		t.Fatal(err)
	}
	spans := rcv.WaitFor(t, 15*time.Second, func(sp []otlptest.Span) bool {
		return len(otlptest.Named(otlptest.Trace(sp, traceID), "tokens")) == 1
	})
	sp := otlptest.Named(otlptest.Trace(spans, traceID), "tokens")[0]
	if sp.ParentID != "1111111111111111" || sp.Attrs["gen_ai.usage.output_tokens"] != int64(21) ||
		sp.Attrs["gen_ai.request.model"] != "llama3" || sp.Attrs["semaq.token_stream.id"] != "req-timed" {
		t.Errorf("tokens span: %+v", sp)
	}
	if d := sp.End.Sub(sp.Start); d < 2*time.Second || d > 10*time.Second {
		t.Errorf("tokens span lasts %s, want about the 2.2s the writer reported", d)
	}
}

// sampleValue reads the value of one sample line (name and labels as
// printed) from a scrape.
func sampleValue(t *testing.T, text, series string) float64 {
	t.Helper()
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			return f
		}
	}
	t.Fatalf("no sample %s", series)
	return 0
}
