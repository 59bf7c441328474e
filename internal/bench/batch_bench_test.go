package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// Batch publishing beside per-message publishing, one rig for all: 1 KiB
// messages, batchSize to a batch, batchesInFlight batches in flight (each
// from its own goroutine, all on one connection). ns/op is per message in
// every sub-benchmark, so their ratios are throughput ratios;
// docs/benchmarks.md reports them. The SemaQ targets store into the
// ingest scenario's SemaQ stream, the raw ones into its raw copy (same
// JetStream settings: durability interval on the broker's server).
const (
	batchSize       = 100
	batchesInFlight = 4
)

func BenchmarkBatchPublish(b *testing.B) {
	r := startTestRig(b)
	data := generatedBody(1024)
	semaqT, rawT := Targets[TargetSemaq], Targets[TargetJetStream]

	// The floor and the baseline: per-message async publishing, a window
	// of 256 unacknowledged.
	b.Run("jetstream-async", func(b *testing.B) { benchmarkAsyncData(b, r, rawT, data, false) })
	b.Run("semaq-async", func(b *testing.B) { benchmarkAsyncData(b, r, semaqT, data, false) })

	msgs := func(subject string) []*nats.Msg {
		out := make([]*nats.Msg, batchSize)
		for i := range out {
			out[i] = newMessage(subject, data, false)
		}
		return out
	}
	c, err := client.Connect(context.Background(), r.Broker.ClientURL(), client.WithName("semaq-bench-batch"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	for _, mode := range []struct {
		name string
		opts []client.BatchOption
	}{{"semaq-batch", nil}, {"semaq-batch-atomic", []client.BatchOption{client.Atomic()}}} {
		b.Run(mode.name, func(b *testing.B) {
			batch := msgs(semaqT.subject)
			benchmarkBatches(b, len(data), func(ctx context.Context) error {
				ack, err := c.PublishBatch(ctx, batch, mode.opts...)
				if err != nil {
					return err
				}
				if ack.Stored != batchSize {
					return fmt.Errorf("%d of %d stored: %v", ack.Stored, batchSize, ack.Err())
				}
				return nil
			})
		})
	}

	// A stock client's atomic batch (Nats-Batch-* headers), through the
	// ingress and straight into JetStream.
	for _, t := range []*Target{semaqT, rawT} {
		name := "semaq-stock-atomic"
		if t == rawT {
			name = "jetstream-atomic"
		}
		b.Run(name, func(b *testing.B) {
			nc, err := t.Dial(r, "semaq-bench-"+name)
			if err != nil {
				b.Fatal(err)
			}
			defer nc.Close()
			js, err := jetstream.New(nc)
			if err != nil {
				b.Fatal(err)
			}
			// One batch per goroutine: a batch's messages are its own.
			batches := make(chan []*nats.Msg, batchesInFlight)
			for range batchesInFlight {
				batches <- msgs(t.subject)
			}
			benchmarkBatches(b, len(data), func(ctx context.Context) error {
				batch := <-batches
				defer func() { batches <- batch }()
				ack, err := jetstreamext.PublishMsgBatch(ctx, js, batch)
				if err != nil {
					return err
				}
				if ack.BatchSize != batchSize {
					return fmt.Errorf("batch of %d committed, want %d", ack.BatchSize, batchSize)
				}
				return nil
			})
		})
	}
}

// benchmarkBatches runs publish, one batch of batchSize messages each
// time, from batchesInFlight goroutines until b.N messages are published
// (rounded up to whole batches). ns/op is per message.
func benchmarkBatches(b *testing.B, size int, publish func(context.Context) error) {
	ctx := context.Background()
	for range 10 { // warm-up
		if err := publish(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.SetBytes(int64(size))
	b.ResetTimer()
	batches := int64((b.N + batchSize - 1) / batchSize)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, batchesInFlight)
	for range batchesInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= batches {
				if err := publish(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
}

// BenchmarkBatchHTTP publishes the same batches (batchSize messages of a
// 1 KiB JSON prompt, batchesInFlight in flight) through the HTTP door, as
// NDJSON, and through the SDK, on one broker: ns/op is per message, the
// ratio is the HTTP door's cost.
func BenchmarkBatchHTTP(b *testing.B) {
	s := brokertest.Start(b, func(c *broker.Config) { c.LogLevel = "error" })
	c := brokertest.Connect(b, s)
	ctx := context.Background()
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "BHTTP", Subjects: []string{"bhttp.>"}, Durability: broker.DurabilityInterval}); err != nil {
		b.Fatal(err)
	}
	prompt := jsonPrompt(1024)
	b.Run("sdk-batch", func(b *testing.B) {
		batch := make([]*nats.Msg, batchSize)
		for i := range batch {
			batch[i] = newMessage("bhttp.ingest", prompt, false)
		}
		benchmarkBatches(b, len(prompt), func(ctx context.Context) error {
			ack, err := c.PublishBatch(ctx, batch)
			if err == nil && ack.Stored != batchSize {
				err = fmt.Errorf("%d of %d stored: %v", ack.Stored, batchSize, ack.Err())
			}
			return err
		})
	})
	b.Run("http-batch", func(b *testing.B) {
		// The envelope of newMessage, as headers of each line.
		var line bytes.Buffer
		hdr := map[string]string{}
		for k, v := range newMessage("", nil, false).Header {
			hdr[k] = v[0]
		}
		item, err := json.Marshal(struct {
			Subject string            `json:"subject"`
			Headers map[string]string `json:"headers"`
			Data    json.RawMessage   `json:"data"`
		}{"bhttp.ingest", hdr, prompt})
		if err != nil {
			b.Fatal(err)
		}
		for range batchSize {
			line.Write(item)
			line.WriteByte('\n')
		}
		body := line.Bytes()
		url := "http://" + s.HTTPAddr() + "/api/v1/publish"
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: batchesInFlight}}
		benchmarkBatches(b, len(prompt), func(ctx context.Context) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/x-ndjson")
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			var ack struct {
				Stored int `json:"stored"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&ack); err != nil || resp.StatusCode != http.StatusOK || ack.Stored != batchSize {
				return fmt.Errorf("HTTP %d, %d stored: %v", resp.StatusCode, ack.Stored, err)
			}
			return nil
		})
	})
}

// jsonPrompt is a chat request of exactly size bytes of JSON.
func jsonPrompt(size int) []byte {
	const head, tail = `{"messages":[{"role":"user","content":"`, `"}]}`
	text := strings.Repeat("Summarise the attached quarterly report for the board. ", size/50+1)
	return []byte(head + text[:size-len(head)-len(tail)] + tail)
}
