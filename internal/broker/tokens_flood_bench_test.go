package broker_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// BenchmarkTokenFloodRSS is the token flood of docs/security.md: 8 plain
// NATS connections write well-formed 64 KiB token records as fast as the
// relay acks them, each into request ids of its own (a new id whenever one
// is refused), for SEMAQ_FLOOD_SECONDS (default 15). It reports the
// process's peak RSS and Go heap, what was stored, what was refused and
// SQ_TOKENS' size at the end. Run it alone (peak RSS is the process's):
//
//	SEMAQ_FLOOD_SECONDS=60 go test -run '^$' -bench TokenFloodRSS -benchtime 1x ./internal/broker
func BenchmarkTokenFloodRSS(b *testing.B) {
	for range b.N {
		tokenFloodOnce(b, floodDuration())
	}
}

func tokenFloodOnce(b *testing.B, d time.Duration) {
	s := brokertest.Start(b)
	base := readRSS()
	peak := newPeakSampler()
	text := strings.Repeat("t", 64<<10)
	var (
		wg               sync.WaitGroup
		ok, refused, bad atomic.Int64
		stop             = make(chan struct{})
	)
	for w := range 8 {
		nc, err := nats.Connect(s.ClientURL())
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for n := 0; ; n++ {
				id := "flood-" + strconv.Itoa(w) + "-" + strconv.Itoa(n)
				hdr := nats.Header{semaq.HdrTokenKey: {"flood-writer-key-" + id}}
				for seq := uint64(1); ; seq++ {
					select {
					case <-stop:
						return
					default:
					}
					c := semaq.TokenChunk{Seq: seq, Offset: seq - 1, N: 1, Text: text}
					buf = semaq.AppendTokenChunk(buf[:0], &c)
					m, err := nc.RequestMsg(&nats.Msg{Subject: semaq.TokenWriteChunkSubject(id), Header: hdr, Data: buf}, 10*time.Second)
					switch {
					case err != nil:
						bad.Add(1)
					case strings.Contains(string(m.Data), `"error"`):
						refused.Add(1)
					default:
						ok.Add(1)
						continue
					}
					break // refused: the next id
				}
			}
		}()
	}
	time.Sleep(d) // the flood's length: the measurement, not synchronisation
	close(stop)
	wg.Wait()
	floodPeak := peak.stop()

	nc, err := brokertest.DialOperator(s)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, _ := nc.JetStream()
	info, err := js.StreamInfo(semaq.TokenStream, nats.Context(context.Background()))
	if err != nil {
		b.Fatal(err)
	}
	mb := func(n uint64) float64 { return float64(n) / (1 << 20) }
	b.ReportMetric(mb(base), "base_rss_MB")
	b.ReportMetric(mb(floodPeak.rss), "flood_peak_rss_MB")
	b.ReportMetric(mb(floodPeak.heap), "flood_peak_heap_MB")
	b.ReportMetric(mb(info.State.Bytes), "stored_MB")
	b.ReportMetric(float64(ok.Load()), "stored")
	b.ReportMetric(float64(refused.Load()), "refused")
	b.ReportMetric(float64(bad.Load()), "other_errors")
}
