package broker_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// BenchmarkQueueFloodRSS is the hostile flood of docs/queues.md: a queue
// with default settings and no workers, flooded by plain NATS requests of
// 256 KiB for SEMAQ_FLOOD_SECONDS (default 15), then left alone for 5 s,
// then the broker restarted on the same data (up to a minute to index
// it again). It reports the process's
// peak RSS and Go heap during each phase, what was stored and how many
// publishes were refused with 429. Run it alone (peak RSS is the
// process's):
//
//	SEMAQ_FLOOD_SECONDS=60 go test -run '^$' -bench QueueFloodRSS -benchtime 1x ./internal/broker
func BenchmarkQueueFloodRSS(b *testing.B) {
	for range b.N {
		floodOnce(b, floodDuration())
	}
}

func floodOnce(b *testing.B, d time.Duration) {
	dir := b.TempDir()
	onDir := func(cfg *broker.Config) { cfg.DataDir = dir }
	s := brokertest.Start(b, onDir)
	c := brokertest.Connect(b, s)
	if _, err := c.AddQueue(context.Background(), semaq.QueueConfig{Name: "FLOOD", Subjects: []string{"flood.>"}}); err != nil {
		b.Fatal(err)
	}
	base := readRSS()
	peak := newPeakSampler()
	payload := make([]byte, 256<<10)
	var (
		wg               sync.WaitGroup
		ok, refused, bad atomic.Int64
		stop             = make(chan struct{})
	)
	for range 8 {
		nc, err := nats.Connect(s.ClientURL())
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				m, err := nc.Request("flood.x", payload, 10*time.Second)
				switch {
				case err != nil:
					bad.Add(1)
				case strings.Contains(string(m.Data), `"code":429`):
					refused.Add(1)
				case strings.Contains(string(m.Data), `"error"`):
					bad.Add(1)
				default:
					ok.Add(1)
				}
			}
		}()
	}
	time.Sleep(d) // the flood's length: the measurement, not synchronisation
	close(stop)
	wg.Wait()
	floodPeak := peak.stop()
	after := newPeakSampler()
	time.Sleep(5 * time.Second) // still rising after the flood?
	afterPeak := after.stop()
	settled := readRSS()

	qi, err := c.QueueInfo(context.Background(), "FLOOD")
	if err != nil {
		b.Fatal(err)
	}
	c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		b.Fatal(err)
	}
	restart := newPeakSampler()
	s2 := brokertest.Start(b, onDir)
	c2 := brokertest.Connect(b, s2)
	reindexed := 0
	for until := time.Now().Add(60 * time.Second); time.Now().Before(until); {
		qi2, err := c2.QueueInfo(context.Background(), "FLOOD")
		if errors.Is(err, semaq.ErrQueueNotFound) {
			b.Fatal(err)
		}
		if err == nil {
			reindexed = qi2.Status.Queued
			if reindexed >= qi.Status.Queued {
				break
			}
		}
		time.Sleep(10 * time.Millisecond) // polling a condition
	}
	restartPeak := restart.stop()

	mb := func(n uint64) float64 { return float64(n) / (1 << 20) }
	b.ReportMetric(mb(base), "base_rss_MB")
	b.ReportMetric(mb(floodPeak.rss), "flood_peak_rss_MB")
	b.ReportMetric(mb(floodPeak.heap), "flood_peak_heap_MB")
	b.ReportMetric(mb(afterPeak.rss), "after_peak_rss_MB")
	b.ReportMetric(mb(settled), "settled_rss_MB")
	b.ReportMetric(mb(restartPeak.rss), "restart_peak_rss_MB")
	b.ReportMetric(float64(ok.Load()), "stored")
	b.ReportMetric(float64(refused.Load()), "refused_429")
	b.ReportMetric(float64(bad.Load()), "other_errors")
	b.ReportMetric(float64(qi.Status.Queued), "queued")
	b.ReportMetric(float64(reindexed), "queued_after_restart")
}

// floodDuration is how long a flood benchmark floods:
// SEMAQ_FLOOD_SECONDS, 15 s by default.
func floodDuration() time.Duration {
	if v, err := strconv.Atoi(os.Getenv("SEMAQ_FLOOD_SECONDS")); err == nil && v > 0 {
		return time.Duration(v) * time.Second
	}
	return 15 * time.Second
}

type peakMem struct{ rss, heap uint64 }

// peakSampler samples RSS and the Go heap every 50 ms until stopped.
type peakSampler struct {
	stopc chan struct{}
	done  chan peakMem
}

func newPeakSampler() *peakSampler {
	p := &peakSampler{stopc: make(chan struct{}), done: make(chan peakMem, 1)}
	go func() {
		var pk peakMem
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		for {
			pk.rss = max(pk.rss, readRSS())
			metrics.Read(sample)
			pk.heap = max(pk.heap, sample[0].Value.Uint64())
			select {
			case <-p.stopc:
				p.done <- pk
				return
			case <-tick.C:
			}
		}
	}()
	return p
}

func (p *peakSampler) stop() peakMem {
	close(p.stopc)
	return <-p.done
}

// readRSS is the process's resident set (Linux), 0 elsewhere.
func readRSS() uint64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
