package subsystem

import (
	"context"
	"runtime/pprof"
	"sync"
	"sync/atomic"
)

// Gate is how a node starts goroutines: every one through Go, counted,
// named for profiles (the pprof label semaq.goroutine is its path, e.g.
// "node/cluster-sync/apply") and refused once the gate is closing, so
// shutdown knows what it waits for and nothing starts behind it.
//
// A subsystem gets a child gate (Child) and closes it in its Close: the
// child's goroutines are also the parent's, so closing the node's gate
// waits for every goroutine of every subsystem. The zero Gate is not
// usable; make one with NewGate.
type Gate struct {
	path   string
	parent *Gate
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	closing bool
	wg      sync.WaitGroup
	running atomic.Int64
}

// NewGate makes a root gate named name.
func NewGate(name string) *Gate {
	ctx, cancel := context.WithCancel(context.Background())
	return &Gate{path: name, ctx: ctx, cancel: cancel}
}

// Child is a gate for a part of g: closed when g closes, and its
// goroutines are counted by g too.
func (g *Gate) Child(name string) *Gate {
	ctx, cancel := context.WithCancel(g.ctx)
	return &Gate{path: g.path + "/" + name, parent: g, ctx: ctx, cancel: cancel}
}

// Go runs f in a goroutine labelled name, with a context cancelled when
// the gate closes. It reports false, and runs nothing, once the gate (or
// one of its parents) is closing.
func (g *Gate) Go(name string, f func(ctx context.Context)) bool {
	if !g.add() {
		return false
	}
	go func() {
		defer g.done()
		pprof.Do(g.ctx, pprof.Labels("semaq.goroutine", g.path+"/"+name), f)
	}()
	return true
}

// add counts one goroutine in g and its parents, unless one is closing.
func (g *Gate) add() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing || g.ctx.Err() != nil {
		return false
	}
	if g.parent != nil && !g.parent.add() {
		return false
	}
	g.wg.Add(1)
	g.running.Add(1)
	return true
}

func (g *Gate) done() {
	for p := g; p != nil; p = p.parent {
		p.running.Add(-1)
		p.wg.Done()
	}
}

// Context is cancelled when the gate closes.
func (g *Gate) Context() context.Context { return g.ctx }

// Running is how many goroutines of g (its children's included) run now.
func (g *Gate) Running() int { return int(g.running.Load()) }

// Close refuses new goroutines, cancels the running ones' context and
// waits for them, or for ctx.
func (g *Gate) Close(ctx context.Context) error {
	g.mu.Lock()
	g.closing = true
	g.mu.Unlock()
	g.cancel()
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
