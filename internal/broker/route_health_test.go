package broker_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// targetHealth returns the route's health entry for subject.
func targetHealth(t *testing.T, c *client.Client, route, subject string) semaq.RouteTargetHealth {
	t.Helper()
	routes, err := c.Routes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		if r.Name != route {
			continue
		}
		for _, h := range r.Health {
			if h.Subject == subject {
				return h
			}
		}
	}
	t.Fatalf("route %s has no health for %s: %+v", route, subject, routes)
	return semaq.RouteTargetHealth{}
}

// TestAdaptiveSplitShiftsAndRecovers: the consumer of target a terminates
// every message; a's effective weight falls below its configured weight and
// traffic moves to b. Once a's consumer acks again, a's weight comes back
// and so does its traffic.
func TestAdaptiveSplitShiftsAndRecovers(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("slow: waits for a target's health to fall and recover (~20s); runs without -short")
	}
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "AI", "ai.>")
	brokertest.AddStream(t, c, "GPUA", "gpu.a")
	brokertest.AddStream(t, c, "GPUB", "gpu.b")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	info, err := c.AddRoute(ctx, semaq.Route{Name: "ab", Subject: "ai.x", Adaptive: true,
		Split: []semaq.RouteSplit{{Subject: "gpu.a", Weight: 50}, {Subject: "gpu.b", Weight: 50}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Health) != 2 || info.Health[0].Effective != 50 || info.Health[0].Health != 1 {
		t.Fatalf("a new adaptive route reports %+v, want full health", info.Health)
	}

	var failing atomic.Bool
	failing.Store(true)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	consume := func(subject string, fail *atomic.Bool) {
		sub, err := c.Subscribe(ctx, subject)
		if err != nil {
			t.Error(err)
			return
		}
		wg.Go(func() {
			defer sub.Close()
			for {
				m, err := sub.Next(ctx)
				if err != nil {
					return
				}
				if fail != nil && fail.Load() {
					_ = m.Term("model crashed")
				} else {
					_ = m.Ack(ctx)
				}
			}
		})
	}
	consume("gpu.a", &failing)
	consume("gpu.b", nil)

	// A steady publisher; counts what each target stored.
	var mu sync.Mutex
	stored := map[string]int{}
	wg.Go(func() {
		for ctx.Err() == nil {
			ack, err := c.Publish(ctx, "ai.x", []byte(`{}`))
			if err != nil {
				return
			}
			mu.Lock()
			stored[ack.Stream]++
			mu.Unlock()
			time.Sleep(2 * time.Millisecond) // a rate, not a synchronisation
		}
	})
	// window counts the next n messages stored and returns a's share.
	window := func(n int) float64 {
		mu.Lock()
		clear(stored)
		mu.Unlock()
		for {
			mu.Lock()
			a, b := stored["GPUA"], stored["GPUB"]
			mu.Unlock()
			if a+b >= n {
				return float64(a) / float64(a+b)
			}
			if ctx.Err() != nil {
				t.Fatalf("stored %d of %d", a+b, n)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitHealth := func(what string, ok func(a, b semaq.RouteTargetHealth) bool) (a, b semaq.RouteTargetHealth) {
		t.Helper()
		for {
			a, b = targetHealth(t, c, "ab", "gpu.a"), targetHealth(t, c, "ab", "gpu.b")
			if ok(a, b) {
				return a, b
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: a %+v, b %+v", what, a, b)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	a, b := waitHealth("a's weight never fell", func(a, b semaq.RouteTargetHealth) bool {
		return a.Effective <= 50*semaq.MinAdaptiveShare+0.01
	})
	if a.Errors == 0 || a.ErrorRate < 0.5 || a.Health > 0.5 || b.Effective != 50 || b.ErrorRate != 0 {
		t.Fatalf("while a fails: a %+v, b %+v", a, b)
	}
	if share := window(300); share > 0.2 {
		t.Fatalf("a still stores %.0f%% of the traffic at effective weight %.2f", share*100, a.Effective)
	}

	failing.Store(false)
	a, _ = waitHealth("a never recovered", func(a, b semaq.RouteTargetHealth) bool {
		return a.Effective >= 45
	})
	if a.Health < 0.9 {
		t.Fatalf("recovered a: %+v", a)
	}
	if share := window(300); share < 0.3 {
		t.Fatalf("recovered a stores only %.0f%% of the traffic", share*100)
	}
}

func TestAdaptiveNeedsSplit(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "AI", "ai.>")
	_, err := c.AddRoute(context.Background(), semaq.Route{Name: "one", Subject: "ai.x", To: "ai.y", Adaptive: true})
	if err == nil || !strings.Contains(err.Error(), "adaptive weights need a split") {
		t.Fatalf("adaptive single target: %v", err)
	}
}

// TestAdaptiveSplitFollowsAckLatency: both targets' consumers sample acks;
// a's consumer is slow, so a's health and effective weight fall below b's.
func TestAdaptiveSplitFollowsAckLatency(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("slow: samples ack latency of a deliberately slow consumer; runs without -short")
	}
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "AI", "ai.>")
	brokertest.AddStream(t, c, "GPUA", "gpu.a")
	brokertest.AddStream(t, c, "GPUB", "gpu.b")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.AddRoute(ctx, semaq.Route{Name: "lat", Subject: "ai.x", Adaptive: true,
		Split: []semaq.RouteSplit{{Subject: "gpu.a", Weight: 50}, {Subject: "gpu.b", Weight: 50}}}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for _, tc := range []struct {
		stream string
		work   time.Duration
	}{{"GPUA", 40 * time.Millisecond}, {"GPUB", 0}} {
		// SampleFrequency makes JetStream publish ack latency samples.
		cons, err := js.CreateConsumer(ctx, tc.stream, jetstream.ConsumerConfig{
			AckPolicy: jetstream.AckExplicitPolicy, SampleFrequency: "100%",
		})
		if err != nil {
			t.Fatal(err)
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			time.Sleep(tc.work) // the consumer's work: what makes a slow
			_ = m.Ack()
		})
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Stop()
	}
	wg.Go(func() {
		for ctx.Err() == nil {
			if _, err := c.Publish(ctx, "ai.x", []byte(`{}`)); err != nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	for {
		a, b := targetHealth(t, c, "lat", "gpu.a"), targetHealth(t, c, "lat", "gpu.b")
		if a.AckLatency > 0 && b.AckLatency > 0 && a.Effective < 40 && b.Effective == 50 {
			if a.AckLatency <= b.AckLatency || a.Health >= b.Health || a.ErrorRate != 0 {
				t.Fatalf("slow a %+v, fast b %+v", a, b)
			}
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("a's weight did not fall: a %+v, b %+v", a, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
