package plugin

import (
	"context"
	"sync"
	"sync/atomic"
)

// Slot holds the current version of a named plugin, so it can be replaced while calls run: a caller takes the
// current one with Get and gives it back with release; Swap makes later Gets return the new one and then closes
// the old once every caller that took it has given it back. No call fails because of a swap. The zero Slot is
// empty and ready; a Slot is safe for concurrent use.
type Slot struct {
	mu  sync.RWMutex
	cur *held
}

// held is one version in a Slot, with the count of callers holding it.
type held struct {
	p       *Plugin
	refs    atomic.Int64
	retired atomic.Bool
	done    chan struct{} // closed when retired and no longer held
	once    sync.Once
}

func (h *held) release() {
	if h.refs.Add(-1) == 0 && h.retired.Load() {
		h.once.Do(func() { close(h.done) })
	}
}

// Get returns the current plugin, nil if the slot is empty, and the function that gives it back; release must
// be called once, when the caller's calls on it are done.
func (s *Slot) Get() (p *Plugin, release func()) {
	s.mu.RLock()
	h := s.cur
	if h == nil {
		s.mu.RUnlock()
		return nil, func() {}
	}
	h.refs.Add(1)
	s.mu.RUnlock()
	var once sync.Once
	return h.p, func() { once.Do(h.release) }
}

// Swap puts p in the slot (nil empties it) and drains the plugin it held: it waits, within ctx, until every
// caller holding the old one has released it, then closes it (Plugin.Close with ctx). It returns the old one's
// Close error, or ctx's if the callers did not let go in time; the old plugin is closed either way.
func (s *Slot) Swap(ctx context.Context, p *Plugin) error {
	var h *held
	if p != nil {
		h = &held{p: p, done: make(chan struct{})}
	}
	s.mu.Lock()
	old := s.cur
	s.cur = h
	s.mu.Unlock()
	if old == nil || old.p == p {
		return nil
	}
	old.retired.Store(true)
	if old.refs.Load() == 0 {
		old.once.Do(func() { close(old.done) })
	}
	select {
	case <-old.done:
		return old.p.Close(ctx)
	case <-ctx.Done():
		// Close stops what still runs; its error names ctx's.
		return old.p.Close(ctx)
	}
}

// Close empties the slot, draining the plugin it held (Swap with nil).
func (s *Slot) Close(ctx context.Context) error { return s.Swap(ctx, nil) }
