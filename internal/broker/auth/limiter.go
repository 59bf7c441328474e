package auth

import (
	"sync"
	"time"
)

// Limiter slows down repeated failed authentications from one remote IP:
// after Free failures within Window, each further attempt from that IP
// waits Base, doubling per failure, up to Max. It remembers at most Size
// IPs: a flood of addresses evicts expired entries first, then arbitrary
// ones, and never grows the table past Size. Its methods are safe for
// concurrent use.
type Limiter struct {
	Free   int           // failures allowed without delay
	Window time.Duration // failures older than this are forgotten
	Base   time.Duration // first delay
	Max    time.Duration // longest delay; below the server's auth timeout
	Size   int           // most IPs remembered

	mu    sync.Mutex
	fails map[string]*failures
	now   func() time.Time
}

type failures struct {
	n     int
	first time.Time
}

// DefaultLimiter is the node's: 5 free failures a minute, then 100 ms
// doubling to 1 s, 10,000 addresses.
func DefaultLimiter() *Limiter {
	return &Limiter{Free: 5, Window: time.Minute, Base: 100 * time.Millisecond, Max: time.Second, Size: 10000}
}

func (l *Limiter) clock() time.Time {
	if l.now != nil {
		return l.now()
	}
	return time.Now()
}

// Delay is how long an attempt from ip waits before it is checked.
func (l *Limiter) Delay(ip string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.fails[ip]
	if f == nil {
		return 0
	}
	if l.clock().Sub(f.first) > l.Window {
		delete(l.fails, ip)
		return 0
	}
	over := f.n - l.Free
	if over < 0 {
		return 0
	}
	d := l.Base
	for range over {
		d *= 2
		if d >= l.Max {
			return l.Max
		}
	}
	return min(d, l.Max)
}

// Fail records a failed attempt from ip.
func (l *Limiter) Fail(ip string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock()
	if l.fails == nil {
		l.fails = make(map[string]*failures)
	}
	f := l.fails[ip]
	if f != nil && now.Sub(f.first) > l.Window {
		f = nil
	}
	if f == nil {
		if len(l.fails) >= l.Size {
			l.evict(now)
		}
		f = &failures{first: now}
		l.fails[ip] = f
	}
	f.n++
}

// Succeed forgets ip's failures.
func (l *Limiter) Succeed(ip string) {
	l.mu.Lock()
	delete(l.fails, ip)
	l.mu.Unlock()
}

// Len is how many IPs the table holds.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.fails)
}

// evict makes room for one entry: expired entries go first; when none
// has expired, an arbitrary one (map order) does. Under a flood of
// addresses an attacker can make the limiter forget an IP early, never
// make it hold more than Size.
func (l *Limiter) evict(now time.Time) {
	for ip, f := range l.fails {
		if now.Sub(f.first) > l.Window {
			delete(l.fails, ip)
		}
	}
	for ip := range l.fails {
		if len(l.fails) < l.Size {
			return
		}
		delete(l.fails, ip)
	}
}
