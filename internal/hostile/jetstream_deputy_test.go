package hostile

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// JetStream publishes as the NATS server, with no permissions, on subjects
// a client names: an API request's reply subject and a push consumer's
// deliver subject (docs/security.md, Subjects users choose). None of them
// may land in the node's account, where storage, advisories and the
// broker's own subjects are.

// forgedTargets are subjects of the node's account the broker acts on or
// stores from: a work queue's storage, a stream's storage, the
// dead-letter advisory of the queue's dispatcher, a cancel notice.
var forgedTargets = []string{
	"$SQ.w.q.forged",
	"$SQ.w.victim.forged",
	"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.Q.semaq-dispatch",
	"$SQ.QC.victim",
}

// jsAnswer asks JetStream's API on nc and returns its error, if any.
func jsAnswer(t *testing.T, nc *nats.Conn, subject string, body any) *jetstream.APIError {
	t.Helper()
	data, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	m, err := nc.Request(subject, data, 10*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", subject, err)
	}
	var resp struct {
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &resp); err != nil {
		t.Fatalf("%s: answer %q: %v", subject, m.Data, err)
	}
	return resp.Error
}

func pushConsumer(stream, deliver string) map[string]any {
	return map[string]any{"stream_name": stream, "config": map[string]any{
		"durable_name": "spy", "deliver_subject": deliver, "ack_policy": "none", "deliver_policy": "all"}}
}

// readerPushConsumer is a push consumer as a reader makes it: the create
// subject names its filter, which the NATS server checks against the
// reader's subjects.
func readerPushConsumer(name, deliver string) (string, map[string]any) {
	return "$JS.API.CONSUMER.CREATE.VICTIM." + name + ".victim.one", map[string]any{"stream_name": "VICTIM", "config": map[string]any{
		"durable_name": name, "deliver_subject": deliver, "ack_policy": "none", "filter_subject": "victim.one"}}
}

// pushIntoOwnInbox makes a push consumer of VICTIM into nc's own inbox, as
// stock clients make one, and reads the victim's message with it.
func pushIntoOwnInbox(t *testing.T, nc *nats.Conn) {
	t.Helper()
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	sub, err := js.SubscribeSync("victim.>", nats.BindStream("VICTIM"), nats.DeliverAll(), nats.AckNone())
	if err != nil {
		t.Fatalf("a push consumer into the maker's inbox: %v", err)
	}
	if m, err := sub.NextMsg(10 * time.Second); err != nil || string(m.Data) != `{"x":1}` {
		t.Fatalf("push consumer into the maker's inbox: %v %v", m, err)
	}
}

// TestJetStreamPublishesStayOutOfTheNodesAccount: with auth off, replies
// of DIRECT.GET, STREAM.MSG.GET, STREAM.INFO and a pull's MSG.NEXT on the
// node's subjects reach only the attacker's own account, push consumers
// delivering anywhere but the maker's inbox are refused, snapshots are
// closed, and the streams, queue and dead letters hold what they held.
func TestJetStreamPublishesStayOutOfTheNodesAccount(t *testing.T) {
	srv := brokertest.Start(t)
	c := brokertest.Connect(t, srv)
	victim(t, c)
	if _, err := c.AddQueue(ctxT(t), semaq.QueueConfig{Name: "Q", Subjects: []string{"q.>"}}); err != nil {
		t.Fatal(err)
	}
	watch := spy(t, srv, forgedTargets...)
	a := connectAttacker(t, srv)

	// Replies: the attacker listens where it pointed them, in its own
	// account, so it knows each answer was sent.
	mine := make(chan *nats.Msg, 256)
	for _, subj := range forgedTargets {
		if _, err := a.nc.ChanSubscribe(subj, mine); err != nil {
			t.Fatal(err)
		}
	}
	js, err := jetstream.New(a.nc)
	if err != nil {
		t.Fatal(err)
	}
	pull, err := js.CreateConsumer(ctxT(t), "VICTIM", jetstream.ConsumerConfig{Name: "pull", AckPolicy: jetstream.AckNonePolicy})
	if err != nil {
		t.Fatalf("a pull consumer with auth off: %v", err)
	}
	calls := []struct{ subject, body string }{
		{"$JS.API.DIRECT.GET.VICTIM", `{"seq":1}`},
		{"$JS.API.STREAM.MSG.GET.VICTIM", `{"seq":1}`},
		{"$JS.API.STREAM.INFO.VICTIM", ``},
		{"$JS.API.CONSUMER.MSG.NEXT.VICTIM." + pull.CachedInfo().Name, `{"batch":1,"no_wait":true}`},
	}
	want := 0
	for _, call := range calls {
		for _, reply := range forgedTargets {
			// MSG.NEXT: the first pull gets the one message, the rest a 404.
			if err := a.nc.PublishRequest(call.subject, reply, []byte(call.body)); err != nil {
				t.Fatal(err)
			}
			want++
		}
	}
	for got := 0; got < want; got++ {
		select {
		case <-mine:
		case <-time.After(10 * time.Second):
			t.Fatalf("the attacker's own account got %d of %d answers", got, want)
		}
	}

	// Push consumers: every deliver subject outside the maker's inbox is
	// refused, a stream's public subject (a loop through the ingress)
	// included.
	for _, deliver := range append(append([]string{}, forgedTargets...), "victim.loop", "q.loop", "elsewhere.x") {
		e := jsAnswer(t, a.nc, "$JS.API.CONSUMER.DURABLE.CREATE.VICTIM.spy", pushConsumer("VICTIM", deliver))
		if e == nil || !strings.Contains(e.Description, "deliver_subject") {
			t.Fatalf("push consumer delivering to %s: got %v, want a refusal naming deliver_subject", deliver, e)
		}
		e = jsAnswer(t, a.nc, "$JS.API.CONSUMER.CREATE.VICTIM.spy", pushConsumer("VICTIM", deliver))
		if e == nil || !strings.Contains(e.Description, "deliver_subject") {
			t.Fatalf("push consumer (create form) delivering to %s: got %v, want a refusal", deliver, e)
		}
	}
	// A snapshot is delivered to a subject the request names: closed.
	if err := a.nc.PublishRequest("$JS.API.STREAM.SNAPSHOT.VICTIM", "_INBOX.snap",
		[]byte(`{"deliver_subject":"$SQ.w.victim.forged","chunk_size":1024}`)); err != nil {
		t.Fatal(err)
	}
	a.refused(t, "$JS.API.STREAM.SNAPSHOT.VICTIM")

	pushIntoOwnInbox(t, a.nc)

	noneOn(t, watch)
	victimHeld(t, c)
	if q, err := c.QueueInfo(ctxT(t), "Q"); err != nil || q.Status.Queued+q.Status.Held+q.Status.Delayed != 0 {
		t.Fatalf("queue Q after the attack: %+v %v, want nothing queued", q, err)
	}
	if st, err := internalJS(t, srv).Stream(ctxT(t), semaq.DLQStream); err != nil || st.CachedInfo().State.Msgs != 0 {
		t.Fatalf("SQ_DLQ after the attack: %v, want empty", err)
	}
}

// TestPushConsumersStayInTheirMakersInbox: with auth on, a tenant reader's
// push consumer delivers into its own inbox or is refused; refused ones
// are not made, and a refused one into storage stores nothing.
func TestPushConsumersStayInTheirMakersInbox(t *testing.T) {
	srv, admin := authBroker(t)
	brokertest.AddStream(t, admin, "VICTIM", "victim.>")
	if _, err := admin.Publish(ctxT(t), "victim.one", []byte(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
	key := addUser(t, admin, semaq.UserAddRequest{Name: "mallory", Role: semaq.RoleReader, Tenant: "acme", Subjects: []string{"victim.>"}})
	nc, err := dialKey(t, srv, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	watch := spy(t, srv, append(forgedTargets, "_INBOX_admin.>")...)
	for _, deliver := range append(append([]string{}, forgedTargets...), "_INBOX_admin.x", "_INBOX.x", "victim.loop") {
		subj, body := readerPushConsumer("spy", deliver)
		e := jsAnswer(t, nc, subj, body)
		if e == nil || !strings.Contains(e.Description, "deliver_subject") || e.Code != 403 && e.Code != 400 {
			t.Fatalf("reader's push consumer delivering to %s: got %v, want a refusal naming deliver_subject", deliver, e)
		}
	}
	ijs := internalJS(t, srv)
	if _, err := ijs.Consumer(ctxT(t), "VICTIM", "spy"); err == nil {
		t.Fatal("a refused consumer exists")
	}
	// Its own inbox: accepted, and it gets the stream's message.
	inbox := semaq.UserInboxPrefix + "mallory.push"
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	subj, body := readerPushConsumer("own", inbox)
	if e := jsAnswer(t, nc, subj, body); e != nil {
		t.Fatalf("reader's push consumer into its own inbox: %v", e)
	}
	if m, err := sub.NextMsg(10 * time.Second); err != nil || string(m.Data) != `{"x":1}` {
		t.Fatalf("push consumer into its own inbox: %v %v", m, err)
	}
	noneOn(t, watch)
	info, err := admin.StreamInfo(ctxT(t), "VICTIM")
	if err != nil || info.State.Messages != 1 {
		t.Fatalf("victim stream after the attack: %+v %v, want 1 message", info, err)
	}
}

// TestJetStreamGuardOnACluster: on three nodes, a push consumer made
// through one node into storage is refused, one into the maker's inbox
// delivers what another node's client published, and a reply pointed at
// storage through a third node stores nothing.
func TestJetStreamGuardOnACluster(t *testing.T) {
	t.Parallel()
	cl := brokertest.StartCluster(t, 3)
	c := brokertest.Connect(t, cl.Node(0))
	victim(t, c)
	watch := spy(t, cl.Node(0), forgedTargets...)
	a := connectAttacker(t, cl.Node(1))
	e := jsAnswer(t, a.nc, "$JS.API.CONSUMER.DURABLE.CREATE.VICTIM.spy", pushConsumer("VICTIM", "$SQ.w.victim.forged"))
	if e == nil || !strings.Contains(e.Description, "deliver_subject") {
		t.Fatalf("push consumer into storage through node 2: got %v, want a refusal", e)
	}
	b := connectAttacker(t, cl.Node(2))
	mine, err := b.nc.SubscribeSync("$SQ.w.victim.forged")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.nc.PublishRequest("$JS.API.DIRECT.GET.VICTIM", "$SQ.w.victim.forged", []byte(`{"seq":1}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := mine.NextMsg(10 * time.Second); err != nil {
		t.Fatalf("the direct get's answer in the attacker's own account: %v", err)
	}
	pushIntoOwnInbox(t, a.nc)
	noneOn(t, watch)
	victimHeld(t, c)
}

// TestNoRequestPublishesOnReservedSubjects is a property test: requests
// drawn at random (seeded, so a failure repeats) from the JetStream and
// SemaQ calls a client without credentials may make, each with a reply
// subject, and a deliver subject where the call takes one, drawn from the
// node's reserved subjects, never make anything publish on those subjects
// in the node's account.
func TestNoRequestPublishesOnReservedSubjects(t *testing.T) {
	srv := brokertest.Start(t)
	c := brokertest.Connect(t, srv)
	victim(t, c)
	if _, err := c.AddQueue(ctxT(t), semaq.QueueConfig{Name: "Q", Subjects: []string{"q.>"}}); err != nil {
		t.Fatal(err)
	}
	targets := append([]string{
		"$KV.SQ_ROUTES.evil", "$SQ.dlq.VICTIM.1", "_SQ_ACK.x.y", "$SQ.T.w.x", "$JS.API.STREAM.DELETE.VICTIM",
		"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.VICTIM.x",
	}, forgedTargets...)
	watch := spy(t, srv, targets...)
	a := connectAttacker(t, srv)
	js, err := jetstream.New(a.nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateConsumer(ctxT(t), "VICTIM", jetstream.ConsumerConfig{Name: "pull", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	calls := []func(r *rand.Rand, target string) (subject string, body any){
		func(*rand.Rand, string) (string, any) { return "$JS.API.DIRECT.GET.VICTIM", map[string]any{"seq": 1} },
		func(*rand.Rand, string) (string, any) {
			return "$JS.API.STREAM.MSG.GET.VICTIM", map[string]any{"seq": 1}
		},
		func(*rand.Rand, string) (string, any) { return "$JS.API.STREAM.INFO.VICTIM", nil },
		func(*rand.Rand, string) (string, any) { return "$JS.API.STREAM.NAMES", nil },
		func(*rand.Rand, string) (string, any) { return "$JS.API.INFO", nil },
		func(*rand.Rand, string) (string, any) { return "$JS.API.CONSUMER.INFO.VICTIM.pull", nil },
		func(*rand.Rand, string) (string, any) {
			return "$JS.API.CONSUMER.MSG.NEXT.VICTIM.pull", map[string]any{"batch": 1, "no_wait": true}
		},
		func(r *rand.Rand, target string) (string, any) {
			name := fmt.Sprintf("c%d", r.IntN(1000))
			return "$JS.API.CONSUMER.CREATE.VICTIM." + name, pushConsumer("VICTIM", target)
		},
		func(r *rand.Rand, target string) (string, any) {
			name := fmt.Sprintf("d%d", r.IntN(1000))
			return "$JS.API.CONSUMER.DURABLE.CREATE.VICTIM." + name, pushConsumer("VICTIM", target)
		},
		func(r *rand.Rand, target string) (string, any) {
			name := fmt.Sprintf("f%d", r.IntN(1000))
			return "$JS.API.CONSUMER.CREATE.VICTIM." + name + ".victim.one", pushConsumer("VICTIM", target)
		},
		func(*rand.Rand, string) (string, any) { return semaq.APIStreamList, nil },
		func(*rand.Rand, string) (string, any) { return fmt.Sprintf(semaq.APIQueueInfoT, "Q"), nil },
		func(*rand.Rand, string) (string, any) {
			return semaq.APIFilterStart, map[string]any{"subject": "victim.>", "filter": "true", "deliver_subject": "_INBOX.f"}
		},
		func(*rand.Rand, string) (string, any) { return "victim.x", map[string]any{"x": 1} },
	}
	r := rand.New(rand.NewPCG(25, 2))
	stored := uint64(1) // victim.one
	for range 400 {
		reply, target := targets[r.IntN(len(targets))], targets[r.IntN(len(targets))]
		subject, body := calls[r.IntN(len(calls))](r, target)
		if subject == "victim.x" {
			stored++ // a publish the ingress takes: its ack goes to the attacker's own account
		}
		data := []byte{}
		if body != nil {
			data, _ = json.Marshal(body)
		}
		if err := a.nc.PublishRequest(subject, reply, data); err != nil {
			t.Fatal(err)
		}
	}
	// Each call has an answer on the attacker's own inbox, in order
	// behind the random ones of its kind: once all answered, every random
	// call has been handled.
	for i, call := range calls {
		subject, body := call(r, "_INBOX.after")
		data := []byte{}
		if body != nil {
			data, _ = json.Marshal(body)
		}
		if _, err := a.nc.Request(subject, data, 10*time.Second); err != nil {
			t.Fatalf("call %d (%s) after the random ones: %v", i, subject, err)
		}
	}
	stored++ // the last call's publish
	noneOn(t, watch)
	info, err := c.StreamInfo(ctxT(t), "VICTIM")
	if err != nil || info.State.Messages != stored {
		t.Fatalf("victim stream after the random calls: %+v %v, want %d messages", info, err, stored)
	}
}
