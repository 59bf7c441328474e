package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// A node restarted while a tenant's users are subscribed on the other
// nodes delivers the core messages that tenant's users publish on it to
// those subscribers, and to no other tenant's. Subscribers of a tenant
// added while it was down are disconnected once and subscribe again.
func TestClusterAuthTenantInterestAfterRestart(t *testing.T) {
	t.Parallel()
	a := startAuthCluster(t)
	a.add(
		semaq.UserAddRequest{Name: "acme-pub", Tenant: "acme", Role: semaq.RolePublisher, Subjects: []string{"orders.>"}},
		semaq.UserAddRequest{Name: "acme-read", Tenant: "acme", Role: semaq.RoleReader, Subjects: []string{"orders.>"}},
		semaq.UserAddRequest{Name: "globex-read", Tenant: "globex", Role: semaq.RoleReader, Subjects: []string{"orders.>"}},
	)
	// Subscribed on n1 before n3 goes: n3 learns of these subscriptions
	// only from n1's routes when they connect again.
	acme, acmeClosed := a.conn("acme-read", 0)
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
	// A tenant n3 has never seen, its reader subscribed on n1 while n3 is
	// down, with a client that reconnects.
	a.addAfterLoss(
		semaq.UserAddRequest{Name: "initech-pub", Tenant: "initech", Role: semaq.RolePublisher, Subjects: []string{"orders.>"}},
		semaq.UserAddRequest{Name: "initech-read", Tenant: "initech", Role: semaq.RoleReader, Subjects: []string{"orders.>"}},
	)
	initech, err := nats.Connect(a.c.Node(0).ClientURL(), nats.UserInfo("initech-read", a.keys["initech-read"]),
		nats.CustomInboxPrefix(semaq.UserInboxPrefix+"initech-read"), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(initech.Close)
	initechSub, err := initech.SubscribeSync("orders.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := initech.Flush(); err != nil {
		t.Fatal(err)
	}
	a.c.Restart(2)

	// No stream captures orders.>: these are core messages of each
	// tenant's account, carried from n3 to n1 only if n3 has n1's
	// interest in them.
	for _, tc := range []struct {
		tenant string
		sub    *nats.Subscription
	}{{"acme", acmeSub}, {"initech", initechSub}} {
		pub, _ := a.conn(tc.tenant+"-pub", 2)
		subject := "orders." + tc.tenant + ".after-restart"
		deadline := time.Now().Add(20 * time.Second)
		got := false
		for !got && time.Now().Before(deadline) {
			if err := pub.Publish(subject, []byte(`{"n":1}`)); err != nil {
				t.Fatal(err)
			}
			if err := pub.Flush(); err != nil {
				t.Fatal(err)
			}
			m, err := tc.sub.NextMsg(200 * time.Millisecond)
			got = err == nil && m.Subject == subject
		}
		if !got {
			t.Fatalf("%s's reader on n1 never got %s's core message published on the restarted n3", tc.tenant, tc.tenant)
		}
	}
	// n3 knew acme when its routes connected: acme's reader kept its
	// connection. (initech's was disconnected once and subscribed again,
	// unless n3's route to n1 connected only after n3 knew initech.)
	select {
	case <-acmeClosed:
		t.Fatal("acme's reader on n1 was disconnected")
	default:
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

// addAfterLoss adds users through n1 right after a node went away: an add
// that fails while n1's store recovers from the loss is tried again, and a
// user a timed-out add did write gets a new key.
func (a *authCluster) addAfterLoss(users ...semaq.UserAddRequest) {
	a.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, u := range users {
		a.c.Eventually(60*time.Second, "adding "+u.Name, func() error {
			r, err := a.admin.AddUser(ctx, u)
			if err != nil {
				// Written by an add that timed out: n1 serves it once
				// its store has caught up.
				if _, getErr := a.admin.UserInfo(ctx, u.Name); getErr != nil {
					return fmt.Errorf("add: %w; info: %w", err, getErr)
				}
				if r, err = a.admin.RotateKey(ctx, u.Name); err != nil {
					return err
				}
			}
			a.keys[u.Name] = r.Key
			return nil
		})
	}
}
