package broker_test

import (
	"context"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/brokertest"
)

// A node stopped gracefully after its cluster lost its majority (the second
// of three to stop) stops cleanly: what it tells JetStream on the way out
// (watchers and consumers it no longer needs) cannot be answered without a
// quorum, and an operator stopping the node must not read that as a failure.
func TestClusterStopWithoutQuorumIsClean(t *testing.T) {
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
