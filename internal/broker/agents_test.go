package broker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

func agentIDs(t *testing.T, c *client.Client) []string {
	t.Helper()
	list, err := c.Agents(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(list))
	for i, a := range list {
		ids[i] = a.ID
	}
	return ids
}

func TestAgentAnnounceListLapseLeave(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx := context.Background()

	if _, err := c.Announce(ctx, semaq.Agent{ID: "bad id", Intents: []string{"x"}}, time.Second); !errors.Is(err, semaq.ErrBadAgent) {
		t.Fatalf("bad id: err = %v", err)
	}
	if _, err := c.Announce(ctx, semaq.Agent{ID: "none"}, time.Second); !errors.Is(err, semaq.ErrBadAgent) {
		t.Fatalf("no intents: err = %v", err)
	}

	short, err := c.Announce(ctx, semaq.Agent{ID: "short", Intents: []string{"translate"}}, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	long, err := c.Announce(ctx, semaq.Agent{ID: "long", Intents: []string{"summarize", "classify"},
		Capabilities: map[string]string{"model": "llama3"}, Subject: "ai.>"}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.Agents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != "long" || list[1].ID != "short" {
		t.Fatalf("agents %+v", list)
	}
	if got := list[0]; !slices.Equal(got.Intents, []string{"classify", "summarize"}) || got.Capabilities["model"] != "llama3" ||
		got.Subject != "ai.>" || got.TTL != time.Second || !got.ExpiresAt.Equal(got.AnnouncedAt.Add(time.Second)) {
		t.Fatalf("long = %+v", got)
	}

	// short stops heartbeating: it leaves within its TTL; long, still
	// heartbeating, stays.
	short.Stop()
	first := long.Info().AnnouncedAt
	deadline := time.Now().Add(10 * time.Second)
	for {
		ids := agentIDs(t, c)
		if !slices.Contains(ids, "long") {
			t.Fatalf("heartbeating agent gone: %v (last error %v)", ids, long.Err())
		}
		if !slices.Contains(ids, "short") && long.Info().AnnouncedAt.After(first) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("agents %v 10s after short stopped", ids)
		}
		time.Sleep(20 * time.Millisecond)
	}

	if err := long.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if ids := agentIDs(t, c); len(ids) != 0 {
		t.Fatalf("agents after leave: %v", ids)
	}
	if err := short.Leave(ctx); err != nil {
		t.Fatalf("leaving a lapsed agent: %v", err)
	}
}

func TestServeIntentDeliversByIntent(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	addStream(t, c, semaq.StreamConfig{Name: "AI", Subjects: []string{"ai.>"}})
	ctx := context.Background()

	translate, err := c.ServeIntent(ctx, "ai.tasks", "translate")
	if err != nil {
		t.Fatal(err)
	}
	defer translate.Close()
	var sum [2]*client.IntentSubscription
	for i := range sum {
		if sum[i], err = c.ServeIntent(ctx, "ai.tasks", "summarize", client.WithPrefetch(1)); err != nil {
			t.Fatal(err)
		}
		defer sum[i].Close()
	}
	if _, err := c.ServeIntent(ctx, "ai.tasks", "summarize", client.WithDurable("x")); !errors.Is(err, semaq.ErrBadRequest) {
		t.Fatalf("WithDurable: err = %v", err)
	}

	const n = 20
	var (
		mu   sync.Mutex
		got  = map[string]int{} // body -> deliveries
		per  [2]int
		done = make(chan struct{})
	)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for i, sub := range sum {
		wg.Go(func() {
			for {
				m, err := sub.Next(rctx)
				if err != nil {
					return
				}
				if env, _ := m.Envelope(); env.Intent != "summarize" {
					t.Errorf("summarize agent got intent %q", env.Intent)
				}
				_ = m.Ack(rctx)
				mu.Lock()
				got[string(m.Data)]++
				per[i]++
				if len(got) == n {
					close(done)
				}
				mu.Unlock()
			}
		})
	}
	for i := range n {
		publish(t, c, "ai.tasks", fmt.Sprintf(`{"s":%d}`, i), client.WithIntent("summarize"))
		publish(t, c, "ai.tasks", fmt.Sprintf(`{"t":%d}`, i), client.WithIntent("other"))
	}
	publish(t, c, "ai.tasks", `{"t":"x"}`, client.WithIntent("translate"))
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		mu.Lock()
		t.Fatalf("summarize agents got %d of %d messages", len(got), n)
	}
	m := nextIntent(t, translate)
	if string(m.Data) != `{"t":"x"}` {
		t.Fatalf("translate got %s", m.Data)
	}
	cancel()
	wg.Wait()
	for body, k := range got {
		if k != 1 {
			t.Errorf("%s delivered %d times", body, k)
		}
	}
	if per[0]+per[1] != n {
		t.Errorf("deliveries %v, want %d in all", per, n)
	}
}

func nextIntent(t *testing.T, sub *client.IntentSubscription) *client.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	m, err := sub.Next(ctx)
	if err != nil {
		t.Fatalf("next: %v", err)
	}
	return m
}

// TestAgentListUnderHeartbeats lists while every agent re-announces as
// fast as it can: a list must show each of them every time, whatever
// order the writes and the read interleave in.
func TestAgentListUnderHeartbeats(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	const agents = 8
	var wg sync.WaitGroup
	errs := make(chan error, agents)
	for i := range agents {
		a := semaq.Agent{ID: fmt.Sprintf("a%d", i), Intents: []string{"x"}}
		if _, err := c.Announce(ctx, a, time.Minute); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				an, err := c.Announce(ctx, a, time.Minute)
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				an.Stop()
			}
		}()
	}
	defer func() {
		cancel()
		wg.Wait()
	}()
	for range 50 {
		if ids := agentIDs(t, c); len(ids) != agents {
			t.Fatalf("listed %d agents while they heartbeat, want %d: %v", len(ids), agents, ids)
		}
		select {
		case err := <-errs:
			t.Fatal(err)
		default:
		}
	}
}
