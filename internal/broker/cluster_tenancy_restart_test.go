package broker_test

import (
	"testing"
	"time"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// A node restarted while a tenant's users are subscribed on the other
// nodes delivers the core messages that tenant's users publish on it to
// those subscribers, and to no other tenant's.
func TestClusterAuthTenantInterestAfterRestart(t *testing.T) {
	a := startAuthCluster(t)
	a.add(
		semaq.UserAddRequest{Name: "acme-pub", Tenant: "acme", Role: semaq.RolePublisher, Subjects: []string{"orders.>"}},
		semaq.UserAddRequest{Name: "acme-read", Tenant: "acme", Role: semaq.RoleReader, Subjects: []string{"orders.>"}},
		semaq.UserAddRequest{Name: "globex-read", Tenant: "globex", Role: semaq.RoleReader, Subjects: []string{"orders.>"}},
	)
	// Subscribed on n1 before n3 goes: n3 learns of these subscriptions
	// only from n1's routes when they connect again.
	acme, _ := a.conn("acme-read", 0)
	acmeSub, err := acme.SubscribeSync("orders.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := acme.Flush(); err != nil {
		t.Fatal(err)
	}
	globex, _ := a.conn("globex-read", 0)
	globexGot := watchWithMarker(t, globex, "globex-read")

	a.c.Stop(2)
	a.c.Restart(2)

	// No stream captures orders.>: these are core messages of acme's
	// account, carried from n3 to n1 only if n3 has n1's interest.
	pub, _ := a.conn("acme-pub", 2)
	deadline := time.Now().Add(20 * time.Second)
	got := false
	for !got && time.Now().Before(deadline) {
		if err := pub.Publish("orders.acme.after-restart", []byte(`{"n":1}`)); err != nil {
			t.Fatal(err)
		}
		if err := pub.Flush(); err != nil {
			t.Fatal(err)
		}
		m, err := acmeSub.NextMsg(200 * time.Millisecond)
		got = err == nil && m.Subject == "orders.acme.after-restart"
	}
	if !got {
		t.Fatal("acme's reader on n1 never got acme's core message published on the restarted n3")
	}
	// A leak to globex would cross from n3 through the node's account:
	// the marker sent that way after it must arrive first.
	op, err := brokertest.DialOperator(a.c.Node(2))
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	expectMarkerFirst(t, op, "globex-read", globexGot)
}
