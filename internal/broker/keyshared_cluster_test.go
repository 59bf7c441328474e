package broker_test

import (
	"context"
	"encoding/json"
	"errors"
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

// publishSessionsRetry publishes as publishSessionsFrom does, each message
// with a message id and retried until acknowledged, as a client does while
// a stream fails over: it is stored once.
func publishSessionsRetry(t *testing.T, c *brokertest.Cluster, pub *client.Client, subject string, keys, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		for k := range keys {
			key := fmt.Sprintf("s-%02d", k)
			data := fmt.Appendf(nil, `{"k": %q, "i": %d}`, key, i)
			c.Eventually(60*time.Second, "a publish acknowledged", func() error {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := pub.Publish(ctx, subject, data, client.WithSession(key), client.WithMsgID(fmt.Sprintf("%s-%d", key, i)))
				return err
			})
		}
	}
}

// ksArrivals records, per key, every message members took, duplicates
// included, and gates them: a member blocks before acking once it has
// taken limit distinct messages, holding that one unacked.
type ksArrivals struct {
	mu       sync.Mutex
	byKey    map[string][]int
	seen     map[string]bool
	taken    map[string]int // by member
	distinct int
	dups     int
	limit    int
	more     chan struct{}
}

func newKSArrivals(limit int) *ksArrivals {
	return &ksArrivals{byKey: map[string][]int{}, seen: map[string]bool{}, taken: map[string]int{}, limit: limit, more: make(chan struct{})}
}

func (r *ksArrivals) admit(stop <-chan struct{}, member string, v ksMsg) bool {
	id := fmt.Sprintf("%s/%d", v.K, v.I)
	for {
		r.mu.Lock()
		if r.seen[id] {
			r.dups++
			r.byKey[v.K] = append(r.byKey[v.K], v.I)
			r.mu.Unlock()
			return true
		}
		if r.taken[member] < r.limit {
			r.taken[member]++
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
			if !r.admit(ctx.Done(), name, v) {
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
// node running the group's pump stops, with a member connected there, the
// group goes on on a survivor with the other members, and every key's
// messages still first arrive in publish order, none lost.
func TestClusterKeySharedFailover(t *testing.T) {
	t.Parallel()
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

	const first = 5 // messages each member takes before the node goes
	arr := newKSArrivals(first)
	names := []string{"a", "b", "c"}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var dones []<-chan struct{}
	var clients []*client.Client
	for i, name := range names {
		cl := failoverClient(t, c, i)
		clients = append(clients, cl)
		sub, err := cl.SubscribeKeyShared(ctx, "ks.chat", "g", client.KeyBy("session"), client.WithMember(name),
			client.WithAckWait(10*time.Second))
		if err != nil {
			t.Fatalf("member %s through n%d: %v", name, i+1, err)
		}
		t.Cleanup(func() { _ = sub.Close() })
		dones = append(dones, runKSMember(t, runCtx, sub, name, arr))
	}
	pumpNode := groupInfoEverywhere(c, names)
	// Members hold unacked messages when the node goes.
	c.Eventually(60*time.Second, "every member to take its first messages", func() error {
		if n := arr.count(); n < first*len(names) {
			return fmt.Errorf("%d taken", n)
		}
		return nil
	})
	stopped := c.Index(pumpNode)
	pub = failoverClient(t, c, (stopped+1)%c.N()) // publishes go on through a survivor
	// The group's consumer is led elsewhere, so losing the pump's node is
	// not also losing the consumer's leader.
	op, err := brokertest.DialOperator(c.Node(stopped))
	if err != nil {
		t.Fatal(err)
	}
	c.Eventually(30*time.Second, "the group's consumer to be led by another node", func() error {
		if l := c.ConsumerLeader("KS", "g"); l != stopped && l >= 0 {
			return nil
		}
		if _, err := op.Request("$JS.API.CONSUMER.LEADER.STEPDOWN.KS.g", nil, 5*time.Second); err != nil {
			return err
		}
		return fmt.Errorf("led by n%d", c.ConsumerLeader("KS", "g")+1)
	})
	op.Close()
	// The member on that node goes with it, holding messages that come
	// back only after their ack wait; the others join again, holding what
	// they had. The new pump starts with all that in flight: the keys of
	// the lost member must wait, not go to the others out of order.
	clients[stopped].Close()
	c.Stop(stopped)
	publishSessionsRetry(t, c, pub, "ks.chat", keys, per/2, per)
	left := slices.Delete(slices.Clone(names), stopped, stopped+1)
	if after := groupInfoEverywhere(c, left); after == pumpNode {
		t.Fatalf("the group's pump is on %s, the stopped node", after)
	}
	arr.setLimit(keys * per)

	c.Eventually(120*time.Second, "every message to arrive", func() error {
		if n := arr.count(); n < keys*per {
			return fmt.Errorf("%d of %d arrived", n, keys*per)
		}
		return nil
	})
	stopRun()
	for _, d := range dones {
		<-d
	}
	dups := arr.check(t, keys, per)
	t.Logf("%d messages arrived twice (their ack was lost with the node)", dups)
}

// With auth on, a reader's members of one group join through two nodes:
// the pump on one node delivers to the member on the other through the
// user's inbox, and a JOIN is checked against the reader's grants by the
// node it reached.
func TestClusterKeySharedAuth(t *testing.T) {
	t.Parallel()
	a := startAuthCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := a.admin.AddStream(ctx, semaq.StreamConfig{Name: "KS", Subjects: []string{"ks.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	a.add(semaq.UserAddRequest{Name: "rd", Role: semaq.RoleReader, Subjects: []string{"ks.chat"}})
	var subs []*client.Subscription
	for i, name := range []string{"a", "b"} {
		cl := brokertest.ConnectKey(t, a.c.Node(i), a.keys["rd"])
		var sub *client.Subscription
		a.c.Eventually(30*time.Second, "member "+name+" to join through n"+fmt.Sprint(i+1), func() error {
			var err error
			sub, err = cl.SubscribeKeyShared(ctx, "ks.chat", "g", client.KeyBy("session"), client.WithMember(name))
			return err
		})
		defer sub.Close()
		subs = append(subs, sub)
		if _, err := cl.SubscribeKeyShared(ctx, "ks.other", "h", client.KeyBy("session")); !errors.Is(err, semaq.ErrForbidden) {
			t.Fatalf("a join outside the reader's subjects through n%d: %v, want forbidden", i+1, err)
		}
	}
	const keys = 32 // two members own some each, but for a chance of 2^-31
	for k := range keys {
		if _, err := a.admin.Publish(ctx, "ks.chat", fmt.Appendf(nil, `{"k":"s%d"}`, k), client.WithSession(fmt.Sprintf("s%d", k))); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]string{}
	for len(got) < keys {
		progress := false
		for i, sub := range subs {
			mctx, mcancel := context.WithTimeout(ctx, 200*time.Millisecond)
			m, err := sub.Next(mctx)
			mcancel()
			if err != nil {
				continue
			}
			progress = true
			key := m.Header.Get(semaq.HdrSession)
			if prev, ok := got[key]; ok && prev != fmt.Sprint(i) {
				t.Fatalf("key %s went to two members", key)
			}
			got[key] = fmt.Sprint(i)
			if err := m.Ack(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if !progress && ctx.Err() != nil {
			t.Fatalf("received %v", got)
		}
	}
	byMember := map[string]int{}
	for _, m := range got {
		byMember[m]++
	}
	if len(byMember) != 2 {
		t.Fatalf("keys by member %v, want both members to own some of %d keys", byMember, keys)
	}
}
