package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/reserved"
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

// nextEvent waits for the next session event on sub.
func nextEvent(t *testing.T, sub *nats.Subscription, within time.Duration) semaq.SessionEvent {
	t.Helper()
	m, err := sub.NextMsg(within)
	if err != nil {
		t.Fatalf("no session event: %v", err)
	}
	var ev semaq.SessionEvent
	if err := json.Unmarshal(m.Data, &ev); err != nil {
		t.Fatal(err)
	}
	if want := semaq.SessionEventSubject(ev.Tenant, ev.ID, ev.State); m.Subject != want {
		t.Fatalf("event %+v on %s, want %s", ev, m.Subject, want)
	}
	return ev
}

// Time drives the state: idle past StaleAfter the session goes stale,
// past its TTL it expires and is deleted; a streak of low confidences
// (reported by the API and by AI-Confidence on messages) degrades it; a
// write reconciles it. Every transition is an event.
func TestSessionFreshnessEvents(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sub, err := c.Conn().SubscribeSync(semaq.SessionEventFilter("*"))
	if err != nil {
		t.Fatal(err)
	}
	ref := semaq.SessionRef{ID: "fresh-1", Tenant: "acme"}
	if _, err := c.PutSession(ctx, semaq.SessionPutRequest{SessionRef: ref, Data: json.RawMessage(`{}`),
		Settings: &semaq.SessionSettings{TTL: 3 * time.Second, StaleAfter: time.Second}}); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, sub, 5*time.Second); ev.State != semaq.SessionActive || ev.From != "" || ev.Tenant != "acme" {
		t.Fatalf("created: %+v", ev)
	}
	if ev := nextEvent(t, sub, 10*time.Second); ev.State != semaq.SessionStale || ev.From != semaq.SessionActive {
		t.Fatalf("idle: %+v", ev)
	}
	// Two low reports by the API, the third on a message.
	brokertest.AddStream(t, c, "RES", "results.>")
	for range 2 {
		if _, err := c.ReportSession(ctx, ref, 0.2); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.ReportSession(ctx, ref, 1.5); !errors.Is(err, semaq.ErrBadSession) {
		t.Fatalf("confidence 1.5: %v", err)
	}
	if _, err := c.Publish(ctx, "results.x", []byte("{}"), client.WithTenant("acme"), client.WithSession("fresh-1"),
		client.WithHeader(semaq.HdrConfidence, "0.3")); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, sub, 10*time.Second); ev.State != semaq.SessionDegraded || ev.From != semaq.SessionStale || ev.Reason == "" {
		t.Fatalf("low streak: %+v", ev)
	}
	// A message with a bad AI-Confidence is refused, naming it.
	if _, err := c.Publish(ctx, "results.x", []byte("{}"), client.WithSession("fresh-1"), client.WithHeader(semaq.HdrConfidence, "high")); !errors.Is(err, semaq.ErrEnvelope) {
		t.Fatalf("AI-Confidence high: %v", err)
	}
	if _, err := c.PatchSession(ctx, semaq.SessionPatchRequest{SessionRef: ref, Patch: json.RawMessage(`{"fresh":1}`)}); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, sub, 5*time.Second); ev.State != semaq.SessionActive || ev.From != semaq.SessionDegraded || ev.Revision != 2 {
		t.Fatalf("write: %+v", ev)
	}
	// Left alone: stale, then expired, and gone.
	if ev := nextEvent(t, sub, 10*time.Second); ev.State != semaq.SessionStale {
		t.Fatalf("idle again: %+v", ev)
	}
	if ev := nextEvent(t, sub, 10*time.Second); ev.State != semaq.SessionExpired {
		t.Fatalf("ttl: %+v", ev)
	}
	if _, err := c.GetSession(ctx, ref, 0); !errors.Is(err, semaq.ErrSessionNotFound) {
		t.Fatalf("get after expiry: %v", err)
	}
}

// A dependency the session declared moves: the session is degraded, the
// others are not.
func TestSessionDependencyMoved(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for id, v := range map[string]string{"a": "v7", "b": "v8"} {
		if _, err := c.PutSession(ctx, semaq.SessionPutRequest{SessionRef: semaq.SessionRef{ID: id}, Data: json.RawMessage(`{}`),
			Settings: &semaq.SessionSettings{Depends: map[string]string{"rag-index": v}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.PutSession(ctx, semaq.SessionPutRequest{SessionRef: semaq.SessionRef{ID: "c"}, Data: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	n, err := c.MoveSessionDependency(ctx, semaq.SessionDependencyRequest{Name: "rag-index", Version: "v8"})
	if err != nil || n != 1 {
		t.Fatalf("moved: %d %v", n, err)
	}
	list, err := c.Sessions(ctx, semaq.SessionListRequest{State: semaq.SessionDegraded})
	if err != nil || len(list.Sessions) != 1 || list.Sessions[0].ID != "a" || list.Sessions[0].Reason == "" {
		t.Fatalf("degraded: %+v %v", list, err)
	}
}

// Three nodes: a session written through one node is patched through
// another and watched through the third; the loss of the session store's
// leader loses no revision.
func TestClusterSessions(t *testing.T) {
	t.Parallel()
	cl := brokertest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	ref := semaq.SessionRef{ID: "conv-1"}
	var w0, w1, w2 *client.Client
	w0, w1, w2 = brokertest.Connect(t, cl.Node(0)), brokertest.Connect(t, cl.Node(1)), brokertest.Connect(t, cl.Node(2))
	if _, err := w0.PutSession(ctx, semaq.SessionPutRequest{SessionRef: ref, Data: json.RawMessage(`{"n":0}`)}); err != nil {
		t.Fatal(err)
	}
	watch := w2.WatchSession(ref, 1)
	for i := 1; i <= 5; i++ {
		if _, err := w1.PatchSession(ctx, semaq.SessionPatchRequest{SessionRef: ref, Patch: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), Revision: client.Rev(uint64(i))}); err != nil {
			t.Fatal(err)
		}
	}
	// The store's leader goes; writes go on through a node that stays.
	lead := cl.StreamLeader(reserved.SessionStream)
	cl.Stop(lead)
	var alive []*client.Client
	for i, wc := range []*client.Client{w0, w1, w2} {
		if i != lead {
			alive = append(alive, wc)
		}
	}
	for i := 6; i <= 8; i++ {
		cl.Eventually(60*time.Second, fmt.Sprintf("patch %d after the leader's loss", i), func() error {
			_, err := alive[0].PatchSession(ctx, semaq.SessionPatchRequest{SessionRef: ref, Patch: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), Revision: client.Rev(uint64(i))})
			if errors.Is(err, semaq.ErrSessionConflict) {
				// The try before stored it, though its answer was lost.
				if got, gerr := alive[0].GetSession(ctx, ref, 0); gerr == nil && got.Revision == uint64(i+1) {
					return nil
				}
			}
			return err
		})
	}
	got, err := alive[1].GetSession(ctx, ref, 0)
	if err != nil || got.Revision != 9 || string(got.Data) != `{"n":8}` {
		t.Fatalf("after the loss: %+v %v", got, err)
	}
	// Every revision, in order, through whichever node the watcher
	// reaches: the watch resumes after the last revision it returned.
	if lead == 2 {
		watch = alive[1].WatchSession(ref, 1)
	}
	for want := uint64(1); want <= 9; want++ {
		d, err := watch.Next(ctx)
		if err != nil {
			t.Fatalf("watching revision %d: %v", want, err)
		}
		if d.Revision != want {
			t.Fatalf("delta %d, want %d", d.Revision, want)
		}
	}
}

// With auth, a session belongs to its tenant: another tenant's users
// neither read, watch, patch nor list it, nor get its events; a reader
// reads and cannot write.
func TestSessionTenantIsolation(t *testing.T) {
	s := brokertest.Start(t, brokertest.WithAuth)
	admin := brokertest.ConnectKey(t, s, brokertest.AdminKey(t, s))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := func(name, tenant, role string) *client.Client {
		resp, err := admin.AddUser(ctx, semaq.UserAddRequest{Name: name, Tenant: tenant, Role: role, Subjects: []string{"x.>"}})
		if err != nil {
			t.Fatal(err)
		}
		return brokertest.ConnectKey(t, s, resp.Key)
	}
	acme, globex, reader := key("app", "acme", semaq.RolePublisher), key("rival", "globex", semaq.RolePublisher), key("viewer", "acme", semaq.RoleReader)
	rivalEvents, err := globex.Conn().SubscribeSync(semaq.SessionEventPrefix + ">")
	if err != nil {
		t.Fatal(err)
	}
	ownEvents, err := reader.Conn().SubscribeSync(semaq.SessionEventFilter("acme"))
	if err != nil {
		t.Fatal(err)
	}
	if err := globex.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	if err := reader.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	ref := semaq.SessionRef{ID: "secret"}
	if _, err := acme.PutSession(ctx, semaq.SessionPutRequest{SessionRef: ref, Data: json.RawMessage(`{"plan":"x"}`)}); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, ownEvents, 5*time.Second); ev.Tenant != "acme" || ev.ID != "secret" {
		t.Fatalf("acme's reader got %+v", ev)
	}
	// The rival: its own namespace has no such session, and naming acme's
	// tenant is refused.
	if _, err := globex.GetSession(ctx, ref, 0); !errors.Is(err, semaq.ErrSessionNotFound) {
		t.Fatalf("rival get: %v", err)
	}
	if _, err := globex.PatchSession(ctx, semaq.SessionPatchRequest{SessionRef: ref, Patch: json.RawMessage(`{"plan":"y"}`)}); !errors.Is(err, semaq.ErrSessionNotFound) {
		t.Fatalf("rival patch: %v", err)
	}
	for _, err := range []error{
		func() error {
			_, err := globex.GetSession(ctx, semaq.SessionRef{ID: "secret", Tenant: "acme"}, 0)
			return err
		}(),
		func() error {
			_, err := globex.SessionDeltas(ctx, semaq.SessionDeltasRequest{SessionRef: semaq.SessionRef{ID: "secret", Tenant: "acme"}})
			return err
		}(),
		func() error { _, err := globex.Sessions(ctx, semaq.SessionListRequest{Tenant: "acme"}); return err }(),
	} {
		if !errors.Is(err, semaq.ErrForbidden) {
			t.Fatalf("rival naming acme: %v", err)
		}
	}
	if list, err := globex.Sessions(ctx, semaq.SessionListRequest{}); err != nil || len(list.Sessions) != 0 {
		t.Fatalf("rival list: %+v %v", list, err)
	}
	// The reader reads, and may not write.
	if got, err := reader.GetSession(ctx, ref, 0); err != nil || string(got.Data) != `{"plan":"x"}` {
		t.Fatalf("reader get: %+v %v", got, err)
	}
	if _, err := reader.PatchSession(ctx, semaq.SessionPatchRequest{SessionRef: ref, Patch: json.RawMessage(`{}`)}); !errors.Is(err, semaq.ErrForbidden) {
		t.Fatalf("reader patch: %v", err)
	}
	// No event of acme's reached the rival, and it cannot forge one.
	if err := globex.Conn().Publish(semaq.SessionEventSubject("acme", "secret", semaq.SessionDegraded), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := acme.PatchSession(ctx, semaq.SessionPatchRequest{SessionRef: ref, Patch: json.RawMessage(`{"v":2}`)}); err != nil {
		t.Fatal(err)
	}
	if m, err := rivalEvents.NextMsg(500 * time.Millisecond); err == nil {
		t.Fatalf("the rival received %s", m.Subject)
	}
	if m, err := ownEvents.NextMsg(500 * time.Millisecond); err == nil {
		t.Fatalf("acme's reader received a forged event on %s: %s", m.Subject, m.Data)
	}
}

// A user's quota covers its session changes too: past its requests per
// minute a change is refused as overloaded, with when to retry, and
// nothing is stored.
func TestSessionChangesCountInQuotas(t *testing.T) {
	s := brokertest.Start(t, brokertest.WithAuth)
	admin := brokertest.ConnectKey(t, s, brokertest.AdminKey(t, s))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := admin.AddUser(ctx, semaq.UserAddRequest{Name: "chatty", Tenant: "acme", Role: semaq.RolePublisher, Subjects: []string{"x.>"}, RPM: 2})
	if err != nil {
		t.Fatal(err)
	}
	c := brokertest.ConnectKey(t, s, resp.Key)
	ref := semaq.SessionRef{ID: "q"}
	for i := range 2 {
		if _, err := c.PatchSession(ctx, semaq.SessionPatchRequest{SessionRef: ref, Patch: json.RawMessage(`{"i":1}`), Create: true}); err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
	}
	_, err = c.PatchSession(ctx, semaq.SessionPatchRequest{SessionRef: ref, Patch: json.RawMessage(`{"i":3}`)})
	var ae *semaq.APIError
	if !errors.Is(err, semaq.ErrOverloaded) || !errors.As(err, &ae) || ae.RetryAfterMs <= 0 || ae.Quota != "rpm" {
		t.Fatalf("third change: %v", err)
	}
	if got, err := c.GetSession(ctx, ref, 0); err != nil || got.Revision != 2 {
		t.Fatalf("after the refusal: %+v %v", got, err)
	}
}
