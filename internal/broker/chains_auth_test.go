package broker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/provenance"
	"github.com/semaq/semaq/semaq"
)

// With auth on, a session's chain is its tenant's: a publisher's messages
// are chained under the tenant the broker stamps, whatever session id it
// names, so one tenant cannot extend, read the head of, or break the
// order of another's session; and no client writes a head record or a
// link's headers itself.
func TestChainAuthTenants(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, brokertest.WithAuth)
	admin := brokertest.ConnectKey(t, s, brokertest.AdminKey(t, s))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.AddStream(ctx, semaq.StreamConfig{Name: "TC", Subjects: []string{"tc.>"}, Provenance: semaq.ProvenanceSession, SessionOrder: semaq.SessionOrderStrictSeq}); err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, u := range []semaq.UserAddRequest{
		{Name: "acme-pub", Tenant: "acme", Role: semaq.RolePublisher, Subjects: []string{"tc.>"}},
		{Name: "globex-pub", Tenant: "globex", Role: semaq.RolePublisher, Subjects: []string{"tc.>"}},
		{Name: "globex-read", Tenant: "globex", Role: semaq.RoleReader, Subjects: []string{"tc.>"}},
	} {
		r, err := admin.AddUser(ctx, u)
		if err != nil {
			t.Fatalf("add user %s: %v", u.Name, err)
		}
		keys[u.Name] = r.Key
	}
	acme := brokertest.ConnectKey(t, s, keys["acme-pub"])
	globex := brokertest.ConnectKey(t, s, keys["globex-pub"])
	seq := func(n string) client.PublishOption { return client.WithHeader(semaq.HdrSeq, n) }
	for _, n := range []string{"1", "2", "3"} {
		if _, err := acme.Publish(ctx, "tc.x", []byte("a"), client.WithSession("s-1"), seq(n)); err != nil {
			t.Fatal(err)
		}
	}
	// globex's session s-1 is its own: AI-Seq 1 is not late there.
	if _, err := globex.Publish(ctx, "tc.x", []byte("g"), client.WithSession("s-1"), seq("1")); err != nil {
		t.Fatalf("globex's own session s-1: %v", err)
	}
	// Naming acme's tenant is refused before any chain is touched.
	_, err := globex.Publish(ctx, "tc.x", []byte("g"), client.WithSession("s-1"), seq("4"), client.WithTenant("acme"))
	if !errors.Is(err, semaq.ErrForbidden) {
		t.Fatalf("globex publishing into acme's session: %v", err)
	}
	// A client may set none of a chain's headers.
	for _, h := range []string{provenance.HdrHash, provenance.HdrPrevHash, provenance.HdrChainSeq, provenance.HdrSignature, provenance.HdrKeyID, semaq.HdrChainLinks, "ai-chain-order"} {
		_, err := acme.Publish(ctx, "tc.x", []byte("a"), client.WithSession("s-1"), seq("9"), client.WithHeader(h, "1"))
		if !errors.Is(err, semaq.ErrEnvelope) || !strings.Contains(err.Error(), "stamped by the broker") {
			t.Fatalf("publish with %s: %v", h, err)
		}
	}
	// Heads: a user reads its own tenant's only.
	head := func(c *client.Client, tenant string) (*semaq.ProvenanceHead, *semaq.APIError) {
		h, err := c.ProvenanceHead(ctx, "TC", tenant, "s-1")
		var ae *semaq.APIError
		if err != nil && !errors.As(err, &ae) {
			t.Fatal(err)
		}
		return h, ae
	}
	reader := brokertest.ConnectKey(t, s, keys["globex-read"])
	if h, e := head(reader, ""); e != nil || h.Tenant != "globex" || h.Links != 1 {
		t.Fatalf("globex reader, own head: %+v %v", h, e)
	}
	if _, e := head(reader, "acme"); e == nil || e.ErrCode != semaq.ErrCodeForbidden {
		t.Fatalf("globex reader asking for acme's head: %v", e)
	}
	if h, e := head(admin, "acme"); e != nil || h.Links != 3 || h.Order != "3" {
		t.Fatalf("admin, acme's head: %+v %v", h, e)
	}

	// The head records' subjects are the broker's: a client publishing a
	// forged head record (to roll the chain back) reaches no stream.
	forged := nats.NewMsg("$SQ.w." + semaq.ChainHeadSubject("TC", provenance.SessionKey("acme", "s-1")))
	forged.Header.Set(semaq.HdrChainLinks, "0")
	forged.Header.Set("Nats-Rollup", "sub")
	if m, err := acme.Conn().RequestMsg(forged, time.Second); err == nil {
		t.Fatalf("a forged head record was answered: %s", m.Data)
	}
	plain := nats.NewMsg(semaq.ChainHeadSubject("TC", provenance.SessionKey("acme", "s-1")))
	if _, err := acme.PublishMsg(ctx, plain); err == nil {
		t.Fatal("a publish on a head record's public subject was stored")
	}
	op, err := brokertest.DialOperator(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Close)
	js, err := jetstream.New(op)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, "TC")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := st.GetLastMsgForSubject(ctx, semaq.ChainHeadSubject("TC", provenance.SessionKey("acme", "s-1")))
	if err != nil || rec.Header.Get(semaq.HdrChainLinks) != "3" {
		t.Fatalf("acme's head record after the forgeries: %v %v", rec, err)
	}
	if _, err := acme.Publish(ctx, "tc.x", []byte("a"), client.WithSession("s-1"), seq("3")); !errors.Is(err, semaq.ErrSessionOrder) {
		t.Fatalf("AI-Seq 3 again after the forgeries: %v", err)
	}
}
