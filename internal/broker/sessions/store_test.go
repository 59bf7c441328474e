package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/jstest"
	"github.com/semaq/semaq/semaq"
)

// openStore opens a store on a JetStream server of its own, its API
// served on nc.
func openStore(t *testing.T, deps Deps) (*Store, *nats.Conn) {
	t.Helper()
	nc, js := jstest.Start(t)
	deps.JS, deps.Conn = js, nc
	if deps.Gate == nil {
		deps.Gate = subsystem.NewGate("sessions")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, deps)
	if err != nil {
		t.Fatal(err)
	}
	// Three subscriptions of each handler, as three nodes serve the API:
	// requests are served concurrently.
	for subj, h := range s.Handlers() {
		for range 3 {
			sub, err := nc.QueueSubscribe(subj, "api", h)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sub.Unsubscribe() })
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s, nc
}

func call(t *testing.T, nc *nats.Conn, subj string, req, out any) error {
	t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return callRaw(t, nc, subj, b, out)
}

func callRaw(t *testing.T, nc *nats.Conn, subj string, b []byte, out any) error {
	t.Helper()
	m, err := nc.Request(subj, b, 40*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r struct {
		Error *semaq.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &r); err != nil {
		t.Fatal(err)
	}
	if r.Error != nil {
		return r.Error
	}
	if out != nil {
		return json.Unmarshal(m.Data, out)
	}
	return nil
}

// Hostile requests: names that would be subject wildcards, a document
// past the bound, nesting past the decoder's depth, a wait past the
// bound. Each is refused naming the problem, and a refused change leaves
// the session as it was.
func TestSessionHostileRequests(t *testing.T) {
	_, nc := openStore(t, Deps{})
	var info semaq.SessionInfo
	if err := call(t, nc, semaq.APISessionPut, semaq.SessionPutRequest{SessionRef: semaq.SessionRef{ID: "h"}, Data: json.RawMessage(`{"a":1}`)}, &info); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"", "a.b", "*", ">", "a b", strings.Repeat("x", 129), "$none"} {
		err := call(t, nc, semaq.APISessionGet, semaq.SessionGetRequest{SessionRef: semaq.SessionRef{ID: id}}, nil)
		if !errors.Is(err, semaq.ErrBadSession) {
			t.Errorf("id %q: %v", id, err)
		}
	}
	if err := call(t, nc, semaq.APISessionGet, semaq.SessionGetRequest{SessionRef: semaq.SessionRef{ID: "h", Tenant: "a.*"}}, nil); !errors.Is(err, semaq.ErrBadSession) {
		t.Errorf("tenant a.*: %v", err)
	}
	big := `{"blob":"` + strings.Repeat("x", semaq.MaxSessionBytes) + `"}`
	err := call(t, nc, semaq.APISessionPatch, semaq.SessionPatchRequest{SessionRef: semaq.SessionRef{ID: "h"}, Patch: json.RawMessage(big)}, nil)
	if !errors.Is(err, semaq.ErrBadSession) || !strings.Contains(err.Error(), "bytes") {
		t.Errorf("a document past the bound: %v", err)
	}
	deep := `{"id":"h","patch":` + strings.Repeat(`{"a":`, 3000) + `1` + strings.Repeat(`}`, 3000) + `}`
	if err := callRaw(t, nc, semaq.APISessionPatch, []byte(deep), nil); !errors.Is(err, semaq.ErrBadRequest) {
		t.Errorf("3000-deep patch: %v", err)
	}
	for _, data := range []string{`[1,2]`, `"text"`, `null`, `42`} {
		err := call(t, nc, semaq.APISessionPut, semaq.SessionPutRequest{SessionRef: semaq.SessionRef{ID: "h"}, Data: json.RawMessage(data)}, nil)
		if !errors.Is(err, semaq.ErrBadSession) {
			t.Errorf("data %s: %v", data, err)
		}
	}
	if err := call(t, nc, semaq.APISessionDeltas, semaq.SessionDeltasRequest{SessionRef: semaq.SessionRef{ID: "h"}, Wait: time.Hour}, nil); !errors.Is(err, semaq.ErrBadSession) {
		t.Errorf("an hour's wait: %v", err)
	}
	if err := call(t, nc, semaq.APISessionPut, semaq.SessionPutRequest{SessionRef: semaq.SessionRef{ID: "h"}, Data: json.RawMessage(`{}`),
		Settings: &semaq.SessionSettings{TTL: time.Millisecond}}, nil); !errors.Is(err, semaq.ErrBadSession) {
		t.Errorf("a 1 ms TTL: %v", err)
	}
	var got semaq.Session
	if err := call(t, nc, semaq.APISessionGet, semaq.SessionGetRequest{SessionRef: semaq.SessionRef{ID: "h"}}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Revision != 1 || string(got.Data) != `{"a":1}` {
		t.Fatalf("after the refusals: rev %d data %s", got.Revision, got.Data)
	}
}

// Waiting deltas requests are bounded per node: past the bound one is
// refused at once as unavailable, and the waiting ones still get the
// change they wait for.
func TestSessionWatchersBounded(t *testing.T) {
	s, nc := openStore(t, Deps{MaxWatchers: 2})
	ref := semaq.SessionRef{ID: "w"}
	if err := call(t, nc, semaq.APISessionPut, semaq.SessionPutRequest{SessionRef: ref, Data: json.RawMessage(`{}`)}, nil); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		resp semaq.SessionDeltasResponse
		err  error
	}
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			var a answer
			a.err = call(t, nc, semaq.APISessionDeltas, semaq.SessionDeltasRequest{SessionRef: ref, After: 1, Wait: 20 * time.Second}, &a.resp)
			answers <- a
		}()
	}
	waitFor(t, func() bool { return len(s.watchSlots) == 2 })
	err := call(t, nc, semaq.APISessionDeltas, semaq.SessionDeltasRequest{SessionRef: ref, After: 1, Wait: time.Second}, nil)
	if !errors.Is(err, semaq.ErrUnavailable) {
		t.Fatalf("a third watcher: %v", err)
	}
	if err := call(t, nc, semaq.APISessionPatch, semaq.SessionPatchRequest{SessionRef: ref, Patch: json.RawMessage(`{"x":1}`)}, nil); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		a := <-answers
		if a.err != nil || len(a.resp.Deltas) != 1 || a.resp.Deltas[0].Revision != 2 {
			t.Fatalf("a waiting watcher got %+v %v", a.resp, a.err)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Deltas from an old revision are found by a binary search among other
// sessions' changes, and a revision no longer kept is refused.
func TestSessionDeltasSearch(t *testing.T) {
	s, nc := openStore(t, Deps{})
	for i := range 40 {
		for _, id := range []string{"a", "b", "c"} {
			if err := call(t, nc, semaq.APISessionPatch, semaq.SessionPatchRequest{SessionRef: semaq.SessionRef{ID: id},
				Patch: json.RawMessage(`{"i":` + string(rune('0'+i%10)) + `}`), Create: true}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, after := range []uint64{0, 1, 17, 38, 39} {
		var resp semaq.SessionDeltasResponse
		if err := call(t, nc, semaq.APISessionDeltas, semaq.SessionDeltasRequest{SessionRef: semaq.SessionRef{ID: "b"}, After: after, Limit: 5}, &resp); err != nil {
			t.Fatal(err)
		}
		if len(resp.Deltas) == 0 || resp.Deltas[0].Revision != after+1 || resp.Revision != 40 || len(resp.Deltas) > 5 {
			t.Fatalf("after %d: %+v", after, resp)
		}
		for i, d := range resp.Deltas {
			if d.Revision != after+1+uint64(i) {
				t.Fatalf("after %d: delta %d is revision %d", after, i, d.Revision)
			}
		}
	}
	if err := call(t, nc, semaq.APISessionDeltas, semaq.SessionDeltasRequest{SessionRef: semaq.SessionRef{ID: "b"}, After: 41}, nil); !errors.Is(err, semaq.ErrBadSession) {
		t.Fatalf("after a future revision: %v", err)
	}
	// Drop b's oldest deltas as the per-subject bound would.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k := key{id: "b"}
	first, _, err := s.probe(ctx, k, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.stream.DeleteMsg(ctx, first.Sequence); err != nil {
		t.Fatal(err)
	}
	if err := call(t, nc, semaq.APISessionDeltas, semaq.SessionDeltasRequest{SessionRef: semaq.SessionRef{ID: "b"}}, nil); !errors.Is(err, semaq.ErrSessionRevisionGone) {
		t.Fatalf("from a revision no longer kept: %v", err)
	}
}

// A document never stored after its deltas (its writer died between the
// two, or a full store refused it) is made again from them: readers see
// every acked change, and the next write goes on from there.
func TestSessionDocumentBehindItsDeltas(t *testing.T) {
	s, nc := openStore(t, Deps{})
	ref := semaq.SessionRef{ID: "behind"}
	if err := call(t, nc, semaq.APISessionPut, semaq.SessionPutRequest{SessionRef: ref, Data: json.RawMessage(`{"a":1}`)}, nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k := key{id: "behind"}
	// Two changes as a writer that dies after each delta leaves them.
	for _, d := range []semaq.SessionDelta{
		{Revision: 2, Op: semaq.SessionOpPatch, Data: json.RawMessage(`{"b":2}`), At: time.Now()},
		{Revision: 3, At: time.Now(), Op: semaq.SessionOpRound, Round: &semaq.SessionRound{Round: 1, Messages: []semaq.SessionMessage{{Role: "user", Content: "hi"}}}},
	} {
		st, err := s.load(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(d)
		m := &nats.Msg{Subject: k.delta(), Data: b, Header: nats.Header{
			"Nats-Expected-Last-Subject-Sequence":         {fmt.Sprint(st.seq)},
			"Nats-Expected-Last-Subject-Sequence-Subject": {k.all()},
			hdrRevision: {fmt.Sprint(d.Revision)},
		}}
		if _, err := s.deps.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	s.cache.drop(k)
	var got semaq.Session
	if err := call(t, nc, semaq.APISessionGet, semaq.SessionGetRequest{SessionRef: ref, Rounds: -1}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Revision != 3 || string(got.Data) != `{"a":1,"b":2}` || len(got.Rounds) != 1 {
		t.Fatalf("read behind: rev %d data %s rounds %d", got.Revision, got.Data, len(got.Rounds))
	}
	rev := uint64(3)
	var info semaq.SessionInfo
	if err := call(t, nc, semaq.APISessionPatch, semaq.SessionPatchRequest{SessionRef: ref, Patch: json.RawMessage(`{"c":3}`), Revision: &rev}, &info); err != nil {
		t.Fatal(err)
	}
	if info.Revision != 4 || info.RoundCount != 1 {
		t.Fatalf("the next write: %+v", info)
	}
}

// Writers racing on one session: of those naming the same revision
// exactly one wins and the others get the conflict; those naming none
// all land, one revision each, none lost.
func TestSessionWritersRace(t *testing.T) {
	_, nc := openStore(t, Deps{})
	ref := semaq.SessionRef{ID: "race"}
	if err := call(t, nc, semaq.APISessionPut, semaq.SessionPutRequest{SessionRef: ref, Data: json.RawMessage(`{}`)}, nil); err != nil {
		t.Fatal(err)
	}
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		go func() {
			rev := uint64(1)
			errs <- call(t, nc, semaq.APISessionPatch, semaq.SessionPatchRequest{SessionRef: ref, Patch: json.RawMessage(fmt.Sprintf(`{"w%d":1}`, i)), Revision: &rev}, nil)
		}()
	}
	won := 0
	for range n {
		switch err := <-errs; {
		case err == nil:
			won++
		case !errors.Is(err, semaq.ErrSessionConflict):
			t.Fatalf("a racing writer: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d writers of revision 1 won, want 1", won)
	}
	for i := range n {
		go func() {
			errs <- call(t, nc, semaq.APISessionPatch, semaq.SessionPatchRequest{SessionRef: ref, Patch: json.RawMessage(fmt.Sprintf(`{"k%d":1}`, i))}, nil)
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("a writer without a revision: %v", err)
		}
	}
	var got semaq.Session
	if err := call(t, nc, semaq.APISessionGet, semaq.SessionGetRequest{SessionRef: ref}, &got); err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(got.Data, &data); err != nil {
		t.Fatal(err)
	}
	if got.Revision != 2+n || len(data) != 1+n {
		t.Fatalf("after the race: revision %d, data %s", got.Revision, got.Data)
	}
}

// A session's first change is its delta; its document follows without
// being waited for. A node that reads the session between the two (on a
// cluster, another node than the writer) builds it from the delta instead
// of failing.
func TestLoadFirstDeltaBeforeItsDocument(t *testing.T) {
	s, nc := openStore(t, Deps{Clustered: true})
	k := key{id: "s-first"}
	at := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	b, err := json.Marshal(semaq.SessionDelta{Revision: 1, Op: semaq.SessionOpPatch, Data: json.RawMessage(`{"topic":"go"}`), At: at})
	if err != nil {
		t.Fatal(err)
	}
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(k.delta(), b); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := s.load(ctx, k)
	if err != nil {
		t.Fatalf("load with no document yet: %v", err)
	}
	if st.doc == nil || st.doc.Revision != 1 || string(st.doc.Data) != `{"topic":"go"}` || !st.doc.CreatedAt.Equal(at) || st.doc.ID != "s-first" {
		t.Fatalf("loaded %+v", st.doc)
	}
}
