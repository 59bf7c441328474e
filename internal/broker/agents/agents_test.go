package agents

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/jstest"
	"github.com/semaq/semaq/semaq"
)

func ids(t *testing.T, r *Registry) []string {
	t.Helper()
	out, err := r.listLive(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, a := range out.(semaq.AgentListResponse).Agents {
		ids = append(ids, a.ID)
	}
	return ids
}

// Liveness is the registry's clock (Deps.Now): an announcement lapses when
// the clock passes its ExpiresAt, and the list that finds it lapsed, or
// unreadable, removes it from the bucket.
func TestListExpiresByClock(t *testing.T) {
	ctx := context.Background()
	_, js := jstest.Start(t)
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	r, err := Open(ctx, Deps{JS: js, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(ctx) })

	for _, a := range []struct {
		id  string
		ttl time.Duration
	}{{"short", time.Second}, {"long", time.Minute}} {
		out, err := r.announce(ctx, &semaq.AgentAnnounceRequest{Agent: semaq.Agent{ID: a.id, Intents: []string{"b", "a", "b"}}, TTL: a.ttl})
		if err != nil {
			t.Fatal(err)
		}
		info := out.(semaq.AgentInfo)
		if !info.AnnouncedAt.Equal(now) || !info.ExpiresAt.Equal(now.Add(a.ttl)) || !slices.Equal(info.Intents, []string{"a", "b"}) {
			t.Fatalf("announced %+v at %s", info, now)
		}
	}
	// An entry the broker did not write (its ID is not its key) is not an
	// agent.
	if _, err := r.kv.Put(ctx, "forged", []byte(`{"id":"other"}`)); err != nil {
		t.Fatal(err)
	}
	if got := ids(t, r); !slices.Equal(got, []string{"long", "short"}) {
		t.Fatalf("agents %v, want [long short]", got)
	}

	now = now.Add(2 * time.Second)
	if got := ids(t, r); !slices.Equal(got, []string{"long"}) {
		t.Fatalf("agents %v 2s later, want [long]", got)
	}
	for _, key := range []string{"short", "forged"} {
		if _, err := r.kv.Get(ctx, key); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("%s still stored after the list found it lapsed: %v", key, err)
		}
	}

	if _, err := r.leave(ctx, &semaq.AgentLeaveRequest{ID: "short"}); !errors.Is(err, semaq.ErrAgentNotFound) {
		t.Fatalf("leave of a removed agent: %v", err)
	}
	if _, err := r.leave(ctx, &semaq.AgentLeaveRequest{ID: "long"}); err != nil {
		t.Fatal(err)
	}
	if got := ids(t, r); len(got) != 0 {
		t.Fatalf("agents %v after leave", got)
	}
	if n := len(r.Handlers()); n != 3 {
		t.Errorf("%d handlers, want 3", n)
	}
}
