package metrics

import (
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
)

// limiter bounds the distinct values of one label: the first max values
// seen are kept, later ones become Other. Lookups of known values take a
// read lock and allocate nothing.
type limiter struct {
	name     string
	max      int
	overflow prometheus.Counter
	known    cache[string, string] // value → its own copy (never a message buffer)
}

func newLimiter(name string, max int, overflow *prometheus.CounterVec) *limiter {
	return &limiter{name: name, max: max, overflow: overflow.WithLabelValues(name)}
}

// maxLabelLen bounds one label value; longer values are cut.
const maxLabelLen = 128

// value returns v when v is within the cap, None for "", Other past the cap.
// A value that is not valid UTF-8 (Prometheus refuses those) or is longer
// than maxLabelLen is mended first: values can come from headers no one
// validated (token-stream records).
func (l *limiter) value(v string) string {
	if v == "" {
		return None
	}
	if len(v) > maxLabelLen || !utf8.ValidString(v) {
		v = mend(v)
	}
	if s, ok := l.known.load(v); ok {
		return s
	}
	l.known.mu.Lock()
	defer l.known.mu.Unlock()
	if s, ok := l.known.m[v]; ok {
		return s
	}
	if len(l.known.m) >= l.max {
		l.overflow.Inc()
		return Other
	}
	// The caller's string may alias a message buffer: keep a copy.
	s := strings.Clone(v)
	if l.known.m == nil {
		l.known.m = make(map[string]string)
	}
	l.known.m[s] = s
	return s
}

// mend makes v a valid, bounded label value.
func mend(v string) string {
	if len(v) > maxLabelLen {
		v = v[:maxLabelLen]
	}
	return strings.ToValidUTF8(v, "\uFFFD")
}

// cache memoises label children (or handles built on them) by key. Its size
// is bounded by the limiters that produce the keys.
type cache[K comparable, V any] struct {
	mu sync.RWMutex
	m  map[K]V
}

func (c *cache[K, V]) load(k K) (V, bool) {
	c.mu.RLock()
	v, ok := c.m[k]
	c.mu.RUnlock()
	return v, ok
}

func (c *cache[K, V]) get(k K, build func(K) V) V {
	if v, ok := c.load(k); ok {
		return v
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.m[k]; ok {
		return v
	}
	if c.m == nil {
		c.m = make(map[K]V)
	}
	v := build(k)
	c.m[k] = v
	return v
}

// pair is a two-label key.
type pair struct{ a, b string }

// sources is a set of registered scrape-time sources.
type sources[T any] struct {
	mu   sync.Mutex
	next int
	m    map[int]T
}

func (s *sources[T]) add(v T) (remove func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[int]T)
	}
	id := s.next
	s.next++
	s.m[id] = v
	return func() {
		s.mu.Lock()
		delete(s.m, id)
		s.mu.Unlock()
	}
}

func (s *sources[T]) list() []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]T, 0, len(s.m))
	for _, v := range s.m {
		out = append(out, v)
	}
	return out
}
