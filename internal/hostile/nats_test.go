package hostile

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// attacker is a stock nats.go connection as the public user, recording the
// errors the server sends it (permission violations arrive that way).
type attacker struct {
	nc   *nats.Conn
	mu   sync.Mutex
	errs []error
	got  chan struct{}
}

func connectAttacker(t *testing.T, srv *broker.Server) *attacker {
	t.Helper()
	a := &attacker{got: make(chan struct{}, 64)}
	nc, err := nats.Connect(srv.ClientURL(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		a.mu.Lock()
		a.errs = append(a.errs, err)
		a.mu.Unlock()
		select {
		case a.got <- struct{}{}:
		default:
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	a.nc = nc
	return a
}

// refused waits until the server has refused an operation naming subject.
func (a *attacker) refused(t *testing.T, subject string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		a.mu.Lock()
		for _, err := range a.errs {
			if strings.Contains(strings.ToLower(err.Error()), "permissions violation") && strings.Contains(err.Error(), subject) {
				a.mu.Unlock()
				return
			}
		}
		errs := fmt.Sprint(a.errs)
		a.mu.Unlock()
		select {
		case <-a.got:
		case <-deadline:
			t.Fatalf("the server did not refuse %s; errors seen: %s", subject, errs)
		}
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// spy listens with the broker's own rights, so it sees what anyone
// (the broker included) publishes on subjects.
func spy(t *testing.T, srv *broker.Server, subjects ...string) <-chan *nats.Msg {
	t.Helper()
	nc, err := brokertest.DialOperator(srv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ch := make(chan *nats.Msg, 1024)
	for _, s := range subjects {
		if _, err := nc.ChanSubscribe(s, ch); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return ch
}

func noneOn(t *testing.T, ch <-chan *nats.Msg) {
	t.Helper()
	select {
	case m := <-ch:
		t.Fatalf("the broker published on %s (%q)", m.Subject, m.Data)
	default:
	}
}

func victim(t *testing.T, c *client.Client) {
	t.Helper()
	brokertest.AddStream(t, c, "VICTIM", "victim.>")
	if _, err := c.Publish(ctxT(t), "victim.one", []byte(`{"x":1}`)); err != nil {
		t.Fatal(err)
	}
}

func victimHeld(t *testing.T, c *client.Client) {
	t.Helper()
	info, err := c.StreamInfo(ctxT(t), "VICTIM")
	if err != nil {
		t.Fatalf("victim stream: %v", err)
	}
	if info.State.Messages != 1 {
		t.Fatalf("victim stream has %d messages, want 1", info.State.Messages)
	}
}

// Reply subjects that would make the broker act with its own rights.
var deputyReplies = []string{
	"$JS.API.STREAM.DELETE.VICTIM",
	"$JS.API.STREAM.PURGE.VICTIM",
	"$JS.API.STREAM.DELETE." + semaq.DLQStream,
	"$KV.SQ_ROUTES.evil",
	"$SQ.w.victim.forged",
	"_SQ_ACK.x.$JS.API.STREAM.DELETE.VICTIM",
	"$SYS.REQ.SERVER.PING.CONNZ",
}

// TestConfusedDeputyReplySubjects: requests and publishes whose reply
// subject names a system subject get no answer there, and nothing the
// answer would have done happens.
func TestConfusedDeputyReplySubjects(t *testing.T) {
	srv := brokertest.Start(t)
	c := brokertest.Connect(t, srv)
	victim(t, c)
	if _, err := c.AddQueue(ctxT(t), semaq.QueueConfig{Name: "Q", Subjects: []string{"q.>"}}); err != nil {
		t.Fatal(err)
	}
	watch := spy(t, srv, "$JS.API.STREAM.DELETE.>", "$JS.API.STREAM.PURGE.>", "$KV.SQ_ROUTES.>", "$SQ.w.victim.forged", "_SQ_ACK.x.>", "$SYS.REQ.>")
	a := connectAttacker(t, srv)

	requests := []struct{ subject, body string }{
		{fmt.Sprintf(semaq.APIQueueFetchT, "Q"), `{"worker":"w1","max":1}`}, // 408 "no requests" at once
		{semaq.APIStreamList, ``},
		{fmt.Sprintf(semaq.APIStreamInfoT, "VICTIM"), ``},
		{semaq.APIInfo, ``},
		{"victim.refused", ``}, // refused: bad envelope below
		{"victim.accepted", `{"x":2}`},
	}
	for _, r := range requests {
		for _, reply := range deputyReplies {
			m := &nats.Msg{Subject: r.subject, Reply: reply, Data: []byte(r.body), Header: nats.Header{}}
			if r.subject == "victim.refused" {
				m.Header.Set("AI-Priority", "urgent")
			}
			if err := a.nc.PublishMsg(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The broker handles each subject's messages in order: once these
	// answer, the hostile ones before them have been handled.
	for _, r := range requests[:4] {
		if _, err := a.nc.Request(r.subject, []byte(r.body), 10*time.Second); err != nil {
			t.Fatalf("legitimate request on %s after the attack: %v", r.subject, err)
		}
	}
	js, _ := jetstream.New(a.nc)
	if _, err := js.Publish(ctxT(t), "victim.after", []byte(`{"x":3}`)); err != nil {
		t.Fatalf("legitimate publish after the attack: %v", err)
	}
	noneOn(t, watch)
	info, err := c.StreamInfo(ctxT(t), "VICTIM")
	if err != nil {
		t.Fatalf("victim stream: %v", err)
	}
	// victim.one, victim.after and the accepted publishes: a client's
	// publish reaches the ingress through its account's import, with the
	// server's _R_ reply in place of the one it named, whose PubAck goes
	// back to that subject in the client's own account (the spy, in the
	// node's account, saw nothing).
	if want := uint64(2 + len(deputyReplies)); info.State.Messages != want {
		t.Fatalf("victim stream has %d messages, want %d", info.State.Messages, want)
	}
	ijs := internalJS(t, srv)
	if _, err := ijs.Stream(ctxT(t), semaq.DLQStream); err != nil {
		t.Fatalf("SQ_DLQ: %v", err)
	}
}

func internalJS(t *testing.T, srv *broker.Server) jetstream.JetStream {
	t.Helper()
	nc, err := brokertest.DialOperator(srv)
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

// TestDeliverSubjectRelay: a filtered or key-shared subscription cannot
// make the broker deliver into its own namespaces (the ack router once
// forwarded such deliveries with internal rights).
func TestDeliverSubjectRelay(t *testing.T) {
	srv := brokertest.Start(t)
	c := brokertest.Connect(t, srv)
	victim(t, c)
	a := connectAttacker(t, srv)
	for _, deliver := range []string{
		"_SQ_ACK.abc.$JS.API.STREAM.DELETE.VICTIM",
		"_SQ_LAT.abc.1.2.$JS.API.STREAM.DELETE.VICTIM",
		"$JS.API.STREAM.UPDATE.VICTIM",
		"$SQ.w.victim",
		"_INBOX.*",
	} {
		for _, api := range []struct{ subject, body string }{
			{semaq.APIFilterStart, fmt.Sprintf(`{"subject":"victim.>","filter":"true","deliver_subject":%q}`, deliver)},
			{semaq.APIKeySharedJoin, fmt.Sprintf(`{"subject":"victim.>","group":"g1","member":"m1","key":"session","deliver_subject":%q}`, deliver)},
		} {
			resp, err := a.nc.Request(api.subject, []byte(api.body), 10*time.Second)
			if err != nil {
				t.Fatalf("%s with deliver_subject %s: %v", api.subject, deliver, err)
			}
			var e semaq.ErrorReply
			if json.Unmarshal(resp.Data, &e) != nil || e.Error == nil || e.Error.Code != 400 {
				t.Fatalf("%s with deliver_subject %s: got %s, want a 400 error", api.subject, deliver, resp.Data)
			}
			if !strings.Contains(e.Error.Description, "deliver_subject") {
				t.Fatalf("error does not name deliver_subject: %s", e.Error.Description)
			}
		}
	}
	victimHeld(t, c)
}

// TestInternalConsumersClosed: the dispatcher's consumer cannot be deleted,
// paused, redefined, pulled from or acked by a public user, and the queue
// keeps every job.
func TestInternalConsumersClosed(t *testing.T) {
	srv := brokertest.Start(t)
	c := brokertest.Connect(t, srv)
	if _, err := c.AddQueue(ctxT(t), semaq.QueueConfig{Name: "Q", Subjects: []string{"q.>"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctxT(t), "q.job", []byte(`{"prompt":"hi"}`), client.WithMsgID("job-1")); err != nil {
		t.Fatal(err)
	}
	a := connectAttacker(t, srv)
	d := reserved.DispatchConsumer
	attacks := []struct{ subject, body string }{
		{"$JS.API.CONSUMER.DELETE.Q." + d, ``},
		{"$JS.API.CONSUMER.PAUSE.Q." + d, `{"pause_until":"2999-01-01T00:00:00Z"}`},
		{"$JS.API.CONSUMER.MSG.NEXT.Q." + d, `{"batch":10,"no_wait":true}`},
		{"$JS.API.CONSUMER.CREATE.Q." + d, `{"stream_name":"Q","config":{"durable_name":"` + d + `","ack_policy":"none"}}`},
		{"$JS.API.CONSUMER.DURABLE.CREATE.Q." + d, `{"stream_name":"Q","config":{"durable_name":"` + d + `"}}`},
		{"$JS.ACK.Q." + d + ".1.1.1.1700000000000000000.0", `+ACK`},
		{"$JS.API.CONSUMER.DELETE." + semaq.DLQStream + ".x", ``},
		{"$JS.API.STREAM.LEADER.STEPDOWN.Q", ``},
	}
	for _, at := range attacks {
		if err := a.nc.Publish(at.subject, []byte(at.body)); err != nil {
			t.Fatal(err)
		}
		a.refused(t, at.subject)
	}
	// The job is still there for a worker.
	jobs, err := c.Fetch(ctxT(t), "Q", client.FetchMax(1), client.FetchWait(5*time.Second))
	if err != nil || len(jobs) != 1 || jobs[0].ID != "job-1" {
		t.Fatalf("fetch after the attacks: %v, %d jobs", err, len(jobs))
	}
	if err := jobs[0].Ack(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	info, err := c.QueueInfo(ctxT(t), "Q")
	if err != nil {
		t.Fatal(err)
	}
	if info.Status.Queued+info.Status.Held != 0 {
		t.Fatalf("queue holds %d+%d after the ack, want nothing", info.Status.Queued, info.Status.Held)
	}
}

// TestInternalSubjectsClosed: subjects only the broker writes, and the
// system account, are closed to public users; job answers cannot be
// sniffed.
func TestInternalSubjectsClosed(t *testing.T) {
	srv := brokertest.Start(t)
	a := connectAttacker(t, srv)
	for _, subj := range []string{
		semaq.QueueCancelPrefix + "worker-1",
		"$SYS.REQ.SERVER.PING.CONNZ",
		"$SYS.REQ.SERVER.PING",
		"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.Q.semaq-dispatch",
		reserved.StoragePrefix + "victim.x",
		semaq.DLQPrefix + "Q.x",
		"$KV.SQ_ROUTES.r1",
		semaq.TokenChunkSubject("", "victim"),
		semaq.TokenEndSubject("acme", "victim"),
	} {
		if err := a.nc.Publish(subj, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		a.refused(t, subj)
	}
	for _, subj := range []string{semaq.QueueAckPrefix + ">", semaq.QueueAckPrefix + "Q.>", "$SYS.>", "_SQ_DGET.>", "_SQ_ACK.>", semaq.TokenWritePrefix + ">"} {
		if _, err := a.nc.SubscribeSync(subj); err != nil {
			t.Fatal(err)
		}
		a.refused(t, subj)
	}
}

// TestJobAnswersNotSniffable: a public subscriber to ">" does not see the
// subjects workers answer jobs on (they carry the job's lease), nor the
// broker's own inboxes (the dispatcher reads every payload back there).
func TestJobAnswersNotSniffable(t *testing.T) {
	srv := brokertest.Start(t)
	c := brokertest.Connect(t, srv)
	if _, err := c.AddQueue(ctxT(t), semaq.QueueConfig{Name: "Q", Subjects: []string{"q.>"}}); err != nil {
		t.Fatal(err)
	}
	a := connectAttacker(t, srv)
	all, err := a.nc.SubscribeSync(">")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := c.Publish(ctxT(t), "q.job", []byte(`{}`), client.WithMsgID(fmt.Sprint("job-", i))); err != nil {
			t.Fatal(err)
		}
		jobs, err := c.Fetch(ctxT(t), "Q", client.FetchMax(1), client.FetchWait(5*time.Second))
		if err != nil || len(jobs) != 1 {
			t.Fatalf("fetch: %v", err)
		}
		if err := jobs[0].Ack(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	// A marker after the answers: everything before it has been routed.
	if err := c.Conn().Publish("marker.end", nil); err != nil {
		t.Fatal(err)
	}
	for {
		m, err := all.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("waiting for the marker: %v", err)
		}
		if strings.HasPrefix(m.Subject, semaq.QueueAckPrefix) || strings.HasPrefix(m.Subject, "_SQ_") {
			// Job answers carry the lease; _SQ_DGET carries the payloads
			// the dispatcher reads back; _SQ_ACK the acks it forwards.
			t.Fatalf("a public subscriber saw the broker's own traffic on %s", m.Subject)
		}
		if m.Subject == "marker.end" {
			return
		}
	}
}

// TestMalformedSubjectsRefused: wildcard and malformed subjects are not
// stored.
func TestMalformedSubjectsRefused(t *testing.T) {
	srv := brokertest.Start(t)
	c := brokertest.Connect(t, srv)
	victim(t, c)
	a := connectAttacker(t, srv)
	js, _ := jetstream.New(a.nc)
	for _, subj := range []string{"victim.*", "victim.a.>", "victim.\xff"} {
		_, err := js.Publish(ctxT(t), subj, []byte(`{}`))
		if err == nil {
			t.Fatalf("publish to %q was stored", subj)
		}
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.Code != 400 {
			t.Fatalf("publish to %q: %v, want a 400 naming the subject", subj, err)
		}
	}
	victimHeld(t, c)
}

// TestPoisonHeadersRefused: a header block a reader would take for a
// server status (the status line itself, or its Status pseudo-header) is
// never stored: every reader would stop at it.
func TestPoisonHeadersRefused(t *testing.T) {
	srv := brokertest.Start(t)
	c := brokertest.Connect(t, srv)
	victim(t, c)
	a := connectAttacker(t, srv)
	js, _ := jetstream.New(a.nc)
	for _, h := range []nats.Header{
		{"Status": {"409"}, "Description": {"Consumer Deleted"}},
		{"status": {"100"}},
		{"Nats-Stream": {"OTHER"}},
		{"Nats-Sequence": {"1"}},
		{"Nats-TTL": {"8000000000"}},
	} {
		_, err := js.PublishMsg(ctxT(t), &nats.Msg{Subject: "victim.x", Header: h, Data: []byte(`{}`)})
		if err == nil {
			t.Fatalf("publish with headers %v was stored", h)
		}
	}
	// The status line itself, written on a raw socket.
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.ClientURL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	if _, err := r.ReadString('\n'); err != nil { // INFO
		t.Fatal(err)
	}
	hdr := "NATS/1.0 409 Consumer Deleted\r\n\r\n"
	fmt.Fprintf(conn, "CONNECT {\"headers\":true,\"verbose\":false,\"pedantic\":false}\r\nSUB _INBOX.raw 1\r\nHPUB victim.raw _INBOX.raw %d %d\r\n%s\r\nPING\r\n", len(hdr), len(hdr), hdr)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	var reply string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("raw socket: %v", err)
		}
		if strings.HasPrefix(line, "MSG _INBOX.raw") || strings.HasPrefix(line, "HMSG _INBOX.raw") {
			body, _ := r.ReadString('\n')
			reply = body
			break
		}
	}
	if !strings.Contains(reply, `"error"`) {
		t.Fatalf("raw status-line publish answered %q, want an error", reply)
	}
	victimHeld(t, c)
}

// TestAmbiguousRequestBodiesRefused: a request body two JSON parsers could
// read differently (duplicate keys, keys differing only in case) is refused,
// not acted on with whichever value one parser picked.
func TestAmbiguousRequestBodiesRefused(t *testing.T) {
	srv := brokertest.Start(t)
	c := brokertest.Connect(t, srv)
	a := connectAttacker(t, srv)
	for _, r := range []struct{ subject, body string }{
		{fmt.Sprintf(semaq.APIStreamCreateT, "AMB"), `{"name":"AMB","subjects":["amb.>"],"subjects":["other.>"]}`},
		{fmt.Sprintf(semaq.APIStreamCreateT, "AMB"), `{"name":"AMB","subjects":["amb.>"],"Subjects":["other.>"]}`},
		{fmt.Sprintf(semaq.APIQueueCreateT, "AMBQ"), `{"name":"AMBQ","subjects":["ambq.>"],"max_messages":10,"Max_Messages":100000000}`},
		{semaq.APIRouteAdd, `{"name":"r","subject":"amb.>","when":"true","to":"x","When":"false"}`},
	} {
		resp, err := a.nc.Request(r.subject, []byte(r.body), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var e semaq.ErrorReply
		if json.Unmarshal(resp.Data, &e) != nil || e.Error == nil || e.Error.Code != 400 {
			t.Fatalf("%s %s: got %s, want a 400", r.subject, r.body, resp.Data)
		}
	}
	if streams, err := c.Streams(ctxT(t)); err != nil || len(streams) != 0 {
		t.Fatalf("streams after the refused creates: %v %v", streams, err)
	}
}
