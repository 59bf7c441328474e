package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// failoverClient connects to node i of c first and to the others when it
// goes, reconnecting for as long as the test runs.
func failoverClient(t *testing.T, c *brokertest.Cluster, i int) *client.Client {
	t.Helper()
	urls := []string{c.Node(i).ClientURL()}
	for _, s := range c.Nodes() {
		if s != c.Node(i) {
			urls = append(urls, s.ClientURL())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.Connect(ctx, strings.Join(urls, ","), client.WithNATSOptions(
		nats.DontRandomize(), nats.ReconnectWait(50*time.Millisecond), nats.MaxReconnects(-1)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// ksArrivals records, per key, every message members took, duplicates
// included, and gates them as ksRecorder does: a member blocks before
// acking while the count of distinct messages has reached the limit.
type ksArrivals struct {
	mu       sync.Mutex
	byKey    map[string][]int
	seen     map[string]bool
	distinct int
	dups     int
	limit    int
	more     chan struct{}
}

func newKSArrivals(limit int) *ksArrivals {
	return &ksArrivals{byKey: map[string][]int{}, seen: map[string]bool{}, limit: limit, more: make(chan struct{})}
}

func (r *ksArrivals) admit(stop <-chan struct{}, v ksMsg) bool {
	id := fmt.Sprintf("%s/%d", v.K, v.I)
	for {
		r.mu.Lock()
		if r.seen[id] {
			r.dups++
			r.byKey[v.K] = append(r.byKey[v.K], v.I)
			r.mu.Unlock()
			return true
		}
		if r.distinct < r.limit {
			r.distinct++
			r.seen[id] = true
			r.byKey[v.K] = append(r.byKey[v.K], v.I)
			r.mu.Unlock()
			return true
		}
		more := r.more
		r.mu.Unlock()
		select {
		case <-more:
		case <-stop:
			return false
		}
	}
}

func (r *ksArrivals) setLimit(n int) {
	r.mu.Lock()
	r.limit = n
	close(r.more)
	r.more = make(chan struct{})
	r.mu.Unlock()
}

func (r *ksArrivals) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.distinct
}

// check asserts every key's messages first arrived in publish order, all
// of them; it returns the duplicates (at-least-once: a message whose ack
// was lost with the node comes again).
func (r *ksArrivals) check(t *testing.T, keys, per int) int {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.byKey) != keys {
		t.Fatalf("saw %d keys, want %d", len(r.byKey), keys)
	}
	for key, got := range r.byKey {
		var first []int
		seen := map[int]bool{}
		for _, i := range got {
			if !seen[i] {
				seen[i] = true
				first = append(first, i)
			}
		}
		want := make([]int, per)
		for j := range want {
			want[j] = j
		}
		if !slices.Equal(first, want) {
			t.Errorf("key %s: messages first arrived as %v (all arrivals %v), want 0..%d in order", key, first, got, per-1)
		}
	}
	return r.dups
}

// runKSMember processes a member's messages through r until ctx ends.
func runKSMember(t *testing.T, ctx context.Context, sub *client.Subscription, name string, r *ksArrivals) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := sub.Next(ctx)
			if err != nil {
				return
			}
			var v ksMsg
			if err := json.Unmarshal(m.Data, &v); err != nil {
				t.Errorf("member %s: seq %d: %v", name, m.Seq, err)
				return
			}
			if !r.admit(ctx.Done(), v) {
				return
			}
			// An ack lost with a node: the message comes again.
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = m.Ack(actx)
			cancel()
		}
	}()
	return done
}

// groupInfoEverywhere asks every running node for the group and returns
// the node running its pump, failing unless every node names the same one
// and lists want as members.
func groupInfoEverywhere(c *brokertest.Cluster, want []string) string {
	var pumpNode string
	c.Eventually(30*time.Second, "every node to describe the group alike", func() error {
		pumpNode = ""
		for _, s := range c.Nodes() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			cl, err := client.Connect(ctx, s.ClientURL())
			if err != nil {
				cancel()
				return err
			}
			info, err := cl.KeySharedInfo(ctx, "KS", "g")
			cl.Close()
			cancel()
			if err != nil {
				return fmt.Errorf("%s: %w", s.NATSServer().Name(), err)
			}
			if !slices.Equal(info.Members, want) {
				return fmt.Errorf("%s lists members %v, want %v", s.NATSServer().Name(), info.Members, want)
			}
			if pumpNode == "" {
				pumpNode = info.Node
			}
			if info.Node == "" || info.Node != pumpNode {
				return fmt.Errorf("%s names the pump's node %q, another %q", s.NATSServer().Name(), info.Node, pumpNode)
			}
		}
		return nil
	})
	return pumpNode
}

// Members of one group on three nodes share it as on one node; when the
// node running the group's pump stops, the group goes on on a survivor with
// every member, and every key's messages still first arrive in publish
// order, none lost.
func TestClusterKeySharedFailover(t *testing.T) {
	const keys, per = 12, 20
	c := brokertest.StartCluster(t, 3)
	admin := brokertest.Connect(t, c.Node(0))
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	if _, err := admin.AddStream(ctx, semaq.StreamConfig{Name: "KS", Subjects: []string{"ks.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	pub := failoverClient(t, c, 0)
	c.Eventually(30*time.Second, "every node to serve KS", func() error {
		for _, s := range c.Nodes() {
			cl := brokertest.Connect(t, s)
			_, err := cl.StreamInfo(ctx, "KS")
			cl.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
	publishSessionsFrom(t, pub, "ks.chat", keys, 0, per/2)

	arr := newKSArrivals(keys * per / 4)
	names := []string{"a", "b", "c"}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var dones []<-chan struct{}
	for i, name := range names {
		cl := failoverClient(t, c, i)
		sub, err := cl.SubscribeKeyShared(ctx, "ks.chat", "g", client.KeyBy("session"), client.WithMember(name),
			client.WithAckWait(5*time.Second))
		if err != nil {
			t.Fatalf("member %s through n%d: %v", name, i+1, err)
		}
		t.Cleanup(func() { _ = sub.Close() })
		dones = append(dones, runKSMember(t, runCtx, sub, name, arr))
	}
	pumpNode := groupInfoEverywhere(c, names)
	// Members hold unacked messages when the node goes.
	c.Eventually(60*time.Second, "members to take a quarter", func() error {
		if n := arr.count(); n < keys*per/4 {
			return fmt.Errorf("%d taken", n)
		}
		return nil
	})
	stopped := c.Index(pumpNode)
	pub = failoverClient(t, c, (stopped+1)%c.N()) // publishes go on through a survivor
	c.Stop(stopped)
	publishSessionsFrom(t, pub, "ks.chat", keys, per/2, per)
	arr.setLimit(keys * per)

	c.Eventually(120*time.Second, "every message to arrive", func() error {
		if n := arr.count(); n < keys*per {
			return fmt.Errorf("%d of %d arrived", n, keys*per)
		}
		return nil
	})
	if after := groupInfoEverywhere(c, names); after == pumpNode {
		t.Fatalf("the group's pump is on %s, the stopped node", after)
	}
	stopRun()
	for _, d := range dones {
		<-d
	}
	dups := arr.check(t, keys, per)
	t.Logf("%d messages arrived twice (their ack was lost with the node)", dups)
}
