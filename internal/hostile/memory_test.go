package hostile

import (
	"errors"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// memoryBallast keeps a test's process past a small max_memory.
var memoryBallast []byte

// TestMemoryBoundRefusesPublishes: past 90% of max_memory the ingress
// refuses a publish with 429 naming max_memory, stores nothing, and
// counts it; the node keeps answering its API.
func TestMemoryBoundRefusesPublishes(t *testing.T) {
	srv := brokertest.Start(t, func(cfg *broker.Config) { cfg.MaxMemory = broker.MinMaxMemory })
	c := brokertest.Connect(t, srv)
	brokertest.AddStream(t, c, "MEM", "mem.>")
	// The whole process is held against the node's bound: make it hold
	// well past it.
	memoryBallast = make([]byte, 4*broker.MinMaxMemory)
	for i := 0; i < len(memoryBallast); i += 4096 { // every page, so it is resident
		memoryBallast[i] = 1
	}
	t.Cleanup(func() { memoryBallast = nil; runtime.GC(); debug.FreeOSMemory() })
	// The guard samples every 100 ms: publishes until it has seen the
	// ballast are stored.
	var err error
	accepted := uint64(0)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if _, err = c.Publish(ctxT(t), "mem.x", []byte(`{}`)); err != nil {
			break
		}
		accepted++
		time.Sleep(10 * time.Millisecond) // polling a condition
	}
	if !errors.Is(err, semaq.ErrOverloaded) || !strings.Contains(err.Error(), "max_memory") {
		t.Fatalf("publish past the memory bound: %v, want 429 naming max_memory", err)
	}
	info, ierr := c.StreamInfo(ctxT(t), "MEM")
	if ierr != nil {
		t.Fatalf("the API past the memory bound: %v", ierr)
	}
	if info.State.Messages != accepted {
		t.Fatalf("stream MEM holds %d messages, want the %d accepted: none past the bound", info.State.Messages, accepted)
	}
}
