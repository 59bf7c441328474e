package broker

import (
	"math"
	"runtime/debug"
	"testing"
)

// max_memory resolves to the configured bytes, to none at -1, and by
// default to GOMEMLIMIT when set, else a share of what the node may have.
func TestResolveMaxMemory(t *testing.T) {
	if got, from := ResolveMaxMemory(1 << 30); got != 1<<30 || from != "max_memory" {
		t.Fatalf("configured: %d from %q", got, from)
	}
	if got, _ := ResolveMaxMemory(-1); got != 0 {
		t.Fatalf("-1: %d, want no bound", got)
	}
	prev := debug.SetMemoryLimit(-1)
	if prev == math.MaxInt64 {
		total, _ := systemMemory()
		got, from := ResolveMaxMemory(0)
		if total > 0 && (got != int64(float64(total)*memoryDefaultShare) || from == "") {
			t.Fatalf("default: %d from %q, want %.0f%% of %d", got, from, memoryDefaultShare*100, total)
		}
	}
	debug.SetMemoryLimit(2 << 30)
	defer debug.SetMemoryLimit(prev)
	if got, from := ResolveMaxMemory(0); got != 2<<30 || from != "GOMEMLIMIT" {
		t.Fatalf("with a runtime limit: %d from %q, want GOMEMLIMIT's", got, from)
	}
}

// A guard refuses past its high water and not below it.
func TestMemoryGuardHighWater(t *testing.T) {
	g := &memoryGuard{limit: MinMaxMemory, high: MinMaxMemory * 9 / 10} // not sampling
	g.inUse.Store(g.high + 1)
	g.over.Store(true)
	if e := g.refusal(); e == nil || e.Code != 429 {
		t.Fatalf("past the high water: %v, want 429", e)
	}
	g.over.Store(false)
	if e := g.refusal(); e != nil {
		t.Fatalf("below the high water: %v", e)
	}
	var none *memoryGuard
	if none.refusal() != nil {
		t.Fatal("no guard refused")
	}
	cfg := DefaultConfig()
	for _, bad := range []int64{-2, 1, MinMaxMemory - 1} {
		cfg.MaxMemory = bad
		if cfg.Validate() == nil {
			t.Fatalf("max_memory %d accepted", bad)
		}
	}
}
