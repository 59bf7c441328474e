package registry

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestLostIdentityRaceTakesTheWinnersID replays the race two nodes run when
// they register one new schema at once: the loser decided on a snapshot
// without the winner's schema, allocated an id of its own, and must end
// with the winner's id and no trace of its own copy.
func TestLostIdentityRaceTakesTheWinnersID(t *testing.T) {
	t.Parallel()
	n := startNode(t, "")
	r1, r2 := open(t, n.js), open(t, n.conn(t))
	ctx := ctxT(t)
	stale := r2.state.Load()
	c, err := r2.parse(stale, SchemaRequest{Schema: `{"race":1}`, SchemaType: "JSON"})
	if err != nil {
		t.Fatal(err)
	}
	won := register(t, r1, "a", `{"race":1}`)
	got, err := r2.schemaID(ctx, stale, c, false)
	if err != nil || got != won {
		t.Fatalf("loser got id %d (%v), want the winner's %d", got, err, won)
	}
	lost := won + 1 // the id the loser allocated
	if _, err := r2.kv.Get(ctx, keySchema(lost)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("the loser's copy %d is still stored: %v", lost, err)
	}
	if _, ok := r2.precompiled.Load(lost); ok {
		t.Fatal("the loser's precompiled schema leaked")
	}
	// Registering through the loser now finds the winner's id at once.
	if id := register(t, r2, "b", `{"race":1}`); id != won {
		t.Fatalf("id %d, want %d", id, won)
	}
	// The counter went past the dropped id: the next schema gets a new one.
	if id := register(t, r2, "b", `{"race":2}`); id != lost+1 {
		t.Fatalf("next id %d, want %d", id, lost+1)
	}
}

func TestConnectionLoss(t *testing.T) {
	t.Parallel()
	n := startNode(t, "")
	r := open(t, n.js)
	id := register(t, r, "a", `{}`)
	n.nc.Close()
	// Reads keep answering from memory; writes fail with a store error.
	if _, ok := r.Cached(id); !ok {
		t.Fatal("Cached failed after the connection closed")
	}
	_, err := r.Register(ctxT(t), "a", SchemaRequest{Schema: `{"x":1}`, SchemaType: "JSON"}, false)
	wantCode(t, err, CodeStore)
	if err := r.Close(); err != nil {
		t.Fatalf("Close after the connection closed: %v", err)
	}
}
