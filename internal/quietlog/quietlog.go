// Package quietlog keeps a flood of refusals from flooding the log: a
// refusal is counted every time (by its caller's metric) and logged at
// most once a second per reason.
package quietlog

import (
	"sync"
	"time"
)

// Every is how often one reason is logged at most.
const Every = time.Second

// Gate says, per reason, whether a line may be logged now. The zero
// value is ready; safe for concurrent use.
type Gate struct {
	mu     sync.Mutex
	logged map[string]time.Time
}

// Open reports whether a line for reason may be logged now, and if so
// starts its quiet second. Reasons are a fixed set chosen by the
// caller, never a client's input, so the map stays small.
func (g *Gate) Open(reason string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if now.Sub(g.logged[reason]) < Every {
		return false
	}
	if g.logged == nil {
		g.logged = make(map[string]time.Time)
	}
	g.logged[reason] = now
	return true
}
