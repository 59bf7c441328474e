package broker

import (
	"strings"
	"testing"
	"time"
)

// A node says at start what an ack means under its sync mode, with the
// fsync period it runs with.
func TestAckMeaning(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want []string
	}{
		{Config{Sync: SyncInterval}, []string{"the node's memory", "fsynced within 2m0s", "not a power loss", "--sync always"}},
		{Config{Sync: SyncInterval, SyncEvery: 10 * time.Second, ClusterName: "c"}, []string{"a quorum of its replicas'", "within 10s"}},
		{Config{Sync: SyncAlways}, []string{"fsynced to disk first", "survives a crash or power loss"}},
	} {
		line := ackMeaning(&c.cfg)
		for _, w := range c.want {
			if !strings.Contains(line, w) {
				t.Errorf("sync %s: %q lacks %q", c.cfg.Sync, line, w)
			}
		}
	}
}
