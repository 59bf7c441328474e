package bench

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/bench/measure"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/schema"
)

// Publish benchmarks of the ingress beside raw JetStream, sync and async.

// benchmarkSync measures one synchronous publish to target: publish to
// ack, server and ingress work included, as are their allocations.
func benchmarkSync(b *testing.B, target string, traceparent bool) {
	r := startTestRig(b)
	p, err := r.publisher(Targets[target], generatedBody(1024), traceparent, 1)
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
	benchmarkAsyncOn(b, startTestRig(b), Targets[target], traceparent)
}

func benchmarkAsyncOn(b *testing.B, r *Rig, t *Target, traceparent bool) {
	benchmarkAsyncData(b, r, t, generatedBody(1024), traceparent)
}

func benchmarkAsyncData(b *testing.B, r *Rig, t *Target, data []byte, traceparent bool) {
	p, err := r.publisher(t, data, traceparent, 256)
	if err != nil {
		b.Fatal(err)
	}
	defer p.close()
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	before := p.acked.Load()
	cpuBefore, cpuOK := measure.CPUTime()
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
	case <-time.After(DrainTimeout):
		b.Fatalf("%d messages unacknowledged", p.js.PublishAsyncPending())
	}
	if acked := p.acked.Load() - before; acked != int64(b.N) {
		b.Fatalf("%d of %d messages acknowledged", acked, b.N)
	}
	// CPU per message of the whole process (publisher, ingress, server):
	// on a shared machine it moves far less than ns/op, which counts the
	// time other jobs hold the cores. With both cores saturated,
	// throughput is about cores / CPU per message, so the ratio of two
	// targets' cpu-µs/msg estimates their throughput ratio.
	if cpuAfter, ok := measure.CPUTime(); ok && cpuOK {
		b.ReportMetric(float64(cpuAfter-cpuBefore)/float64(time.Microsecond)/float64(b.N), "cpu-µs/msg")
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
	nc, err := r.OperatorConn(nats.InProcessServer(r.Broker.NATSServer()), nats.Name("semaq-bench-forwarder"))
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
	forwarder := &Target{Name: "forwarder", subject: prefix + "ingest", Dial: Targets[TargetSemaq].Dial}
	for _, tp := range []bool{true, false} {
		b.Run(fmt.Sprintf("traceparent=%v", tp), func(b *testing.B) { benchmarkAsyncOn(b, r, forwarder, tp) })
	}
}

// BenchmarkIngressSchemaRoutesPublishAsync is goal P2 as a Go benchmark:
// async publishes of the shipped JSON sample padded to 1 KiB, through the
// ingress to a stream bound to the shipped JSON Schema with 10 route rules
// on the publish subject (none matching), beside the same through the
// ingress to a stream without a schema (the same 10 rules), and raw
// JetStream on the same broker with the same bytes. Compare the
// sub-benchmarks of one run; allocs/op and cpu-µs/msg count the whole
// process (client, ingress and server).
func BenchmarkIngressSchemaRoutesPublishAsync(b *testing.B) {
	cfg := schemaConfig(b, schema.TypeJSON)
	cfg.Size, cfg.Routes = 1024, 10
	pl, err := preparePayload(&cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := StartRig(ctx, b.TempDir(), broker.SyncInterval, cfg.Schema)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(r.Close)
	if err := addRoutes(ctx, r, cfg.Routes, SchemaTargets); err != nil {
		b.Fatal(err)
	}
	data := pl.data(r.schemaID)
	for _, name := range SchemaTargets {
		b.Run(name, func(b *testing.B) { benchmarkAsyncData(b, r, Targets[name], data, true) })
	}
	if err := r.checkEnforced(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkDurablePublishAsync measures asynchronous publishing with a
// window of 256 on the durable rig: the SemaQ stream group-committed by the
// ingress against raw JetStream with sync_always on its own server. ns/op
// is the inverse of throughput; cpu-µs/msg is what a durable message costs
// the process (the ack's way back through the committer included).
func BenchmarkDurablePublishAsync(b *testing.B) {
	r := startTestRigSync(b, broker.SyncAlways)
	for _, target := range []string{TargetSemaq, TargetJetStream} {
		b.Run(target, func(b *testing.B) { benchmarkAsyncOn(b, r, Targets[target], true) })
	}
}
