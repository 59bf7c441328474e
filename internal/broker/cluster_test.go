package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// ownStreams are SemaQ's own buckets and streams a node without auth makes.
var ownStreams = []string{"KV_SQ_SCHEMAS", "KV_SQ_ROUTES", "KV_SQ_AGENTS", semaq.DLQStream, semaq.TokenStream}

// replicasOf is each stream's replicas as JetStream has them.
func replicasOf(ctx context.Context, js jetstream.JetStream, names []string) (map[string]int, error) {
	out := map[string]int{}
	for _, name := range names {
		st, err := js.Stream(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = st.CachedInfo().Config.Replicas
	}
	return out, nil
}

// allReplicas is nil when every stream has want replicas.
func allReplicas(ctx context.Context, js jetstream.JetStream, names []string, want int) error {
	got, err := replicasOf(ctx, js, names)
	if err != nil {
		return err
	}
	for name, r := range got {
		if r != want {
			return fmt.Errorf("%s has %d replicas, want %d (all: %v)", name, r, want, got)
		}
	}
	return nil
}

// A message published through the ingress of any node is stored once in a
// replicated stream and read through any other node; stream info names the
// leader and the followers.
func TestClusterIngressEveryNode(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c1 := brokertest.Connect(t, c.Node(0))
	if _, err := c1.AddStream(ctx, semaq.StreamConfig{Name: "AI", Subjects: []string{"ai.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	for i, s := range c.Nodes() {
		cl := brokertest.Connect(t, s)
		// A node learns of a stream made through another from JetStream's
		// advisory; until then its ingress refuses the subject.
		c.Eventually(30*time.Second, "node to serve AI", func() error {
			_, err := cl.Publish(ctx, fmt.Sprintf("ai.n%d", i+1), fmt.Appendf(nil, `{"from":%d}`, i+1))
			return err
		})
	}
	for i, s := range c.Nodes() {
		st, err := internalJS(t, s).Stream(ctx, "AI")
		if err != nil {
			t.Fatal(err)
		}
		for j := range 3 {
			m, err := st.GetLastMsgForSubject(ctx, fmt.Sprintf("ai.n%d", j+1))
			if err != nil {
				t.Fatalf("node %d reads ai.n%d: %v", i+1, j+1, err)
			}
			if want := fmt.Sprintf(`{"from":%d}`, j+1); string(m.Data) != want {
				t.Fatalf("node %d reads %q, want %q", i+1, m.Data, want)
			}
		}
		if n := st.CachedInfo().State.Msgs; n != 3 {
			t.Fatalf("node %d sees %d messages, want 3", i+1, n)
		}
		info, err := brokertest.Connect(t, s).StreamInfo(ctx, "AI")
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.Replicas != 3 || info.Cluster == nil || c.Index(info.Cluster.Leader) < 0 || len(info.Cluster.Followers) != 2 {
			t.Fatalf("stream info through node %d: replicas %d, cluster %+v; want 3 replicas, a leader among the nodes and 2 followers",
				i+1, info.Config.Replicas, info.Cluster)
		}
		for _, f := range info.Cluster.Followers {
			if f.Name == info.Cluster.Leader || c.Index(f.Name) < 0 {
				t.Fatalf("follower %q: not another node of the cluster (leader %s)", f.Name, info.Cluster.Leader)
			}
		}
	}
}

// SemaQ's own buckets and streams are R3 on a 3-node cluster;
// ones lowered to R1 (as made before the cluster grew) are raised again
// when a node starts.
func TestClusterOwnStreamsR3(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	js := internalJS(t, c.Node(0))
	c.Eventually(30*time.Second, "SemaQ's streams to be R3", func() error { return allReplicas(ctx, js, ownStreams, 3) })

	// As a cluster that grew from one node has them.
	for _, name := range ownStreams {
		st, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		cfg := st.CachedInfo().Config
		cfg.Replicas = 1
		lowered, err := js.UpdateStream(ctx, cfg)
		if err != nil {
			t.Fatalf("lowering %s: %v", name, err)
		}
		// Checked on the update's answer: the meta leader's periodic
		// check (replicasRecheck) may raise a stream again at any time.
		if r := lowered.CachedInfo().Config.Replicas; r != 1 {
			t.Fatalf("%s lowered to %d replicas, want 1", name, r)
		}
	}
	c.Stop(2)
	c.Restart(2)
	c.Eventually(30*time.Second, "SemaQ's streams raised to R3", func() error { return allReplicas(ctx, js, ownStreams, 3) })
}

// An R3 stream keeps taking publishes from a stock JetStream client that
// knows every node when its leader's node shuts down: every acknowledged
// message is in the stream exactly once. Likewise on --sync always nodes,
// where every ack waited for fsyncs on a quorum (durability.go).
func TestClusterStreamSurvivesLeaderLoss(t *testing.T) {
	t.Parallel()
	for _, sync := range []string{broker.SyncInterval, broker.SyncAlways} {
		t.Run("sync="+sync, func(t *testing.T) {
			streamSurvivesLeaderLoss(t, func(cfg *broker.Config) { cfg.Sync = sync })
		})
	}
}

func streamSurvivesLeaderLoss(t *testing.T, opts ...func(*broker.Config)) {
	c := brokertest.StartCluster(t, 3, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	info, err := brokertest.Connect(t, c.Node(0)).AddStream(ctx, semaq.StreamConfig{Name: "AI", Subjects: []string{"ai.>"}, Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	leader := c.Index(info.Cluster.Leader)
	if leader < 0 || leader != c.StreamLeader("AI") {
		t.Fatalf("stream leader %q is not node %d, the one leading AI", info.Cluster.Leader, c.StreamLeader("AI"))
	}
	// Connected first to the leader's node, so that the shutdown moves it.
	urls := c.Node(leader).ClientURL() + "," + c.URLs()
	nc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const total, stopAt = 200, 60
	acked := make(chan time.Time, total)
	pubErr := make(chan error, 1)
	go func() {
		for i := range total {
			id := fmt.Sprintf("m-%d", i)
			for {
				// Every retry carries the same Nats-Msg-Id: a message
				// stored whose ack was lost is not stored again.
				pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
				_, err := js.Publish(pctx, fmt.Sprintf("ai.%d", i), []byte(id), jetstream.WithMsgID(id))
				pcancel()
				if err == nil {
					break
				}
				if ctx.Err() != nil {
					pubErr <- fmt.Errorf("message %d never acknowledged: %w", i, err)
					return
				}
			}
			acked <- time.Now()
		}
		pubErr <- nil
	}()
	for range stopAt {
		select {
		case <-acked:
		case err := <-pubErr:
			t.Fatal(err)
		}
	}
	stopped := time.Now()
	c.Stop(leader)
	if err := <-pubErr; err != nil {
		t.Fatal(err)
	}
	// Reported, not asserted: the longest time without an acknowledged
	// publish from the shutdown's start on.
	gap, last := time.Duration(0), stopped
	for len(acked) > 0 {
		if at := <-acked; at.After(stopped) {
			gap, last = max(gap, at.Sub(last)), at
		}
	}
	t.Logf("longest wait for an acknowledged publish after the leader's node began to shut down: %s", gap.Round(time.Millisecond))
	// Every message, once, on each surviving node.
	for _, s := range c.Nodes() {
		ojs := internalJS(t, s)
		var st jetstream.Stream
		c.Eventually(30*time.Second, "the stream to report every message", func() error {
			st, err = ojs.Stream(ctx, "AI")
			if err != nil {
				return err
			}
			if n := st.CachedInfo().State.Msgs; n != total {
				return fmt.Errorf("%d messages", n)
			}
			return nil
		})
		seen := map[string]int{}
		for seq := uint64(1); seq <= st.CachedInfo().State.LastSeq; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if err != nil {
				t.Fatalf("reading %d through %s: %v", seq, s.NATSServer().Name(), err)
			}
			seen[string(m.Data)]++
		}
		for i := range total {
			if n := seen[fmt.Sprintf("m-%d", i)]; n != 1 {
				t.Fatalf("through %s: message m-%d is stored %d times", s.NATSServer().Name(), i, n)
			}
		}
	}
	after, err := brokertest.Connect(t, c.Nodes()[0]).StreamInfo(ctx, "AI")
	if err != nil {
		t.Fatal(err)
	}
	if after.Cluster == nil || after.Cluster.Leader == info.Cluster.Leader || after.Cluster.Leader == "" {
		t.Fatalf("leader after %s stopped: %+v", info.Cluster.Leader, after.Cluster)
	}
}

// cluster status names every node, the meta leader, each stream's leader
// and where each queue is dispatched.
func TestClusterStatus(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := brokertest.Connect(t, c.Node(1))
	if _, err := cl.AddStream(ctx, semaq.StreamConfig{Name: "AI", Subjects: []string{"ai.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.AddQueue(ctx, semaq.QueueConfig{Name: "JOBS", Subjects: []string{"jobs.>"}}); err != nil {
		t.Fatal(err)
	}
	// A client without credentials listening on every inbox: the nodes'
	// reports to each other travel among the broker's own inboxes, which
	// no client may read (or answer in a node's name).
	spy, err := nats.Connect(c.Node(0).ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Close()
	spied := make(chan string, 64)
	for _, subj := range []string{"_INBOX.>", "_SQ_NODE.>"} {
		if _, err := spy.Subscribe(subj, func(m *nats.Msg) {
			var fields map[string]json.RawMessage
			if m.Subject == "_INBOX.marker" {
				spied <- "marker"
			} else if json.Unmarshal(m.Data, &fields) == nil && fields["nats_version"] != nil {
				spied <- "node report on " + m.Subject
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	var st *semaq.ClusterStatus
	c.Eventually(30*time.Second, "a complete status", func() error {
		var err error
		if st, err = cl.ClusterStatus(ctx); err != nil {
			return err
		}
		if len(st.Queues) != 1 || st.Queues[0].Node == "" {
			return fmt.Errorf("queues %+v: no dispatcher yet", st.Queues)
		}
		// A node's own view of the meta group flickers as heartbeats come
		// and go; a settled cluster shows every node current.
		for _, n := range st.Nodes {
			if !n.JetStreamCurrent || n.Meta == nil || !n.Meta.Current {
				return fmt.Errorf("node %s not current yet (meta %+v)", n.Name, n.Meta)
			}
		}
		return nil
	})
	// n1's report to the asking node went out on n1, where the spy is,
	// before the status returned, so before this marker.
	if err := spy.Publish("_INBOX.marker", nil); err != nil {
		t.Fatal(err)
	}
	if got := <-spied; got != "marker" {
		t.Fatalf("a client without credentials read %s", got)
	}
	if st.Name != brokertest.ClusterName || st.Replicas != 3 || c.Index(st.AnsweredBy) < 0 {
		t.Fatalf("status %s answered by %q, replicas %d", st.Name, st.AnsweredBy, st.Replicas)
	}
	if want := c.Node(c.MetaLeader()).NATSServer().Name(); st.MetaLeader != want {
		t.Fatalf("meta leader %q, want %q", st.MetaLeader, want)
	}
	if len(st.Nodes) != 3 {
		t.Fatalf("%d nodes: %+v", len(st.Nodes), st.Nodes)
	}
	for i, n := range st.Nodes {
		if n.Name != fmt.Sprintf("n%d", i+1) || !n.Connected || n.Version != broker.Version || n.NATSVersion == "" ||
			!n.JetStreamCurrent || len(n.Routes) != 2 || n.Meta == nil || !n.Meta.Current || n.Sync != broker.SyncInterval {
			t.Fatalf("node %d: %+v (meta %+v)", i+1, n, n.Meta)
		}
	}
	if len(st.Warnings) != 0 {
		t.Fatalf("warnings on a healthy cluster: %q", st.Warnings)
	}
	byName := map[string]semaq.StreamClusterStatus{}
	for _, s := range st.Streams {
		byName[s.Stream] = s
	}
	for _, name := range append([]string{"AI", "JOBS"}, ownStreams...) {
		s, ok := byName[name]
		want := 3 // a queue made without replicas too (docs/cluster.md)
		if !ok || s.Replicas != want || c.Index(s.Leader) < 0 || len(s.Followers) != want-1 || s.Own != slices.Contains(ownStreams, name) {
			t.Fatalf("stream %s: %+v (listed %v)", name, s, ok)
		}
	}
	// The status reports where dispatch runs; that it runs on the stream's
	// leader is the dispatcher's to keep (streams/queue.go).
	if q := st.Queues[0]; q.Queue != "JOBS" || c.Index(q.Node) < 0 || q.StreamLeader != byName["JOBS"].Leader {
		t.Fatalf("queue %+v: want a dispatching node and the stream leader %s", q, byName["JOBS"].Leader)
	}

	// With a node down the status says so, from another node (the
	// client's is n2).
	down := 2
	c.Stop(down)
	c.Eventually(30*time.Second, "the stopped node shown", func() error {
		st, err := cl.ClusterStatus(ctx)
		if err != nil {
			return err
		}
		for _, n := range st.Nodes {
			if n.Name == fmt.Sprintf("n%d", down+1) {
				if n.Connected || n.Version != "" {
					return fmt.Errorf("stopped node shown connected: %+v", n)
				}
				return nil
			}
		}
		return fmt.Errorf("stopped node n%d not listed: %+v", down+1, st.Nodes)
	})
}

// A single node answers cluster status about itself.
func TestClusterStatusSingleNode(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	brokertest.AddStream(t, c, "AI", "ai.>")
	st, err := c.ClusterStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Name != "" || st.Replicas != 1 || len(st.Nodes) != 1 || !st.Nodes[0].Connected || st.Nodes[0].Name != st.AnsweredBy {
		t.Fatalf("status: %+v", st)
	}
	info, err := c.StreamInfo(ctx, "AI")
	if err != nil {
		t.Fatal(err)
	}
	if info.Cluster != nil {
		t.Fatalf("stream info of a single node carries cluster %+v", info.Cluster)
	}
}
