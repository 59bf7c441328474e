package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/bench/measure"
	"github.com/semaq/semaq/internal/broker"
)

// The relay stores every message in its stream, as sent, and the
// publisher's ack is the stream's, on both of the ingress's transports.
func TestRelayStores(t *testing.T) {
	for _, transport := range []string{broker.IngressPipe, broker.IngressTCP} {
		t.Run(transport, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r, err := StartRig(ctx, t.TempDir(), broker.SyncInterval, nil, broker.WithIngressTransport(transport))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(r.Close)
			if err := r.startRelay(ctx); err != nil {
				t.Fatal(err)
			}
			setup, err := r.Setup(ctx, []string{TargetJetStreamRelay})
			if err != nil {
				t.Fatal(err)
			}
			want := TargetSetup{Target: TargetJetStreamRelay, Server: ServerBroker, Stream: relayStream, Durability: DurabilityInterval, IngressTransport: transport}
			if len(setup) != 1 || setup[0] != want {
				t.Errorf("setup %+v, want %+v", setup, want)
			}

			const n = 20
			body := generatedBody(100)
			p, err := r.publisher(Targets[TargetJetStreamRelay], body, true, 8)
			if err != nil {
				t.Fatal(err)
			}
			defer p.close()
			for i := range n {
				ack, err := p.js.PublishMsg(ctx, p.msg)
				if err != nil {
					t.Fatalf("publish %d: %v", i, err)
				}
				if ack.Stream != relayStream || ack.Sequence != uint64(i+1) {
					t.Fatalf("publish %d acked by stream %q at %d, want %s at %d", i, ack.Stream, ack.Sequence, relayStream, i+1)
				}
			}
			// Without headers: nothing to decode, nothing encoded.
			bare := &nats.Msg{Subject: relayInPrefix + "bare", Data: []byte("bare")}
			if ack, err := p.js.PublishMsg(ctx, bare); err != nil || ack.Stream != relayStream {
				t.Fatalf("publish without headers: ack %+v, %v", ack, err)
			}
			// An async burst past one chunk of the relay's input.
			for range 500 {
				if _, err := p.js.PublishMsgAsync(p.msg); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-p.js.PublishAsyncComplete():
			case <-ctx.Done():
				t.Fatalf("%d async publishes unacknowledged", p.js.PublishAsyncPending())
			}
			if p.failed.Load() != 0 {
				t.Fatalf("%d async publishes failed, first: %v", p.failed.Load(), p.err())
			}

			st, err := operatorJS(t, r).Stream(ctx, relayStream)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.CachedInfo().State.Msgs; got != n+1+500 {
				t.Errorf("%s holds %d messages, want %d", relayStream, got, n+1+500)
			}
			m, err := st.GetMsg(ctx, 1)
			if err != nil {
				t.Fatal(err)
			}
			if m.Subject != relayStoredSubject || !bytes.Equal(m.Data, body) {
				t.Errorf("stored %s with %d bytes, want %s with %d", m.Subject, len(m.Data), relayStoredSubject, len(body))
			}
			for k, v := range p.msg.Header {
				if got := m.Header.Values(k); len(got) != 1 || got[0] != v[0] {
					t.Errorf("header %s stored as %q, sent %q", k, got, v)
				}
			}
			if got := ownHeaders(m.Header); got != len(p.msg.Header) {
				t.Errorf("stored %d headers besides JetStream's, sent %d: %v", got, len(p.msg.Header), m.Header)
			}
			m, err = st.GetMsg(ctx, n+1)
			if err != nil {
				t.Fatal(err)
			}
			if m.Subject != relayStoredPrefix+"bare" || string(m.Data) != "bare" || ownHeaders(m.Header) != 0 {
				t.Errorf("stored %s %q with headers %v, want %sbare \"bare\" without", m.Subject, m.Data, m.Header, relayStoredPrefix)
			}
		})
	}
}

// The relay stores like the SemaQ stream: same JetStream settings but for
// name, description and subjects.
func TestRelayStoresAlike(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := startTestRig(t)
	if err := r.startRelay(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := storedConfig(ctx, r, semaqStream)
	if err != nil {
		t.Fatal(err)
	}
	f, err := storedConfig(ctx, r, relayStream)
	if err != nil {
		t.Fatal(err)
	}
	if f.Subjects[0] != relayStoredSubjects || f.SubjectTransform != nil {
		t.Errorf("relay stream on %v, transform %v", f.Subjects, f.SubjectTransform)
	}
	s.Name, s.Description, s.Subjects, s.SubjectTransform, s.Metadata = "", "", nil, nil, nil
	f.Name, f.Description, f.Subjects, f.Metadata = "", "", nil, nil // JetStream's own metadata
	if !equalJSON(t, s, f) {
		t.Errorf("stream settings differ:\nsemaq %+v\nrelay %+v", s, f)
	}
}

// A short run of the relay beside SemaQ and the baseline, on both
// transports: the report places it, compares it with the baseline, and
// compares SemaQ with it; its end-to-end consumer reads its stream.
func TestRunIngestRelay(t *testing.T) {
	for _, transport := range []string{broker.IngressPipe, broker.IngressTCP} {
		t.Run(transport, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cfg := tinyConfig(t)
			cfg.Targets = []string{TargetSemaq, TargetJetStreamRelay, TargetJetStream}
			cfg.Rounds = 1
			cfg.Rates, cfg.E2E = []int{500}, true
			cfg.IngressTransport = transport
			rep, err := RunIngest(ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkSetup(t, rep, map[string]TargetSetup{
				TargetSemaq:          {Target: TargetSemaq, Server: ServerBroker, Stream: semaqStream, Durability: DurabilityInterval, IngressTransport: transport},
				TargetJetStreamRelay: {Target: TargetJetStreamRelay, Server: ServerBroker, Stream: relayStream, Durability: DurabilityInterval, IngressTransport: transport},
				TargetJetStream:      {Target: TargetJetStream, Server: ServerBroker, Stream: JetStreamStream, Durability: DurabilityInterval},
			})
			res := rep.Result(TargetJetStreamRelay)
			if res == nil || res.Msgs <= 0 || res.Errors != 0 || res.RatioVsJetStream == nil || *res.RatioVsJetStream <= 0 {
				t.Fatalf("relay result %+v: want messages, no errors, a ratio to jetstream", res)
			}
			if len(res.Paced) != 1 || res.Paced[0].E2E == nil || res.Paced[0].E2E.Received <= 0 {
				t.Errorf("relay paced %+v: want its consumer to receive", res.Paced)
			}
			f := rep.Floor
			if f == nil || f.ThroughputRatio <= 0 || f.LatencyDeltaUS == (measure.Latency{}) {
				t.Fatalf("floor %+v: want semaq over the relay", f)
			}
			var table bytes.Buffer
			if err := rep.WriteTable(&table); err != nil {
				t.Fatal(err)
			}
			via := map[string]string{broker.IngressPipe: "the in-process pipe", broker.IngressTCP: "loopback TCP"}[transport]
			for _, want := range []string{"jetstream-relay vs jetstream", "semaq vs jetstream-relay", "the floor: jetstream-relay",
				"stream BENCH_RELAY", "through one relaying client (no SemaQ work) over " + via} {
				if !strings.Contains(table.String(), want) {
					t.Errorf("table lacks %q:\n%s", want, table.String())
				}
			}
			var js bytes.Buffer
			if err := rep.WriteJSON(&js); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(js.String(), `"semaq_ratio_vs_relay": `) {
				t.Errorf("JSON lacks the floor:\n%s", js.String())
			}
		})
	}
}

// SemaQ over the relay is set only when both ran, rounded like the other
// ratios.
func TestReportFloor(t *testing.T) {
	t.Parallel()
	lat := func(p50 float64) measure.Latency { return measure.Latency{P50: p50, P99: 2 * p50, P999: 3 * p50} }
	rep := &Report{Results: []Result{
		{Target: TargetSemaq, ThroughputMsgsPerS: 60000, Latency: lat(120)},
		{Target: TargetJetStreamRelay, ThroughputMsgsPerS: 70000, Latency: lat(100)},
		{Target: TargetJetStream, ThroughputMsgsPerS: 90000, Latency: lat(80)},
	}}
	rep.compare()
	if f := rep.Floor; f == nil || f.ThroughputRatio != 0.857 || f.LatencyDeltaUS.P50 != 20 || f.LatencyDeltaUS.P99 != 40 {
		t.Fatalf("floor %+v: want 0.857, p50 +20, p99 +40", f)
	}
	if r := rep.Result(TargetJetStreamRelay).RatioVsJetStream; r == nil || *r != 0.778 {
		t.Errorf("relay vs jetstream = %v, want 0.778", r)
	}
	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for label, ratio := range map[string]string{"semaq vs jetstream-relay": "0.857×", "jetstream-relay vs jetstream": "0.778×"} {
		if !hasLine(table.String(), label, ratio) {
			t.Errorf("table lacks a line %q with %s:\n%s", label, ratio, table.String())
		}
	}

	rep = &Report{Results: []Result{{Target: TargetJetStreamRelay, ThroughputMsgsPerS: 1}, {Target: TargetJetStream, ThroughputMsgsPerS: 1}}}
	rep.compare()
	if rep.Floor != nil {
		t.Errorf("a run without semaq has a floor: %+v", rep.Floor)
	}
}

// hasLine reports whether a line of table begins with label and holds
// value.
func hasLine(table, label, value string) bool {
	for l := range strings.Lines(table) {
		if strings.HasPrefix(strings.TrimSpace(l), label+" ") && strings.Contains(l, value) {
			return true
		}
	}
	return false
}

func equalJSON(t *testing.T, a, b any) bool {
	t.Helper()
	aj, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	bj, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(aj, bj)
}

// ownHeaders counts the headers of a stored message besides the ones
// JetStream adds when it is read back (Nats-Stream, Nats-Sequence, ...).
func ownHeaders(h nats.Header) int {
	n := 0
	for k := range h {
		if !strings.HasPrefix(k, "Nats-") {
			n++
		}
	}
	return n
}
