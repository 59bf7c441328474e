package bench

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// Consume → transform → produce, one input at a time, 256-byte inputs
// each making one output: the exactly-once processor
// (client.ProcessExactlyOnce: an atomic batch per input, then a
// confirmed ack) beside the plain at-least-once loop (Publish waiting for
// its ack, then a confirmed ack). ns/op is per input; docs/exactly-once.md
// reports the ratio.

const eoPayload = 256

// eoRig starts a rig with the EOIN and EOOUT streams and n inputs stored.
func eoRig(b *testing.B, n int) *client.Client {
	b.Helper()
	r := startTestRig(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Connect(ctx, r.Broker.ClientURL(), client.WithName("semaq-bench-eo"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	for name, subj := range map[string]string{"EOIN": "eoin.>", "EOOUT": "eoout.>"} {
		if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: name, Subjects: []string{subj}}); err != nil {
			b.Fatal(err)
		}
	}
	data := generatedBody(eoPayload)
	for i := 0; i < n; i += semaq.MaxBatchMsgs {
		batch := make([]*nats.Msg, min(semaq.MaxBatchMsgs, n-i))
		for k := range batch {
			batch[k] = &nats.Msg{Subject: fmt.Sprintf("eoin.%d", (i+k)%16), Data: data}
		}
		ack, err := c.PublishBatch(ctx, batch)
		if err == nil {
			err = ack.Err()
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	return c
}

// eoTransform is the benchmarks' function: n outputs, the input
// upper-cased.
func eoTransform(m *client.Msg, n int) []client.Out {
	outs := make([]client.Out, n)
	for k := range outs {
		outs[k] = client.Out{Subject: fmt.Sprintf("eoout.%s.%d", m.Subject[len("eoin."):], k), Data: bytes.ToUpper(m.Data)}
	}
	return outs
}

// eoOutputs are the sub-benchmarks: one output per input (published
// alone, with its message id) and two (an atomic batch).
var eoOutputs = []int{1, 2}

func BenchmarkExactlyOnce(b *testing.B) {
	for _, n := range eoOutputs {
		b.Run(fmt.Sprintf("outputs=%d", n), func(b *testing.B) { benchmarkExactlyOnce(b, n, 1) })
	}
	// Inputs stored ahead grouped, up to 64 to an atomic batch
	// (client.GroupInputs).
	b.Run("outputs=2-grouped", func(b *testing.B) { benchmarkExactlyOnce(b, 2, 64) })
}

func benchmarkExactlyOnce(b *testing.B, outputs, group int) {
	c := eoRig(b, b.N)
	var st client.ProcessStats
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	b.ReportAllocs()
	b.SetBytes(eoPayload)
	b.ResetTimer()
	go func() {
		done <- c.ProcessExactlyOnce(ctx, "eoin.>", "bench-eo", func(m *client.Msg) ([]client.Out, error) {
			return eoTransform(m, outputs), nil
		}, client.OutputSubjects("eoout.>"), client.WithProcessStats(&st), client.GroupInputs(group))
	}()
	for st.Processed.Load() < uint64(b.N) {
		select {
		case err := <-done:
			b.Fatalf("processor returned: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	b.StopTimer()
	cancel()
	<-done
	if d, s := st.Duplicates.Load(), st.Skipped.Load(); d+s != 0 {
		b.Fatalf("%d duplicates, %d skipped in a clean run", d, s)
	}
}

func BenchmarkAtLeastOnceLoop(b *testing.B) {
	for _, n := range eoOutputs {
		b.Run(fmt.Sprintf("outputs=%d", n), func(b *testing.B) { benchmarkAtLeastOnce(b, n) })
	}
}

// benchmarkAtLeastOnce: each output published, waiting for its ack, then
// the input acked. A prefetch of one is this loop's fastest here: with the
// default 128 it measured 0.70 ms per input against 0.32.
func benchmarkAtLeastOnce(b *testing.B, outputs int) {
	c := eoRig(b, b.N)
	ctx := context.Background()
	sub, err := c.Subscribe(ctx, "eoin.>", client.WithDurable("bench-alo"), client.WithPrefetch(1))
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Close()
	b.ReportAllocs()
	b.SetBytes(eoPayload)
	b.ResetTimer()
	for range b.N {
		m, err := sub.Next(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, out := range eoTransform(m, outputs) {
			if _, err := c.Publish(ctx, out.Subject, out.Data); err != nil {
				b.Fatal(err)
			}
		}
		if err := m.Ack(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
