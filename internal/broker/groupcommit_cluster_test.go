package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

func syncAlways(cfg *broker.Config) { cfg.Sync = broker.SyncAlways }

// On a cluster started with --sync always, an fsync stream with 1 or 3
// replicas acknowledges a publish through any node, and stores it once; the
// node's JetStream fsyncs every write (sync_always), which is what the ack
// of a replicated stream waits for on a quorum. (A committer on the node the
// publisher reached used to fsync that node's files: an R1 stream held by
// another node failed every such publish with ErrCommit.)
func TestClusterFsyncAckedThroughEveryNode(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3, syncAlways)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for i, s := range c.Nodes() {
		if cfg := s.NATSServer().JetStreamConfig(); cfg == nil || !cfg.SyncAlways {
			t.Fatalf("node n%d: JetStream runs without sync_always", i+1)
		}
	}
	c1 := brokertest.Connect(t, c.Node(0))
	for _, r := range []int{1, 3} {
		name := fmt.Sprintf("R%d", r)
		info, err := c1.AddStream(ctx, semaq.StreamConfig{Name: name, Subjects: []string{strings.ToLower(name) + ".>"}, Replicas: r, Durability: broker.DurabilityFsync})
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.Durability != broker.DurabilityFsync || info.Sync != broker.SyncAlways {
			t.Fatalf("%s: durability %q, sync %q; want fsync, always", name, info.Config.Durability, info.Sync)
		}
		for i, s := range c.Nodes() {
			cl := brokertest.Connect(t, s)
			subject := fmt.Sprintf("%s.n%d", strings.ToLower(name), i+1)
			// Until the node has learnt of the stream nobody answers on
			// the subject; any other outcome is the publish's.
			var pubErr error
			c.Eventually(30*time.Second, "node to serve "+name, func() error {
				_, pubErr = cl.Publish(ctx, subject, []byte(`{}`))
				if errors.Is(pubErr, nats.ErrNoResponders) {
					return pubErr
				}
				return nil
			})
			if pubErr != nil {
				t.Fatalf("%s: publish through n%d: %v", name, i+1, pubErr)
			}
		}
		st, err := internalJS(t, c.Node(1)).Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if n := st.CachedInfo().State.Msgs; n != 3 {
			t.Fatalf("%s holds %d messages, want 3 (one through each node)", name, n)
		}
	}
	// A durability the nodes do not give is refused, naming why.
	_, err := c1.AddStream(ctx, semaq.StreamConfig{Name: "LAZY", Subjects: []string{"lazy.>"}, Replicas: 3, Durability: broker.DurabilityInterval})
	if err == nil || !strings.Contains(err.Error(), "--sync always") {
		t.Fatalf("interval stream on a --sync always cluster: %v, want a refusal naming --sync always", err)
	}
}

// On a cluster of --sync interval nodes no stream can promise fsync: the
// request is refused with what to change, and nothing is created.
func TestClusterFsyncNeedsSyncAlways(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c1 := brokertest.Connect(t, c.Node(0))
	for _, r := range []int{1, 3} {
		_, err := c1.AddStream(ctx, semaq.StreamConfig{Name: "DURABLE", Subjects: []string{"durable.>"}, Replicas: r, Durability: broker.DurabilityFsync})
		if err == nil || !strings.Contains(err.Error(), "--sync always") {
			t.Fatalf("R%d fsync stream on an interval cluster: %v, want a refusal naming --sync always", r, err)
		}
	}
	if _, err := internalJS(t, c.Node(0)).Stream(ctx, "DURABLE"); err == nil {
		t.Fatal("the refused stream exists")
	}
	// The nodes' own durability is still there for the asking.
	if _, err := c1.AddStream(ctx, semaq.StreamConfig{Name: "EVENTS", Subjects: []string{"events.>"}, Replicas: 3, Durability: broker.DurabilityInterval}); err != nil {
		t.Fatal(err)
	}
}
