package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// ksSeen is one message a member took: when it came out of Next and when
// the member started acking it.
type ksSeen struct {
	i            int
	member       string
	recv, ackAt  time.Time
	numDelivered uint64
}

// ksRecorder records, per key, the messages members processed in the order
// they were admitted, and gates members: a member blocks before acking
// while the count has reached the limit, holding its message unacked.
type ksRecorder struct {
	mu    sync.Mutex
	byKey map[string][]ksSeen
	count int
	limit int
	more  chan struct{} // closed when limit rises
}

func newKSRecorder(limit int) *ksRecorder {
	return &ksRecorder{byKey: map[string][]ksSeen{}, limit: limit, more: make(chan struct{})}
}

// admit waits for room under the limit and records the message; false if
// stop closed first.
func (r *ksRecorder) admit(stop <-chan struct{}, key string, s ksSeen) (int, bool) {
	for {
		r.mu.Lock()
		if r.count < r.limit {
			r.count++
			s.ackAt = time.Now()
			r.byKey[key] = append(r.byKey[key], s)
			n := len(r.byKey[key]) - 1
			r.mu.Unlock()
			return n, true
		}
		more := r.more
		r.mu.Unlock()
		select {
		case <-more:
		case <-stop:
			return 0, false
		}
	}
}

func (r *ksRecorder) setLimit(n int) {
	r.mu.Lock()
	r.limit = n
	close(r.more)
	r.more = make(chan struct{})
	r.mu.Unlock()
}

func (r *ksRecorder) total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

func (r *ksRecorder) waitTotal(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for r.total() < n {
		if time.Now().After(deadline) {
			t.Fatalf("processed %d of %d messages", r.total(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// check asserts every key was processed completely, once, in publish
// order, and that a key moved to another member only after its previous
// member had started acking the message before. It returns how many keys
// were processed by more than one member.
func (r *ksRecorder) check(t *testing.T, keys, per int) (moved int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.byKey) != keys {
		t.Fatalf("saw %d keys, want %d", len(r.byKey), keys)
	}
	for key, seen := range r.byKey {
		is := make([]int, len(seen))
		for j, s := range seen {
			is[j] = s.i
		}
		want := make([]int, per)
		for j := range want {
			want[j] = j
		}
		if !slices.Equal(is, want) {
			t.Fatalf("key %s processed as %v, want 0..%d in order", key, is, per-1)
		}
		members := map[string]bool{}
		for j, s := range seen {
			members[s.member] = true
			if j > 0 && s.member != seen[j-1].member && s.recv.Before(seen[j-1].ackAt) {
				t.Errorf("key %s: message %d reached %s at %s, before %s acked message %d at %s",
					key, s.i, s.member, s.recv.Format(time.StampMicro), seen[j-1].member, seen[j-1].i, seen[j-1].ackAt.Format(time.StampMicro))
			}
		}
		if len(members) > 1 {
			moved++
		}
	}
	return moved
}

type ksMsg struct {
	K string `json:"k"`
	I int    `json:"i"`
}

// ksRunner is a member that processes messages through a recorder.
type ksRunner struct {
	name   string
	sub    *client.Subscription
	cancel context.CancelFunc
	done   chan struct{}
	// killed is set before the test closes the member's connection: an
	// ack failing after it is the death the test stages, not a fault.
	killed atomic.Bool
}

func startKSMember(t *testing.T, c *client.Client, subject, group, name string, rec *ksRecorder, opts ...client.SubscribeOption) *ksRunner {
	t.Helper()
	opts = append([]client.SubscribeOption{client.KeyBy("session"), client.WithMember(name)}, opts...)
	sub, err := c.SubscribeKeyShared(context.Background(), subject, group, opts...)
	if err != nil {
		t.Fatalf("member %s: %v", name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &ksRunner{name: name, sub: sub, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for {
			m, err := sub.Next(ctx)
			if err != nil {
				return
			}
			recv := time.Now()
			var v ksMsg
			if err := json.Unmarshal(m.Data, &v); err != nil {
				t.Errorf("member %s: seq %d: %v", name, m.Seq, err)
				return
			}
			if _, ok := rec.admit(ctx.Done(), v.K, ksSeen{i: v.I, member: name, recv: recv, numDelivered: m.NumDelivered}); !ok {
				// Stopped holding it: hand it back once out of the group.
				_ = sub.Close()
				_ = m.Nak(0)
				return
			}
			if err := m.Ack(context.Background()); err != nil {
				if !r.killed.Load() {
					t.Errorf("member %s: ack: %v", name, err)
				}
				return
			}
		}
	}()
	return r
}

// kill ends the member as a crash would: its connection c closes under
// it, holding whatever it was given and had not acked.
func (r *ksRunner) kill(c *client.Client) {
	r.killed.Store(true)
	c.Close()
	r.cancel()
	<-r.done
}

// stop ends the member gracefully: it leaves the group.
func (r *ksRunner) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	<-r.done
	if err := r.sub.Close(); err != nil {
		t.Errorf("member %s: close: %v", r.name, err)
	}
}

func publishSessions(t *testing.T, c *client.Client, subject string, keys, per int) {
	t.Helper()
	publishSessionsFrom(t, c, subject, keys, 0, per)
}

// publishSessionsFrom publishes rounds from to to-1 of keys messages.
func publishSessionsFrom(t *testing.T, c *client.Client, subject string, keys, from, to int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := from; i < to; i++ {
		for k := range keys {
			key := fmt.Sprintf("s-%02d", k)
			data := fmt.Appendf(nil, `{"k": %q, "i": %d}`, key, i)
			if _, err := c.Publish(ctx, subject, data, client.WithSession(key)); err != nil {
				t.Fatalf("publish: %v", err)
			}
		}
	}
}

// TestKeySharedOrderAcrossRebalance: 50 keys x 40 messages; members join
// and leave while others hold unacked messages. Every key's messages are
// processed once each in publish order, and a key reaches a new member only
// after its previous member acked.
func TestKeySharedOrderAcrossRebalance(t *testing.T) {
	t.Parallel()
	const keys, per = 50, 40
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "KS", "ks.>")
	publishSessions(t, c, "ks.chat", keys, per)

	rec := newKSRecorder(300)
	conn := func() *client.Client { return brokertest.Connect(t, s) }
	// A small window keeps every phase change mid-stream, with keys in
	// flight at the old owners.
	created := []client.SubscribeOption{client.WithAckWait(5 * time.Second), client.WithMaxAckPending(100)}
	m1 := startKSMember(t, conn(), "ks.chat", "g", "m1", rec, created...)
	defer m1.stop(t)
	// Each phase stops members at a count, with messages in hand and
	// more forwarded behind them, then changes the membership.
	rec.waitTotal(t, 300)
	m2 := startKSMember(t, conn(), "ks.chat", "g", "m2", rec)
	rec.setLimit(700)
	rec.waitTotal(t, 700)
	m3 := startKSMember(t, conn(), "ks.chat", "g", "m3", rec)
	defer m3.stop(t)
	rec.setLimit(1200)
	rec.waitTotal(t, 1200)
	m2.stop(t)
	rec.setLimit(1500)
	rec.waitTotal(t, 1500)
	m4 := startKSMember(t, conn(), "ks.chat", "g", "m4", rec)
	defer m4.stop(t)
	rec.setLimit(keys * per)
	rec.waitTotal(t, keys*per)

	if moved := rec.check(t, keys, per); moved == 0 {
		t.Fatal("no key changed member: the rebalance was not exercised")
	} else {
		t.Logf("%d of %d keys changed member", moved, keys)
	}
	members := map[string]int{}
	for _, seen := range rec.byKey {
		for _, s := range seen {
			members[s.member]++
		}
	}
	for _, name := range []string{"m1", "m2", "m3", "m4"} {
		if members[name] == 0 {
			t.Errorf("member %s processed nothing: %v", name, members)
		}
	}
}

// TestKeySharedHoldsMovingKey: a key moving to a new member waits while its
// old member holds an unacked message of it.
func TestKeySharedHoldsMovingKey(t *testing.T) {
	const keys = 20
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "KS", "ks.>")
	publishSessions(t, c, "ks.chat", keys, 1)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := brokertest.Connect(t, s).SubscribeKeyShared(ctx, "ks.chat", "g", client.KeyBy("session"), client.WithMember("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	held := map[string]*client.Msg{}
	for range keys {
		m := nextMsg(t, a)
		held[m.Header.Get(semaq.HdrSession)] = m
	}
	b, err := brokertest.Connect(t, s).SubscribeKeyShared(ctx, "ks.chat", "g", client.WithMember("b"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	publishSessions(t, c, "ks.chat", keys, 2) // i = 0, 1 again: second round

	// Wait until the broker holds the moving keys' new messages.
	var info *semaq.KeySharedGroupInfo
	deadline := time.Now().Add(15 * time.Second)
	for {
		info, err = c.KeySharedInfo(ctx, "KS", "g")
		if err != nil {
			t.Fatal(err)
		}
		if info.Held > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing held: %+v", info)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !slices.Equal(info.Members, []string{"a", "b"}) {
		t.Fatalf("members %v, want [a b]", info.Members)
	}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	m, err := b.Next(short)
	cancelShort()
	if err == nil {
		t.Fatalf("b got %s of key %s while a holds that key's first message unacked", m.Data, m.Header.Get(semaq.HdrSession))
	}
	for _, m := range held {
		if err := m.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Now the second round flows: moved keys to b, the rest to a, each
	// key's two messages in order.
	got := map[string][]int{}
	byB := map[string]bool{}
	for n := 0; n < 2*keys; {
		for _, sub := range []*client.Subscription{a, b} {
			poll, cancelPoll := context.WithTimeout(ctx, 50*time.Millisecond)
			m, err := sub.Next(poll)
			cancelPoll()
			if err != nil {
				if ctx.Err() != nil {
					t.Fatalf("received %d of %d: %v", n, 2*keys, err)
				}
				continue
			}
			var v ksMsg
			if err := json.Unmarshal(m.Data, &v); err != nil {
				t.Fatal(err)
			}
			got[v.K] = append(got[v.K], v.I)
			if sub == b {
				byB[v.K] = true
			}
			_ = m.Ack(ctx)
			n++
		}
	}
	if len(got) != keys {
		t.Fatalf("got %d keys, want %d", len(got), keys)
	}
	for k, is := range got {
		if !slices.Equal(is, []int{0, 1}) {
			t.Errorf("key %s came as %v, want [0 1]", k, is)
		}
	}
	if len(byB) == 0 || len(byB) == keys {
		t.Fatalf("b took %d of %d keys; want some, not all", len(byB), keys)
	}
}

// TestKeySharedKilledMember: a member that dies without acking (no leave,
// no pings) is dropped; its keys' messages go to the others, in order.
func TestKeySharedKilledMember(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("slow: waits for a dead member to be dropped; runs without -short")
	}
	const keys, per = 20, 10
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "KS", "ks.>")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	victimConn := brokertest.Connect(t, s)
	victim, err := victimConn.SubscribeKeyShared(ctx, "ks.chat", "g", client.KeyBy("session"),
		client.WithMember("victim"), client.WithAckWait(2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	rec := newKSRecorder(keys * per)
	survivor := startKSMember(t, brokertest.Connect(t, s), "ks.chat", "g", "survivor", rec)
	defer survivor.stop(t)
	publishSessions(t, c, "ks.chat", keys, per)

	// The victim takes one message and dies with it and everything
	// forwarded behind it unacked.
	if _, err := victim.Next(ctx); err != nil {
		t.Fatal(err)
	}
	victimConn.Close()

	rec.waitTotal(t, keys*per)
	rec.check(t, keys, per)
	redelivered := 0
	rec.mu.Lock()
	for _, seen := range rec.byKey {
		for _, s := range seen {
			if s.numDelivered > 1 {
				redelivered++
			}
		}
	}
	rec.mu.Unlock()
	if redelivered == 0 {
		t.Fatal("the survivor got no redelivered message: the victim's keys never moved")
	}
	info, err := c.KeySharedInfo(ctx, "KS", "g")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(info.Members, []string{"survivor"}) {
		t.Fatalf("members %v, want [survivor]", info.Members)
	}
}

func TestKeySharedJoinErrors(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "KS", "ks.>")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub, err := c.SubscribeKeyShared(ctx, "ks.chat", "g", client.KeyBy("tenant"))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for _, tc := range []struct {
		name, subject, group string
		opts                 []client.SubscribeOption
		want                 string
	}{
		{"no key", "ks.chat", "fresh", nil, "key expression is empty"},
		{"bad key", "ks.chat", "fresh", []client.SubscribeOption{client.KeyBy("payload.")}, "key"},
		{"other key", "ks.chat", "g", []client.SubscribeOption{client.KeyBy("session")}, `keyed by "tenant"`},
		{"other subject", "ks.other", "g", nil, "follows subject ks.chat"},
		{"no stream", "nowhere.x", "g", []client.SubscribeOption{client.KeyBy("session")}, "no stream"},
		{"bad group", "ks.chat", "a.b", []client.SubscribeOption{client.KeyBy("session")}, "group"},
		{"with filter", "ks.chat", "g", []client.SubscribeOption{client.WithFilter("true")}, "unfiltered"},
		{"bad member", "ks.chat", "g", []client.SubscribeOption{client.WithMember("a b")}, "WithMember"},
		{"bad window", "ks.chat", "g", []client.SubscribeOption{client.WithMaxAckPending(0)}, "WithMaxAckPending"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub, err := c.SubscribeKeyShared(ctx, tc.subject, tc.group, tc.opts...)
			if err == nil {
				sub.Close()
				t.Fatal("joined")
			}
			var ae *semaq.APIError
			if !errors.As(err, &ae) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v (%T), want an API error about %q", err, err, tc.want)
			}
		})
	}
	// The key-shared options are refused by a plain Subscribe rather than
	// ignored.
	if sub, err := c.Subscribe(ctx, "ks.chat", client.KeyBy("session")); !errors.Is(err, semaq.ErrBadRequest) {
		if sub != nil {
			sub.Close()
		}
		t.Fatalf("Subscribe with KeyBy: %v", err)
	}
}

// TestKeySharedSurvivesRestart: the group's key and position survive a
// broker restart; a member dies with messages in flight, and after the
// restart a member joining without a key still processes every key in
// order: the new pump holds newer messages until the old ones come back.
func TestKeySharedSurvivesRestart(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("slow: restarts the broker; runs without -short")
	}
	const keys, per = 10, 20
	dir := t.TempDir()
	onDir := func(cfg *broker.Config) { cfg.DataDir = dir }
	s1 := brokertest.Start(t, onDir)
	c1 := brokertest.Connect(t, s1)
	brokertest.AddStream(t, c1, "KS", "ks.>")
	publishSessions(t, c1, "ks.chat", keys, per/2)

	rec := newKSRecorder(30)
	conn1 := brokertest.Connect(t, s1)
	a := startKSMember(t, conn1, "ks.chat", "g", "a", rec, client.WithAckWait(5*time.Second), client.WithMaxAckPending(200))
	rec.waitTotal(t, 30)
	a.kill(conn1) // dies holding a message and those forwarded behind it
	c1.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := s1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	s2 := brokertest.Start(t, onDir)
	c2 := brokertest.Connect(t, s2)
	sub, err := c2.SubscribeKeyShared(ctx, "ks.chat", "g", client.WithMember("b"))
	if err != nil {
		t.Fatal(err)
	}
	info, err := c2.KeySharedInfo(ctx, "KS", "g")
	if err != nil {
		t.Fatal(err)
	}
	if info.Key != "session" {
		t.Fatalf("the group resumed keyed by %q, want session", info.Key)
	}
	// Newer messages, deliverable at once, while the old ones in flight
	// wait for their ack wait.
	publishSessionsFrom(t, c2, "ks.chat", keys, per/2, per)
	rec.setLimit(keys * per)
	for rec.total() < keys*per {
		m := nextMsg(t, sub)
		var v ksMsg
		if err := json.Unmarshal(m.Data, &v); err != nil {
			t.Fatal(err)
		}
		if _, ok := rec.admit(ctx.Done(), v.K, ksSeen{i: v.I, member: "b", recv: time.Now(), numDelivered: m.NumDelivered}); !ok {
			t.Fatal(ctx.Err())
		}
		if err := m.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	rec.check(t, keys, per)
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
}
