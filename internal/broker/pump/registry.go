package pump

import (
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/semaq"
)

// Leased is what a Registry holds: something a client keeps alive with
// pings.
type Leased interface {
	comparable
	Lease() *Lease
}

// Registry is the set of leased things one node runs (filtered
// subscriptions, key-shared members), by id: <node>.<n>. Its mutex is a
// leaf: a caller may hold its own lock while it calls in, never the other
// way round. Safe for concurrent use.
type Registry[T Leased] struct {
	gone   *semaq.APIError // the error of a request for something not held
	what   string          // its description: a format taking the subject
	node   string
	seq    atomic.Uint64
	mu     sync.Mutex
	items  map[string]T
	closed bool
	reap   *reaper
}

// NewRegistry returns an empty registry under a new node token. A request
// for something it does not hold is answered with gone, described by what
// (a format taking the request's subject).
func NewRegistry[T Leased](gone *semaq.APIError, what string) *Registry[T] {
	return &Registry[T]{gone: gone, what: what, node: nuid.Next(), items: make(map[string]T)}
}

// Node is the node token in the registry's ids: subscribe on
// <family>.<node>.* to get the requests for what this node runs.
func (r *Registry[T]) Node() string { return r.node }

// Add gives x a new id, holds it under that id and renews its lease; ok
// is false, and x not held, once the registry is closed.
func (r *Registry[T]) Add(x T) (id string, ok bool) {
	id = r.node + "." + strconv.FormatUint(r.seq.Add(1), 10)
	x.Lease().Renew()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return "", false
	}
	r.items[id] = x
	return id, true
}

// Remove forgets id if x is what it holds, and reports whether it was.
func (r *Registry[T]) Remove(id string, x T) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if have, ok := r.items[id]; !ok || have != x {
		return false
	}
	delete(r.items, id)
	return true
}

// Clear forgets everything.
func (r *Registry[T]) Clear() {
	r.mu.Lock()
	clear(r.items)
	r.mu.Unlock()
}

// Len is the number of things held.
func (r *Registry[T]) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.items)
}

// All returns what is held now.
func (r *Registry[T]) All() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]T, 0, len(r.items))
	for _, x := range r.items {
		out = append(out, x)
	}
	return out
}

// expired returns what was not pinged since cutoff.
func (r *Registry[T]) expired(cutoff time.Time) []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	var dead []T
	for _, x := range r.items {
		if x.Lease().Before(cutoff) {
			dead = append(dead, x)
		}
	}
	return dead
}

// StartReaper starts the reap loop: every period, end is called (with no
// registry lock held) on each thing whose client stopped pinging. Close
// ends the loop.
func (r *Registry[T]) StartReaper(gate *subsystem.Gate, period time.Duration, end func(T)) {
	r.reap = startReaper(gate, period, r.expired, end)
}

// Close refuses Add from now on, ends the reap loop, if started, and
// waits for it. It reports whether this call closed the registry: only
// the first does. What it holds stays, for the owner to end.
func (r *Registry[T]) Close() bool {
	r.mu.Lock()
	first := !r.closed
	r.closed = true
	r.mu.Unlock()
	if r.reap != nil {
		r.reap.stop()
	}
	return first
}

// Ping serves PING on <family>.<node>.<n>: it renews the lease of the
// thing the subject names and answers with its stats.
func (r *Registry[T]) Ping(log *slog.Logger, stats func(T) any) nats.MsgHandler {
	return r.Handler(log, func(x T) any {
		x.Lease().Renew()
		return stats(x)
	})
}

// Handler serves requests on <family>.<node>.<n> (STOP, LEAVE): it finds
// the thing the subject names and answers with what do returns, or with
// the registry's gone error when it does not hold it.
func (r *Registry[T]) Handler(log *slog.Logger, do func(T) any) nats.MsgHandler {
	return func(m *nats.Msg) {
		id := r.node + "." + api.LastToken(m.Subject)
		r.mu.Lock()
		x, ok := r.items[id]
		r.mu.Unlock()
		if !ok {
			api.ReplyErr(log, m, semaq.NewAPIError(r.gone, r.what, m.Subject))
			return
		}
		api.ReplyJSON(log, m, do(x))
	}
}
