package hostile

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// The route dry run runs the ingress's steps for a sender: with auth on
// only admins (and the node) may ask it, so only they may name another
// user to try a message as.
func TestRouteDryRunAsAnotherUserIsAdminsOnly(t *testing.T) {
	s, admin := authBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	brokertest.AddStream(t, admin, "AI", "ai.>")
	addUser(t, admin, semaq.UserAddRequest{Name: "victim", Role: semaq.RolePublisher, Tenant: "globex", Subjects: []string{"ai.>"}})
	req, _ := json.Marshal(semaq.RouteTestRequest{Subject: "ai.in", As: "victim"})
	for _, u := range []semaq.UserAddRequest{
		{Name: "pub", Role: semaq.RolePublisher, Tenant: "acme", Subjects: []string{"ai.>"}},
		{Name: "svc", Role: semaq.RoleService, Tenant: "acme", Subjects: []string{"ai.>"}},
		{Name: "rdr", Role: semaq.RoleReader, Tenant: "acme", Subjects: []string{"ai.>"}},
		{Name: "wkr", Role: semaq.RoleWorker, Queues: []string{"*"}},
	} {
		p := newProbe(t, s, addUser(t, admin, u))
		if !p.do(t, func() error { return p.nc.PublishRequest(semaq.APIRouteTest, p.nc.NewRespInbox(), req) }) {
			t.Errorf("%s (%s) may ask a dry run as another user", u.Name, u.Role)
		}
	}
	res, err := admin.TestRouteAs(ctx, "victim", "ai.in", []byte("x"))
	if err != nil || res.Refused != "" || res.Headers[semaq.HdrTenant][0] != "globex" || res.Headers[semaq.HdrPublisher][0] != "victim" {
		t.Fatalf("an admin's dry run as victim: %+v, %v", res, err)
	}
}

// Without auth every client is the same public user: a dry run can name
// no one, and a Nats-Request-Info header in the message (the server's word
// on a sender, when it comes from the server) makes no one of it.
func TestRouteDryRunCannotForgeASender(t *testing.T) {
	srv := brokertest.Start(t)
	c := brokertest.Connect(t, srv)
	brokertest.AddStream(t, c, "AI", "ai.>")
	a := connectAttacker(t, srv)
	e := a.request(t, semaq.APIRouteTest, `{"subject":"ai.in","as":"admin"}`)
	if e == nil || !errors.Is(e, semaq.ErrBadRequest) || !strings.Contains(e.Description, "without --auth") {
		t.Fatalf("as without auth: %+v", e)
	}
	resp, err := a.nc.Request(semaq.APIRouteTest, []byte(`{"subject":"ai.in","headers":{"Nats-Request-Info":["{\"acc\":\"T_acme\",\"user\":\"admin\"}"]}}`), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var res semaq.RouteTestResponse
	if err := json.Unmarshal(resp.Data, &res); err != nil {
		t.Fatal(err)
	}
	if res.Refused != "" || len(res.Headers[semaq.HdrPublisher]) != 0 || len(res.Headers["Nats-Request-Info"]) != 0 || len(res.Headers[semaq.HdrTenant]) != 0 {
		t.Fatalf("a forged sender in a dry run: %+v", res)
	}
}
