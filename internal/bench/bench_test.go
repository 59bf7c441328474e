package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker"
)

func tinyConfig(t testing.TB) IngestConfig {
	cfg := DefaultIngestConfig()
	cfg.Duration = 300 * time.Millisecond
	cfg.Warmup = 100 * time.Millisecond
	cfg.Size = 256
	cfg.Window = 64
	cfg.DataDir = t.TempDir()
	return cfg
}

func TestRunIngest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := tinyConfig(t)
	var progress bytes.Buffer
	cfg.Progress = &progress
	rep, err := RunIngest(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Scenario != ScenarioIngest {
		t.Errorf("scenario = %q, want %q", rep.Scenario, ScenarioIngest)
	}
	if got := len(rep.Results); got != 2 {
		t.Fatalf("got %d results, want 2", got)
	}
	for _, name := range TargetNames {
		res := rep.Result(name)
		if res == nil {
			t.Fatalf("no result for %s", name)
		}
		if res.ThroughputMsgsPerS <= 0 || res.Msgs <= 0 {
			t.Errorf("%s: throughput %.1f msgs/s from %d msgs, want > 0", name, res.ThroughputMsgsPerS, res.Msgs)
		}
		l := res.Latency
		if l.P50 <= 0 || l.P99 < l.P50 || l.P999 < l.P99 || l.Max < l.P999 {
			t.Errorf("%s: latency %+v, want 0 < p50 <= p99 <= p999 <= max", name, l)
		}
		if len(res.ByRound) != cfg.Rounds {
			t.Errorf("%s: %d throughput rounds, want %d", name, len(res.ByRound), cfg.Rounds)
		}
		if res.LatencySamples <= 0 {
			t.Errorf("%s: %d latency samples", name, res.LatencySamples)
		}
		if res.Errors != 0 {
			t.Errorf("%s: %d errors, first: %s", name, res.Errors, res.FirstError)
		}
	}
	semaq := rep.Result(TargetSemaq)
	if semaq.RatioVsJetStream == nil || *semaq.RatioVsJetStream <= 0 || semaq.LatencyDeltaUS == nil {
		t.Errorf("semaq result has no comparison with jetstream: %+v", semaq)
	}
	if rep.Result(TargetJetStream).RatioVsJetStream != nil {
		t.Error("the baseline is compared with itself")
	}
	if rep.Goals == nil {
		t.Error("no goals in a report with both targets")
	}
	for _, step := range []string{"warming up semaq", "throughput jetstream: round 2/4", "latency semaq: round 1/4"} {
		if !strings.Contains(progress.String(), step) {
			t.Errorf("progress lacks %q:\n%s", step, progress.String())
		}
	}

	// The JSON shape other tools read.
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Scenario string `json:"scenario"`
		Results  []struct {
			Target     *string  `json:"target"`
			Throughput *float64 `json:"throughput_msgs_per_s"`
			Latency    *struct {
				P50  *float64 `json:"p50"`
				P99  *float64 `json:"p99"`
				P999 *float64 `json:"p999"`
			} `json:"latency_us"`
		} `json:"results"`
	}
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("report JSON: %v\n%s", err, buf.String())
	}
	if doc.Scenario != "ingest" || len(doc.Results) != 2 {
		t.Fatalf("report JSON: scenario %q with %d results:\n%s", doc.Scenario, len(doc.Results), buf.String())
	}
	for i, r := range doc.Results {
		if r.Target == nil || r.Throughput == nil || r.Latency == nil || r.Latency.P50 == nil || r.Latency.P99 == nil || r.Latency.P999 == nil {
			t.Errorf("result %d lacks target, throughput_msgs_per_s or latency_us.p50/p99/p999:\n%s", i, buf.String())
		}
	}

	var table bytes.Buffer
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"semaq", "jetstream", "semaq vs jetstream", "goals:"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, table.String())
		}
	}
}

func TestRunIngestOneTarget(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := tinyConfig(t)
	cfg.Targets = []string{TargetSemaq}
	cfg.Rounds = 1
	cfg.Publishers = 2
	cfg.Sync = broker.SyncAlways
	rep, err := RunIngest(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 1 || rep.Results[0].Target != TargetSemaq {
		t.Fatalf("results %+v, want semaq only", rep.Results)
	}
	if rep.Goals != nil || rep.Results[0].RatioVsJetStream != nil {
		t.Error("a report without the baseline has a comparison")
	}
	if rep.Results[0].Msgs <= 0 || rep.Results[0].Latency.P50 <= 0 {
		t.Errorf("nothing measured: %+v", rep.Results[0])
	}
}

func TestRunIngestCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := tinyConfig(t)
	cfg.Duration = time.Hour
	cfg.Warmup = 0
	started := &watchWriter{want: "throughput", seen: make(chan struct{})}
	cfg.Progress = started
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-started.seen: // cancel once the measurement has begun
			cancel()
		case <-done:
		}
	}()
	_, err := RunIngest(ctx, cfg)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

// watchWriter closes seen when a line containing want is written.
type watchWriter struct {
	want string
	seen chan struct{}
	once sync.Once
}

func (w *watchWriter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(w.want)) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func TestRunIngestDirtyDataDir(t *testing.T) {
	t.Parallel()
	cfg := tinyConfig(t)
	if err := os.WriteFile(filepath.Join(cfg.DataDir, "old"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := RunIngest(context.Background(), cfg)
	if err == nil || !strings.Contains(err.Error(), "is not empty") {
		t.Fatalf("err = %v, want a refusal of the non-empty data directory", err)
	}
}

func TestIngestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		edit  func(*IngestConfig)
		wants string // in the error; "" for valid
	}{
		{"default", func(*IngestConfig) {}, ""},
		{"one target", func(c *IngestConfig) { c.Targets = []string{"jetstream"} }, ""},
		{"unknown target", func(c *IngestConfig) { c.Targets = []string{"semaq", "rabbitmq"} }, `targets: "rabbitmq" is not a target`},
		{"no targets", func(c *IngestConfig) { c.Targets = nil }, "targets: none given"},
		{"twice", func(c *IngestConfig) { c.Targets = []string{"semaq", "semaq"} }, `"semaq" is given twice`},
		{"zero duration", func(c *IngestConfig) { c.Duration = 0 }, "duration: 0s"},
		{"negative warmup", func(c *IngestConfig) { c.Warmup = -time.Second }, "warmup: -1s"},
		{"huge size", func(c *IngestConfig) { c.Size = 2 << 20 }, "size: 2097152 bytes"},
		{"bad sync", func(c *IngestConfig) { c.Sync = "never" }, `sync: "never" is not a sync mode`},
		{"zero window", func(c *IngestConfig) { c.Window = 0 }, "window: 0"},
		{"zero publishers", func(c *IngestConfig) { c.Publishers = 0 }, "publishers: 0"},
		{"zero rounds", func(c *IngestConfig) { c.Rounds = 0 }, "rounds: 0"},
		{"rounds too short", func(c *IngestConfig) { c.Duration, c.Rounds = 10*time.Millisecond, 20 }, "under a millisecond"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := DefaultIngestConfig()
			tt.edit(&c)
			err := c.Validate()
			switch {
			case tt.wants == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wants != "" && (err == nil || !strings.Contains(err.Error(), tt.wants) || !errors.Is(err, ErrBadConfig)):
				t.Fatalf("err = %v, want ErrBadConfig containing %q", err, tt.wants)
			}
		})
	}
}

// The comparison is only fair if both streams store alike.
func TestStreamsStoreAlike(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := startTestRig(t)
	nc, err := r.srv.InternalConn()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfgOf := func(name string) jetstream.StreamConfig {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		c := st.CachedInfo().Config
		c.Name, c.Description, c.Subjects, c.SubjectTransform, c.Metadata = "", "", nil, nil, nil
		return c
	}
	s, raw := cfgOf(semaqStream), cfgOf(jetstreamStream)
	sj, _ := json.Marshal(s)
	rj, _ := json.Marshal(raw)
	if !bytes.Equal(sj, rj) {
		t.Errorf("stream settings differ:\nsemaq     %s\njetstream %s", sj, rj)
	}
	if s.Storage != jetstream.FileStorage || !s.AllowMsgTTL {
		t.Errorf("semaq stream: storage %s, AllowMsgTTL %v; the scenario expects file storage with TTLs", s.Storage, s.AllowMsgTTL)
	}
}

// Both targets store the same message; only the SemaQ one passes the
// ingress, which stamps it.
func TestTargetsStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := startTestRig(t)
	for _, name := range TargetNames {
		p, err := r.publisher(targets[name], 100, true, 8)
		if err != nil {
			t.Fatal(err)
		}
		defer p.close()
		if err := p.publishSync(ctx); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	nc, err := r.srv.InternalConn()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		stream, subject string
		stamped         bool
	}{{semaqStream, semaqSubject, true}, {jetstreamStream, jetstreamSubject, false}} {
		st, err := js.Stream(ctx, tc.stream)
		if err != nil {
			t.Fatal(err)
		}
		m, err := st.GetMsg(ctx, 1)
		if err != nil {
			t.Fatalf("%s: %v", tc.stream, err)
		}
		if m.Subject != tc.subject || len(m.Data) != 100 || m.Header.Get("AI-Model") == "" {
			t.Errorf("%s stored %s with %d bytes and headers %v", tc.stream, m.Subject, len(m.Data), m.Header)
		}
		if m.Header.Get("traceparent") == "" {
			t.Errorf("%s: traceparent lost: %v", tc.stream, m.Header)
		}
		if got := m.Header.Get("AI-Received") != ""; got != tc.stamped {
			t.Errorf("%s: AI-Received set = %v, want %v", tc.stream, got, tc.stamped)
		}
	}
}

func TestHistogram(t *testing.T) {
	t.Parallel()
	h := newHistogram()
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	h.record(0)         // clamped up
	h.record(time.Hour) // clamped down
	l := h.summary()
	if l.P50 < 499 || l.P50 > 502 || l.P99 < 988 || l.P99 > 993 || l.Max < 59e6 {
		t.Errorf("summary %+v, want p50 ≈ 500, p99 ≈ 990, max ≈ 60e6 µs", l)
	}
	if got := newHistogram().summary(); got != (Latency{}) {
		t.Errorf("empty summary = %+v", got)
	}
}

func TestNewMessage(t *testing.T) {
	t.Parallel()
	for _, size := range []int{0, 1, 97, 1024, 100_000} {
		if m := newMessage("x", size, false); len(m.Data) != size {
			t.Errorf("size %d: got %d bytes", size, len(m.Data))
		}
	}
}

func TestInOrder(t *testing.T) {
	t.Parallel()
	a, b := &run{t: targets[TargetSemaq]}, &run{t: targets[TargetJetStream]}
	runs := []*run{a, b}
	if got := inOrder(runs, 0); !slices.Equal(got, []*run{a, b}) {
		t.Error("round 0 not in given order")
	}
	if got := inOrder(runs, 1); !slices.Equal(got, []*run{b, a}) {
		t.Error("round 1 not reversed")
	}
	if !slices.Equal(runs, []*run{a, b}) {
		t.Error("inOrder changed its argument")
	}
}

func startTestRig(tb testing.TB) *rig {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := startRig(ctx, tb.TempDir(), broker.SyncInterval)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(r.close)
	return r
}

// benchmarkSync measures one synchronous publish to target: publish to
// ack, server and ingress work included, as are their allocations.
func benchmarkSync(b *testing.B, target string, traceparent bool) {
	r := startTestRig(b)
	p, err := r.publisher(targets[target], 1024, traceparent, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer p.close()
	ctx := context.Background()
	for range 1000 { // warm-up
		if err := p.publishSync(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.SetBytes(1024)
	for b.Loop() {
		if err := p.publishSync(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// benchmarkAsync measures asynchronous publishing with a window of 256:
// ns/op is the inverse of throughput.
func benchmarkAsync(b *testing.B, target string, traceparent bool) {
	benchmarkAsyncOn(b, startTestRig(b), targets[target], traceparent)
}

func benchmarkAsyncOn(b *testing.B, r *rig, t *target, traceparent bool) {
	p, err := r.publisher(t, 1024, traceparent, 256)
	if err != nil {
		b.Fatal(err)
	}
	defer p.close()
	b.ReportAllocs()
	b.SetBytes(1024)
	before := p.acked.Load()
	for b.Loop() {
		for {
			_, err := p.js.PublishMsgAsync(p.msg)
			if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				continue // the window stayed full; try again
			}
			if err != nil {
				b.Fatal(err)
			}
			break
		}
	}
	select {
	case <-p.js.PublishAsyncComplete():
	case <-time.After(drainTimeout):
		b.Fatalf("%d messages unacknowledged", p.js.PublishAsyncPending())
	}
	if acked := p.acked.Load() - before; acked != int64(b.N) {
		b.Fatalf("%d of %d messages acknowledged", acked, b.N)
	}
}

// withTraceParent runs bench with and without a sampled traceparent in the
// messages: nats-server parses every header of a message that has one, on
// every hop.
func withTraceParent(b *testing.B, bench func(*testing.B, string, bool), target string) {
	for _, tp := range []bool{true, false} {
		b.Run(fmt.Sprintf("traceparent=%v", tp), func(b *testing.B) { bench(b, target, tp) })
	}
}

func BenchmarkIngressPublish(b *testing.B) { withTraceParent(b, benchmarkSync, TargetSemaq) }
func BenchmarkRawJetStreamPublish(b *testing.B) {
	withTraceParent(b, benchmarkSync, TargetJetStream)
}
func BenchmarkIngressPublishAsync(b *testing.B) { withTraceParent(b, benchmarkAsync, TargetSemaq) }
func BenchmarkRawJetStreamPublishAsync(b *testing.B) {
	withTraceParent(b, benchmarkAsync, TargetJetStream)
}

// BenchmarkForwarderPublishAsync is the floor of any ingress that
// republishes through a nats.go connection, as SemaQ's does: the same hop
// on an in-process connection with the semantic layer's rights, but no
// validation at all. Compare it with BenchmarkIngressPublishAsync (what
// validation costs) and BenchmarkRawJetStreamPublishAsync (what the hop
// costs).
func BenchmarkForwarderPublishAsync(b *testing.B) {
	r := startTestRig(b)
	nc, err := r.srv.InternalConn(nats.InProcessServer(r.srv.NATSServer()), nats.Name("semaq-bench-forwarder"))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	const prefix = "benchfwd."
	sub, err := nc.Subscribe(prefix+">", func(m *nats.Msg) {
		out := nats.Msg{Subject: "$SQ.w.bench.semaq." + m.Subject[len(prefix):], Reply: m.Reply, Header: m.Header, Data: m.Data}
		_ = nc.PublishMsg(&out)
	})
	if err != nil {
		b.Fatal(err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		b.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	forwarder := &target{name: "forwarder", subject: prefix + "ingest", dial: targets[TargetSemaq].dial}
	for _, tp := range []bool{true, false} {
		b.Run(fmt.Sprintf("traceparent=%v", tp), func(b *testing.B) { benchmarkAsyncOn(b, r, forwarder, tp) })
	}
}
