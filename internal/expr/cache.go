package expr

import "sync"

// cacheKey identifies a compiled program: the same source compiles
// differently as a filter and as a key.
type cacheKey struct {
	src  string
	kind kind
}

// lru is a fixed-size least-recently-used cache of programs.
type lru struct {
	mu    sync.Mutex
	cap   int
	items map[cacheKey]*lruEntry
	head  lruEntry // sentinel of a circular list; head.next is the most recent
}

type lruEntry struct {
	key        cacheKey
	p          *Program
	prev, next *lruEntry
}

func newLRU(n int) *lru {
	c := &lru{cap: n, items: make(map[cacheKey]*lruEntry, n)}
	c.head.prev, c.head.next = &c.head, &c.head
	return c
}

func (c *lru) get(k cacheKey) *Program {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.items[k]
	if e == nil {
		return nil
	}
	c.unlink(e)
	c.pushFront(e)
	return e.p
}

func (c *lru) put(k cacheKey, p *Program) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.items[k]; e != nil {
		c.unlink(e)
		c.pushFront(e)
		return
	}
	if len(c.items) >= c.cap {
		last := c.head.prev
		c.unlink(last)
		delete(c.items, last.key)
	}
	e := &lruEntry{key: k, p: p}
	c.items[k] = e
	c.pushFront(e)
}

func (c *lru) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items)
}

func (c *lru) unlink(e *lruEntry) {
	e.prev.next = e.next
	e.next.prev = e.prev
}

func (c *lru) pushFront(e *lruEntry) {
	e.prev = &c.head
	e.next = c.head.next
	c.head.next.prev = e
	c.head.next = e
}
