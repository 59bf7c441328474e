package httpauth

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/semaq/semaq/client"
)

// Pool defaults (docs/security.md, bounds).
const (
	DefaultMaxConns    = 256
	DefaultIdleTimeout = 5 * time.Minute
)

// ErrPoolFull is Get's error when every pooled connection is in use.
var ErrPoolFull = errors.New("httpauth: every connection of the HTTP door's key pool is in use")

// ConnectFunc opens a broker connection authenticated with key.
type ConnectFunc func(ctx context.Context, key string) (*client.Client, error)

// Pool holds at most Max broker connections, one per key ID, each
// authenticated with its key. A connection in use (Get without its
// release) is never closed by the pool; an idle one is closed after
// Idle, or first when room is needed (least recently used). A
// connection the broker closed (the key was revoked) is dropped on the
// next Get. Safe for concurrent use.
type Pool struct {
	connect ConnectFunc
	max     int
	idle    time.Duration

	mu     sync.Mutex
	conns  map[string]*pooled // key ID → connection
	closed bool
	stop   chan struct{}
	done   chan struct{}
}

type pooled struct {
	c    *client.Client
	refs int
	last time.Time // when refs last dropped to 0
	// ready is closed once c is connected (or failed, err set).
	ready chan struct{}
	err   error
}

// NewPool makes a pool; max <= 0 means DefaultMaxConns, idle <= 0
// DefaultIdleTimeout. Close it to stop its reaper and close everything.
func NewPool(connect ConnectFunc, max int, idle time.Duration) *Pool {
	if max <= 0 {
		max = DefaultMaxConns
	}
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	p := &Pool{connect: connect, max: max, idle: idle, conns: map[string]*pooled{},
		stop: make(chan struct{}), done: make(chan struct{})}
	go p.reap()
	return p
}

// Get returns the connection of key (whose ID is id), connecting it when
// the pool has none, and a release func the caller must call once done
// with it. The caller has already authenticated key.
func (p *Pool) Get(ctx context.Context, id, key string) (*client.Client, func(), error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, nil, errors.New("httpauth: pool closed")
	}
	e := p.conns[id]
	if e != nil && e.c != nil && e.c.Conn().IsClosed() {
		// Revoked (the broker closed it) or failed: forget it.
		delete(p.conns, id)
		e = nil
	}
	if e == nil {
		var evicted *client.Client
		if len(p.conns) >= p.max {
			if evicted = p.evictLocked(); evicted == nil {
				p.mu.Unlock()
				return nil, nil, ErrPoolFull
			}
		}
		e = &pooled{ready: make(chan struct{})}
		p.conns[id] = e
		e.refs++
		p.mu.Unlock()
		if evicted != nil {
			evicted.Close()
		}
		c, err := p.connect(ctx, key)
		p.mu.Lock()
		if err == nil && p.closed {
			c.Close()
			c, err = nil, errors.New("httpauth: pool closed")
		}
		e.c, e.err = c, err
		close(e.ready)
		if err != nil {
			e.refs--
			if p.conns[id] == e {
				delete(p.conns, id)
			}
			p.mu.Unlock()
			return nil, nil, err
		}
		p.mu.Unlock()
		return c, p.releaser(e), nil
	}
	e.refs++
	p.mu.Unlock()
	select {
	case <-e.ready:
	case <-ctx.Done():
		p.releaser(e)()
		return nil, nil, ctx.Err()
	}
	if e.err != nil {
		p.releaser(e)()
		return nil, nil, e.err
	}
	return e.c, p.releaser(e), nil
}

func (p *Pool) releaser(e *pooled) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			p.mu.Lock()
			e.refs--
			if e.refs == 0 {
				e.last = time.Now()
			}
			p.mu.Unlock()
		})
	}
}

// evictLocked removes the least recently used idle connection and returns
// it for the caller to close; nil when every one is in use.
func (p *Pool) evictLocked() *client.Client {
	var oldID string
	var old *pooled
	for id, e := range p.conns {
		if e.refs == 0 && e.c != nil && (old == nil || e.last.Before(old.last)) {
			oldID, old = id, e
		}
	}
	if old == nil {
		return nil
	}
	delete(p.conns, oldID)
	return old.c
}

// Len is how many connections the pool holds.
func (p *Pool) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// reap closes connections idle for longer than p.idle.
func (p *Pool) reap() {
	defer close(p.done)
	t := time.NewTicker(max(p.idle/4, time.Second))
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case now := <-t.C:
			var idle []*client.Client
			p.mu.Lock()
			for id, e := range p.conns {
				if e.refs == 0 && e.c != nil && (now.Sub(e.last) > p.idle || e.c.Conn().IsClosed()) {
					delete(p.conns, id)
					idle = append(idle, e.c)
				}
			}
			p.mu.Unlock()
			for _, c := range idle {
				c.Close()
			}
		}
	}
}

// Close closes every connection, in use or not, and stops the reaper.
func (p *Pool) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	conns := p.conns
	p.conns = map[string]*pooled{}
	p.mu.Unlock()
	close(p.stop)
	<-p.done
	for _, e := range conns {
		<-e.ready // a connect in flight is bounded by its request's context
		if e.c != nil {
			e.c.Close()
		}
	}
}
