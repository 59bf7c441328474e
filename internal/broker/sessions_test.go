package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// replay applies deltas to an empty session, as a client that was away
// rebuilds it: the result must be the document.
func replay(t *testing.T, ds []semaq.SessionDelta) (map[string]any, []int) {
	t.Helper()
	doc := map[string]any{}
	var rounds []int
	for _, d := range ds {
		switch d.Op {
		case semaq.SessionOpPut:
			doc = map[string]any{}
			if err := json.Unmarshal(d.Data, &doc); err != nil {
				t.Fatal(err)
			}
		case semaq.SessionOpPatch:
			var p map[string]any
			if err := json.Unmarshal(d.Data, &p); err != nil {
				t.Fatal(err)
			}
			for k, v := range p {
				if v == nil {
					delete(doc, k)
				} else {
					doc[k] = v
				}
			}
		case semaq.SessionOpRound:
			rounds = append(rounds, d.Round.Round)
		case semaq.SessionOpTrim:
			kept := rounds[:0]
			for _, r := range rounds {
				if r >= d.BeforeRound {
					kept = append(kept, r)
				}
			}
			rounds = kept
		}
	}
	return doc, rounds
}

func TestSessionCASDeltasRounds(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ref := semaq.SessionRef{ID: "s-42"}

	if _, err := c.GetSession(ctx, ref, 0); !errors.Is(err, semaq.ErrSessionNotFound) {
		t.Fatalf("get before put: %v", err)
	}
	info, err := c.PutSession(ctx, semaq.SessionPutRequest{SessionRef: ref, Data: json.RawMessage(`{"topic":"go","n":1}`), Revision: client.Rev(0)})
	if err != nil {
		t.Fatal(err)
	}
	if info.Revision != 1 || info.State != semaq.SessionActive {
		t.Fatalf("put: %+v", info)
	}
	// A second create, and a stale writer, are refused.
	if _, err := c.PutSession(ctx, semaq.SessionPutRequest{SessionRef: ref, Data: json.RawMessage(`{}`), Revision: client.Rev(0)}); !errors.Is(err, semaq.ErrSessionConflict) {
		t.Fatalf("create twice: %v", err)
	}
	info, err = c.PatchSession(ctx, semaq.SessionPatchRequest{SessionRef: ref, Patch: json.RawMessage(`{"summary":"hello","n":null}`), Revision: client.Rev(1)})
	if err != nil || info.Revision != 2 {
		t.Fatalf("patch: %+v %v", info, err)
	}
	if _, err := c.PatchSession(ctx, semaq.SessionPatchRequest{SessionRef: ref, Patch: json.RawMessage(`{"x":1}`), Revision: client.Rev(1)}); !errors.Is(err, semaq.ErrSessionConflict) {
		t.Fatalf("stale patch: %v", err)
	}
	for i := range 3 {
		if _, err := c.AddRound(ctx, semaq.SessionRoundAddRequest{SessionRef: ref, Messages: []semaq.SessionMessage{{Role: "user", Content: "q" + string(rune('0'+i))}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.TrimSession(ctx, semaq.SessionTrimRequest{SessionRef: ref, BeforeRound: 2}); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetSession(ctx, ref, -1)
	if err != nil {
		t.Fatal(err)
	}
	if got.Revision != 6 || got.Rounds[0].Round != 2 || len(got.Rounds) != 2 || string(got.Data) != `{"summary":"hello","topic":"go"}` {
		t.Fatalf("get: rev %d rounds %+v data %s", got.Revision, got.Rounds, got.Data)
	}
	// Every delta from revision 1, replayed, is the document.
	w := c.WatchSession(ref, 1)
	var ds []semaq.SessionDelta
	for len(ds) < 6 {
		d, err := w.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	doc, rounds := replay(t, ds)
	if b, _ := json.Marshal(doc); string(b) != string(got.Data) || len(rounds) != 2 || rounds[0] != 2 {
		t.Fatalf("replayed %s rounds %v", b, rounds)
	}
	// Live: a change made while the watch waits arrives.
	done := make(chan semaq.SessionDelta, 1)
	go func() {
		d, err := w.Next(ctx)
		if err == nil {
			done <- d
		}
	}()
	if _, err := c.PatchSession(ctx, semaq.SessionPatchRequest{SessionRef: ref, Patch: json.RawMessage(`{"live":true}`)}); err != nil {
		t.Fatal(err)
	}
	select {
	case d := <-done:
		if d.Revision != 7 || d.Op != semaq.SessionOpPatch {
			t.Fatalf("live delta %+v", d)
		}
	case <-ctx.Done():
		t.Fatal("no live delta")
	}
}
