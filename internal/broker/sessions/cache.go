package sessions

import (
	"container/list"
	"context"
	"slices"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// cache keeps the sessions this node read or wrote last, so a write can
// skip reading what it is about to change: it compares-and-sets on the
// cached sequence, and a session another node changed since fails the
// condition and is read again. On a node of its own, which every change
// goes through, it is the sessions as stored, and reads are served from
// it; on a cluster reads go to the stream (other nodes write). An entry
// only ever moves to a later sequence. Bounded by the bytes of the
// documents it holds.
type cache struct {
	mu    sync.Mutex
	max   int // bytes
	bytes int
	ll    *list.List // front: most recently used
	m     map[key]*list.Element
}

type cacheEntry struct {
	k  key
	st stored // st.doc is never changed once cached
	// doc is the write of the cached document, when it was not waited
	// for (commit): the session's last sequence is its ack's.
	doc jetstream.PubAckFuture
}

// defaultCacheBytes bounds the cache of one node.
const defaultCacheBytes = 64 << 20

func newCache(max int) *cache {
	return &cache{max: max, ll: list.New(), m: map[key]*list.Element{}}
}

// get returns a copy of k's cached state, its document safe to change,
// once the write of that document ended; ok is false when there is none
// or the write failed.
func (c *cache) get(ctx context.Context, k key) (stored, bool) {
	c.mu.Lock()
	e, ok := c.m[k]
	if !ok {
		c.mu.Unlock()
		return stored{}, false
	}
	c.ll.MoveToFront(e)
	ce := e.Value.(*cacheEntry)
	st, fut := ce.st, ce.doc
	c.mu.Unlock()
	if fut != nil {
		// A future answers once: what it said is kept in the entry.
		select {
		case ack := <-fut.Ok():
			st.seq = ack.Sequence
			c.resolved(k, fut, ack.Sequence)
		case <-fut.Err():
			c.drop(k)
			return stored{}, false
		case <-ctx.Done():
			c.drop(k)
			return stored{}, false
		}
	}
	st.doc = st.doc.clone()
	return st, true
}

// put caches st (its document is not changed after), whose document's
// write is doc when it was not waited for.
func (c *cache) put(k key, st stored, doc jetstream.PubAckFuture) {
	if st.doc == nil || st.size > c.max/8 {
		c.drop(k)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok {
		ce := e.Value.(*cacheEntry)
		if ce.st.seq >= st.seq {
			return // a read or a write that began earlier: the entry is newer
		}
		c.bytes -= ce.st.size
		ce.st, ce.doc = st, doc
		c.ll.MoveToFront(e)
	} else {
		c.m[k] = c.ll.PushFront(&cacheEntry{k: k, st: st, doc: doc})
	}
	c.bytes += st.size
	for c.bytes > c.max {
		last := c.ll.Back()
		ce := last.Value.(*cacheEntry)
		c.ll.Remove(last)
		delete(c.m, ce.k)
		c.bytes -= ce.st.size
	}
}

// peek returns k's cached state as it is, without waiting for its
// document's write: for reading only.
func (c *cache) peek(k key) (stored, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok {
		return stored{}, false
	}
	c.ll.MoveToFront(e)
	return e.Value.(*cacheEntry).st, true
}

// resolved records that the write fut of k's cached document was stored
// at seq, if the entry still waits for it.
func (c *cache) resolved(k key, fut jetstream.PubAckFuture, seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok {
		if ce := e.Value.(*cacheEntry); ce.doc == fut {
			ce.st.seq, ce.doc = seq, nil
		}
	}
}

func (c *cache) drop(k key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[k]; ok {
		c.ll.Remove(e)
		delete(c.m, k)
		c.bytes -= e.Value.(*cacheEntry).st.size
	}
}

// clone is d with what a change may modify in place copied: its rounds
// (inserted into) and its settings' dependencies.
func (d *doc) clone() *doc {
	c := *d
	c.Rounds = slices.Clone(d.Rounds)
	if d.Settings.Depends != nil {
		c.Settings.Depends = make(map[string]string, len(d.Settings.Depends))
		for k, v := range d.Settings.Depends {
			c.Settings.Depends[k] = v
		}
	}
	return &c
}
