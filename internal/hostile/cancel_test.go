package hostile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// Only a request's owner cancels it (docs/queues.md, Cancel): without
// auth, whoever holds the cancel token it was published with; with auth,
// its publisher, a service of its tenant or an admin.

func queued(t *testing.T, c *client.Client, queue string) int {
	t.Helper()
	qi, err := c.QueueInfo(ctxT(t), queue)
	if err != nil {
		t.Fatal(err)
	}
	return qi.Status.Queued + qi.Status.Held + qi.Status.Delayed
}

// waitQueued waits until queue holds n requests.
func waitQueued(t *testing.T, c *client.Client, queue string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for queued(t, c, queue) != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue %s holds %d requests after 10 s, want %d", queue, queued(t, c, queue), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// cancel asks for a cancel as the attacker (attacker.request).
func (a *attacker) cancel(t *testing.T, queue string, req semaq.CancelRequest) *semaq.APIError {
	t.Helper()
	body, _ := json.Marshal(req)
	return a.request(t, fmt.Sprintf(semaq.APIQueueCancelT, queue), string(body))
}

// TestCancelNeedsTheToken: with auth off, a cancel without the request's
// token, or with another, is refused and the request stays; its owner's
// token cancels it, over NATS and HTTP; a request published without a
// token cannot be cancelled; the broker's own headers cannot be forged.
func TestCancelNeedsTheToken(t *testing.T) {
	srv := brokertest.Start(t)
	owner := brokertest.Connect(t, srv)
	if _, err := owner.AddQueue(ctxT(t), semaq.QueueConfig{Name: "Q", Subjects: []string{"q.>"}}); err != nil {
		t.Fatal(err)
	}
	ack, err := owner.Publish(ctxT(t), "q.x", []byte(`{"p":1}`), client.WithMsgID("r1"))
	if err != nil {
		t.Fatal(err)
	}
	if semaq.CheckCancelToken(ack.CancelToken) != nil {
		t.Fatalf("the SDK's ack carries no cancel token: %+v", ack)
	}
	waitQueued(t, owner, "Q", 1)
	a := connectAttacker(t, srv)
	for _, token := range []string{"", "AAAAAAAAAAAAAAAAAAAAAA", ack.CancelToken + "x"} {
		if e := a.cancel(t, "Q", semaq.CancelRequest{ID: "r1", Token: token}); e == nil || e.Code != 403 {
			t.Fatalf("cancel with token %q: got %v, want 403", token, e)
		}
	}
	if e := a.cancel(t, "Q", semaq.CancelRequest{ID: "1"}); e == nil || e.Code != 403 {
		t.Fatalf("cancel by sequence without a token: got %v, want 403", e)
	}
	if n := queued(t, owner, "Q"); n != 1 {
		t.Fatalf("after refused cancels the queue holds %d requests, want 1", n)
	}
	// The broker's stamps cannot come from a client.
	for _, h := range []string{semaq.HdrCancelSum, semaq.HdrPublisher, strings.ToLower(semaq.HdrCancelSum)} {
		m := nats.NewMsg("q.forged")
		m.Header.Set(h, semaq.CancelSum("AAAAAAAAAAAAAAAAAAAAAA"))
		if _, err := owner.PublishMsg(ctxT(t), m); !errors.Is(err, semaq.ErrEnvelope) {
			t.Fatalf("publish with %s: %v, want an envelope error", h, err)
		}
	}
	// A stock client's publish without a token: nobody cancels it.
	if _, err := a.nc.Request("q.y", []byte(`{}`), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	waitQueued(t, owner, "Q", 2)
	if e := a.cancel(t, "Q", semaq.CancelRequest{ID: "2"}); e == nil || e.Code != 403 || !strings.Contains(e.Description, "without a cancel token") {
		t.Fatalf("cancel of a request published without a token: %v", e)
	}
	// The owner's token cancels.
	if _, err := owner.Cancel(ctxT(t), "Q", "r1", client.CancelToken(ack.CancelToken)); err != nil {
		t.Fatalf("the owner's cancel: %v", err)
	}
	if n := queued(t, owner, "Q"); n != 1 {
		t.Fatalf("after the owner's cancel the queue holds %d requests, want 1", n)
	}
	if qi, _ := owner.QueueInfo(ctxT(t), "Q"); qi.Status.Counters.CancelsRefused != 5 {
		t.Fatalf("cancels_refused = %d, want 5", qi.Status.Counters.CancelsRefused)
	}

	// HTTP: the publish answers with a token; a cancel needs it.
	base := "http://" + srv.HTTPAddr()
	resp, err := http.Post(base+"/api/v1/publish/q.h", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	var pa struct {
		Seq         uint64 `json:"seq"`
		CancelToken string `json:"cancel_token"`
	}
	err = json.NewDecoder(resp.Body).Decode(&pa)
	resp.Body.Close()
	if err != nil || semaq.CheckCancelToken(pa.CancelToken) != nil {
		t.Fatalf("HTTP publish answer: %+v %v", pa, err)
	}
	id := resp.Header.Get(semaq.HdrMsgID)
	// The dispatcher takes the acked request in from its consumer on its
	// own time; a cancel before that finds no request (404).
	waitQueued(t, owner, "Q", 2)
	for _, body := range []string{``, `{"token":"AAAAAAAAAAAAAAAAAAAAAA"}`} {
		code, text := httpPost(t, base+"/api/v1/queues/Q/cancel/"+id, body)
		if code != http.StatusForbidden {
			t.Fatalf("HTTP cancel with body %q: %d %s, want 403", body, code, text)
		}
	}
	if code, text := httpPost(t, base+"/api/v1/queues/Q/cancel/"+id, `{"token":"`+pa.CancelToken+`"}`); code != http.StatusOK {
		t.Fatalf("HTTP cancel with the publish's token: %d %s", code, text)
	}
}

func httpPost(t *testing.T, url, body string) (int, string) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestCancelByOwner: with auth on, another publisher of the same tenant
// and a service of another tenant are refused; the publisher, a service
// of its tenant and an admin cancel.
func TestCancelByOwner(t *testing.T) {
	srv, admin := authBroker(t)
	if _, err := admin.AddQueue(ctxT(t), semaq.QueueConfig{Name: "Q", Subjects: []string{"q.>"}}); err != nil {
		t.Fatal(err)
	}
	user := func(name, role, tenant string) *client.Client {
		r := semaq.UserAddRequest{Name: name, Role: role, Tenant: tenant}
		if role != semaq.RoleWorker {
			r.Subjects = []string{"q.>"}
		} else {
			r.Queues = []string{"Q"}
		}
		return brokertest.ConnectKey(t, srv, addUser(t, admin, r))
	}
	alice := user("alice", semaq.RolePublisher, "acme")
	bob := user("bob", semaq.RolePublisher, "acme")
	other := user("other", semaq.RoleService, "globex")
	svc := user("svc", semaq.RoleService, "acme")
	worker := user("wrk", semaq.RoleWorker, "")
	for _, id := range []string{"a1", "a2", "a3"} {
		if _, err := alice.Publish(ctxT(t), "q.x", []byte(`{}`), client.WithMsgID(id)); err != nil {
			t.Fatal(err)
		}
	}
	// The dispatcher takes the acked requests in on its own time; a cancel
	// before that finds no request (404), not a refusal.
	waitQueued(t, admin, "Q", 3)
	for name, c := range map[string]*client.Client{"bob": bob, "other": other, "wrk": worker} {
		if _, err := c.Cancel(ctxT(t), "Q", "a1"); !errors.Is(err, semaq.ErrForbidden) {
			t.Fatalf("%s cancels alice's request: %v, want forbidden", name, err)
		}
	}
	if n := queued(t, admin, "Q"); n != 3 {
		t.Fatalf("after refused cancels the queue holds %d, want 3", n)
	}
	for who, c := range map[string]*client.Client{"a1": alice, "a2": svc, "a3": admin} {
		if _, err := c.Cancel(ctxT(t), "Q", who); err != nil {
			t.Fatalf("cancel of %s by its owner's side: %v", who, err)
		}
	}
	if n := queued(t, admin, "Q"); n != 0 {
		t.Fatalf("after the owners' cancels the queue holds %d, want 0", n)
	}
}
