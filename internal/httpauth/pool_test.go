package httpauth_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/httpauth"
)

// The pool holds at most its bound, never closes a connection in use,
// evicts the least recently used idle one and replaces a closed one.
func TestPoolBounded(t *testing.T) {
	s := brokertest.Start(t)
	var opened atomic.Int64
	p := httpauth.NewPool(func(ctx context.Context, key string) (*client.Client, error) {
		opened.Add(1)
		return client.Connect(ctx, s.ClientURL(), client.WithName("pool-"+key))
	}, 3, time.Hour)
	t.Cleanup(p.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var held []func()
	var conns []*client.Client
	for i := range 3 {
		c, rel, err := p.Get(ctx, fmt.Sprint(i), fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		held, conns = append(held, rel), append(conns, c)
	}
	if _, _, err := p.Get(ctx, "x", "x"); !errors.Is(err, httpauth.ErrPoolFull) {
		t.Fatalf("a 4th key with every connection in use: %v, want ErrPoolFull", err)
	}
	// The same key shares its connection.
	c, rel, err := p.Get(ctx, "1", "1")
	if err != nil || c != conns[1] {
		t.Fatalf("same key: %v, new connection %v", err, c != conns[1])
	}
	rel()
	held[0]()
	held[0]() // a second release is a no-op
	// Many more keys, one at a time: the pool stays at its bound.
	for i := range 50 {
		_, rel, err := p.Get(ctx, fmt.Sprint("k", i), "k")
		if err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		rel()
		if n := p.Len(); n > 3 {
			t.Fatalf("pool holds %d connections, bound 3", n)
		}
	}
	if !conns[0].Conn().IsClosed() {
		t.Fatal("the evicted idle connection is still open")
	}
	if conns[1].Conn().IsClosed() || conns[2].Conn().IsClosed() {
		t.Fatal("a connection in use was closed")
	}
	held[1]()
	held[2]()
	// A connection the broker closed (a revoked key) is replaced.
	c, rel, err = p.Get(ctx, "k49", "k")
	if err != nil {
		t.Fatal(err)
	}
	rel()
	c.Close()
	c2, rel, err := p.Get(ctx, "k49", "k")
	if err != nil || c2 == c || c2.Conn().IsClosed() {
		t.Fatalf("after its connection closed: %v, replaced %v", err, c2 != c)
	}
	rel()
	p.Close()
	if !c2.Conn().IsClosed() {
		t.Fatal("Close left a connection open")
	}
}
