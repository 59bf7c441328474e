//go:build unix

package proctest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/semaq/semaq/semaq"
)

// addStream makes the R3 stream AI on ai.> through node 0 and returns its
// leader.
func addStream(t *testing.T, c *cluster) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.connect(0).AddStream(ctx, semaq.StreamConfig{Name: "AI", Subjects: []string{"ai.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	return c.streamLeader("AI")
}

// The node leading an R3 stream is killed with SIGKILL while a stock
// JetStream client that knows every node publishes with Nats-Msg-Id, and
// started again: every acknowledged message is stored exactly once on
// every node, and the restarted node catches up.
func TestProcessStreamLeaderKill(t *testing.T) {
	needProcesses(t)
	const total, killAt = 1500, 300
	c := startCluster(t, 3)
	leader := addStream(t, c)
	// Connected first to the leader's node, so the kill also cuts the
	// publisher's connection.
	p := publish(t, c.allURLs(leader), "ai", total)
	p.waitAcks(t, killAt, 60*time.Second)

	killed := time.Now()
	c.nodes[leader].kill(t)
	t.Logf("killed %s, the leader of AI, after %d acknowledged publishes", c.nodes[leader].name, p.count())
	var back time.Time
	eventually(t, readyTimeout, "a publish acknowledged after the kill", func() error {
		if back = p.firstAckAfter(killed); back.IsZero() {
			return fmt.Errorf("none yet (%d acknowledged)", p.count())
		}
		return nil
	})
	// Reported, not asserted (docs/cluster.md, Failure tests).
	t.Logf("unavailability window: %s from the kill to the first acknowledged publish after it",
		back.Sub(killed).Round(time.Millisecond))

	// Started again at once, as a supervisor does: while the two others
	// elect new leaders for the streams it led.
	c.nodes[leader].start(t)
	restarted := time.Now()
	c.nodes[leader].waitStarted(t, readyTimeout)
	t.Logf("%s ready %s after its start", c.nodes[leader].name, time.Since(restarted).Round(time.Millisecond))
	p.waitDone(t, total, 3*time.Minute)
	t.Logf("longest wait for an acknowledged publish from the kill on: %s", p.longestGap(killed).Round(time.Millisecond))
	// Every follower current with no lag: the restarted node caught up.
	c.waitWhole(func(st *semaq.ClusterStatus) error {
		for _, s := range st.Streams {
			if s.Stream == "AI" {
				return nil
			}
		}
		return fmt.Errorf("AI not listed")
	})
	// Through every node, then the restarted node's own copy.
	checkStream(t, c, leader, "AI", "ai.>", total)
}
