package broker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// With auth on, each message of a batch is the sender's: checked against
// its publish grants and stamped with its tenant, as a publish of its own
// would be. The broker appends batches with its own rights, so a batch is
// where a publisher would try to reach another tenant's subjects.
func TestBatchAuthTenants(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, brokertest.WithAuth)
	admin := brokertest.ConnectKey(t, s, brokertest.AdminKey(t, s))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	brokertest.AddStream(t, admin, "TB", "tb.>")
	keys := map[string]string{}
	for _, u := range []semaq.UserAddRequest{
		{Name: "acme-pub", Tenant: "acme", Role: semaq.RolePublisher, Subjects: []string{"tb.acme.>"}},
		{Name: "globex-pub", Tenant: "globex", Role: semaq.RolePublisher, Subjects: []string{"tb.globex.>"}},
		{Name: "acme-read", Tenant: "acme", Role: semaq.RoleReader, Subjects: []string{"tb.acme.>"}},
	} {
		r, err := admin.AddUser(ctx, u)
		if err != nil {
			t.Fatalf("add user %s: %v", u.Name, err)
		}
		keys[u.Name] = r.Key
	}
	count := func() uint64 {
		t.Helper()
		info, err := admin.StreamInfo(ctx, "TB")
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Messages
	}
	op, err := brokertest.DialOperator(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(op.Close)
	ojs, err := jetstream.New(op)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := ojs.Stream(ctx, "TB")
	if err != nil {
		t.Fatal(err)
	}
	noGlobex := func() {
		t.Helper()
		if m, err := tb.GetLastMsgForSubject(ctx, "tb.globex.>"); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Fatalf("a message landed on globex's subjects: %v %v", m, err)
		}
	}

	pub := brokertest.ConnectKey(t, s, keys["acme-pub"])
	ack, err := pub.PublishBatch(ctx, []*nats.Msg{
		batchMsg("tb.acme.1", `{"n":1}`),
		batchMsg("tb.globex.1", `{"n":2}`),
		batchMsg("tb.acme.2", `{"n":3}`, semaq.HdrTenant, "globex"),
		batchMsg("tb.acme.3", `{"n":4}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if ack.Stored != 2 || ack.Refused != 2 {
		t.Fatalf("fast batch: %+v, want 2 stored and 2 refused", ack)
	}
	for i, say := range map[int]string{1: "tb.globex.1", 2: "globex"} {
		if e := ack.Results[i].Error; !errors.Is(e, semaq.ErrForbidden) || !strings.Contains(e.Description, say) || !strings.Contains(e.Description, "acme-pub") {
			t.Fatalf("result %d: %v, want a refusal naming %s and the user", i, e, say)
		}
	}
	for _, i := range []int{0, 3} {
		m, err := tb.GetMsg(ctx, ack.Results[i].Sequence)
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(semaq.HdrTenant) != "acme" || m.Header.Get(semaq.HdrPublisher) != "acme-pub" {
			t.Fatalf("message %d stored with headers %v, want acme's and acme-pub's", i, m.Header)
		}
	}
	noGlobex()

	ack, err = pub.PublishBatch(ctx, []*nats.Msg{batchMsg("tb.acme.4", `{}`), batchMsg("tb.globex.2", `{}`)}, client.Atomic())
	if !errors.Is(err, semaq.ErrBatchRefused) || ack == nil || ack.Index == nil || *ack.Index != 1 || !errors.Is(ack.Results[1].Error, semaq.ErrForbidden) {
		t.Fatalf("atomic batch reaching globex: %v %+v, want it refused naming message 1", err, ack)
	}
	if n := count(); n != 2 {
		t.Fatalf("TB holds %d messages, want the fast batch's 2", n)
	}

	// A reader publishes nothing, batches included.
	reader := brokertest.ConnectKey(t, s, keys["acme-read"])
	if _, err := reader.PublishBatch(ctx, []*nats.Msg{batchMsg("tb.acme.5", `{}`)}); !errors.Is(err, semaq.ErrForbidden) {
		t.Fatalf("reader's batch: %v, want ErrForbidden", err)
	}
	// Nor through a raw connection: the NATS server refuses the frame and
	// a stock batch's message, before the broker sees them.
	errs := make(chan error, 8)
	rnc, err := nats.Connect(s.ClientURL(), nats.UserInfo("acme-read", keys["acme-read"]), nats.CustomInboxPrefix(semaq.UserInboxPrefix+"acme-read"),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { errs <- err }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rnc.Close)
	frame := semaq.AppendBatchFrame(nil, true, []semaq.BatchMsg{{Subject: "tb.acme.x", Data: []byte("{}")}})
	if err := rnc.PublishRequest(semaq.APIPublishBatch, rnc.NewRespInbox(), frame); err != nil {
		t.Fatal(err)
	}
	sm := batchMsg("tb.acme.x", `{}`, semaq.HdrBatchID, "r", semaq.HdrBatchSeq, "1", semaq.HdrBatchCommit, "1")
	sm.Reply = rnc.NewRespInbox()
	if err := rnc.PublishMsg(sm); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{semaq.APIPublishBatch, "tb.acme.x"} {
		select {
		case err := <-errs:
			if !strings.Contains(err.Error(), "Permissions Violation") || !strings.Contains(err.Error(), subj) {
				t.Fatalf("reader's publish on %s: %v, want a permissions violation", subj, err)
			}
		case <-ctx.Done():
			t.Fatalf("reader's publish on %s was not refused", subj)
		}
	}

	// A stock client's batch: the NATS server drops the message outside
	// the grants, so the batch has a gap and is refused whole.
	stock := func(name string) jetstream.JetStream {
		nc, err := nats.Connect(s.ClientURL(), nats.UserInfo(name, keys[name]), nats.CustomInboxPrefix(semaq.UserInboxPrefix+name))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	_, err = jetstreamext.PublishMsgBatch(ctx, stock("acme-pub"), []*nats.Msg{
		batchMsg("tb.acme.6", `{}`), batchMsg("tb.globex.3", `{}`), batchMsg("tb.acme.7", `{}`),
	})
	if err == nil || !strings.Contains(err.Error(), "message 3 came after message 1") {
		t.Fatalf("stock batch reaching globex: %v, want the gap named", err)
	}
	_, err = jetstreamext.PublishMsgBatch(ctx, stock("acme-pub"), []*nats.Msg{
		batchMsg("tb.acme.8", `{}`), batchMsg("tb.acme.9", `{}`, semaq.HdrTenant, "globex"),
	})
	if err == nil || !strings.Contains(err.Error(), "message 2 on tb.acme.9 refused") {
		t.Fatalf("stock batch for globex: %v, want message 2 named", err)
	}
	// globex's own publisher reaches its subjects, batches included.
	ok, err := jetstreamext.PublishMsgBatch(ctx, stock("globex-pub"), []*nats.Msg{batchMsg("tb.globex.4", `{}`), batchMsg("tb.globex.5", `{}`)})
	if err != nil || ok.BatchSize != 2 {
		t.Fatalf("globex's own stock batch: %+v %v", ok, err)
	}
	if n := count(); n != 4 {
		t.Fatalf("TB holds %d messages, want 4: acme's fast batch's 2, globex's stock batch's 2", n)
	}
	m, err := tb.GetLastMsgForSubject(ctx, "tb.globex.>")
	if err != nil || m.Header.Get(semaq.HdrPublisher) != "globex-pub" || m.Header.Get(semaq.HdrTenant) != "globex" {
		t.Fatalf("the last message on globex's subjects: %v %v, want globex-pub's", m, err)
	}
}
