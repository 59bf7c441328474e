package sessions

import (
	"strings"
	"testing"
)

// An entry only moves to a later sequence: a read that began before a
// write cannot put back what the write replaced. The cache stays within
// its bytes, dropping the least recently used.
func TestCacheOrderAndBound(t *testing.T) {
	c := newCache(1000)
	k := key{id: "a"}
	c.put(k, stored{doc: &doc{meta: meta{Revision: 5}}, seq: 50, size: 10}, nil)
	c.put(k, stored{doc: &doc{meta: meta{Revision: 4}}, seq: 40, size: 10}, nil)
	if st, ok := c.peek(k); !ok || st.doc.Revision != 5 {
		t.Fatalf("after an older put: %+v %v", st.doc, ok)
	}
	for i := range 20 {
		c.put(key{id: strings.Repeat("x", i+1)}, stored{doc: &doc{}, seq: uint64(100 + i), size: 100}, nil)
	}
	if c.bytes > 1000 {
		t.Fatalf("%d bytes held, bound 1000", c.bytes)
	}
	if _, ok := c.peek(k); ok {
		t.Fatal("the least recently used entry was kept past the bound")
	}
	if _, ok := c.peek(key{id: strings.Repeat("x", 20)}); !ok {
		t.Fatal("the newest entry was dropped")
	}
	got, _ := c.get(t.Context(), key{id: strings.Repeat("x", 20)})
	got.doc.Rounds = append(got.doc.Rounds, got.doc.Rounds...)
	got.doc.Revision = 99
	if st, _ := c.peek(key{id: strings.Repeat("x", 20)}); st.doc.Revision == 99 {
		t.Fatal("a document taken to change was the cached one")
	}
}
