package broker_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// A node stopped gracefully after its cluster lost its majority (the second
// of three to stop) stops cleanly: what it tells JetStream on the way out
// (watchers and consumers it no longer needs) cannot be answered without a
// quorum, and an operator stopping the node must not read that as a failure.
func TestClusterStopWithoutQuorumIsClean(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3)
	c.Stop(0)
	s := c.Node(1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("second node's stop: %v", err)
	}
	t.Logf("second node stopped in %s", time.Since(start))
}

// Nodes that disagree on --sync are named: an fsync ack of a replicated
// stream rests on a quorum, which may be the interval node and one other.
func TestClusterNodesDisagreeingOnSyncAreNamed(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3, func(cfg *broker.Config) {
		if cfg.Name != "n2" {
			cfg.Sync = broker.SyncAlways
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := brokertest.Connect(t, c.Node(0))
	var st *semaq.ClusterStatus
	c.Eventually(30*time.Second, "every node in the status", func() error {
		var err error
		if st, err = cl.ClusterStatus(ctx); err != nil {
			return err
		}
		for _, n := range st.Nodes {
			if !n.Connected {
				return fmt.Errorf("node %s has not answered", n.Name)
			}
		}
		return nil
	})
	for _, n := range st.Nodes {
		want := broker.SyncAlways
		if n.Name == "n2" {
			want = broker.SyncInterval
		}
		if n.Sync != want {
			t.Fatalf("node %s: sync %q, want %q", n.Name, n.Sync, want)
		}
	}
	if len(st.Warnings) != 1 || !strings.Contains(st.Warnings[0], "interval on n2") || !strings.Contains(st.Warnings[0], "always on n1, n3") {
		t.Fatalf("warnings %q: want the disagreement named", st.Warnings)
	}
}
