//go:build unix

package proctest

import (
	"testing"
	"time"
)

// The three nodes are restarted one at a time (SIGTERM, exit, start, the
// cluster whole again before the next) while a stock JetStream client that
// knows every node publishes with Nats-Msg-Id: every acknowledged message
// is stored exactly once on every node.
func TestProcessRollingRestart(t *testing.T) {
	needProcesses(t)
	c := startCluster(t, 3)
	addStream(t, c)
	const total = 1 << 30 // until stopped
	p := publish(t, c.allURLs(0), "ai", total)
	p.waitAcks(t, 100, 60*time.Second)
	began := time.Now()
	for i, n := range c.nodes {
		before := p.count()
		n.stop(t, 60*time.Second)
		c.restart(i)
		// Under load: the publisher went on through each restart.
		p.waitAcks(t, before+100, 60*time.Second)
		t.Logf("restarted %s: %d acknowledged publishes meanwhile", n.name, p.count()-before)
	}
	p.finish()
	t.Logf("longest wait for an acknowledged publish during the rolling restart: %s", p.longestGap(began).Round(time.Millisecond))
	c.waitWhole(nil)
	// Through every node, then the copy of the node restarted last.
	checkStream(t, c, len(c.nodes)-1, "AI", "ai.>", p.count())
}
