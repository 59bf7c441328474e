package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// startDLQ starts a broker serving the dead-letter queue and connects to it.
func startDLQ(t *testing.T) (*broker.Server, *client.Client) {
	t.Helper()
	s := brokertest.Start(t)
	return s, brokertest.Connect(t, s)
}

func addStream(t *testing.T, c *client.Client, cfg semaq.StreamConfig) {
	t.Helper()
	if _, err := c.AddStream(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
}

// consumer makes a durable pull consumer with JetStream's own API, as any
// NATS client would.
func consumer(t *testing.T, c *client.Client, stream, name string, maxDeliver int) jetstream.Consumer {
	t.Helper()
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	cons, err := js.CreateConsumer(context.Background(), stream, jetstream.ConsumerConfig{
		Durable: name, AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: maxDeliver,
	})
	if err != nil {
		t.Fatal(err)
	}
	return cons
}

// next fetches one message, or nil if none comes within a short wait.
func next(t *testing.T, cons jetstream.Consumer) jetstream.Msg {
	t.Helper()
	b, err := cons.Fetch(1, jetstream.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for m := range b.Messages() {
		return m
	}
	return nil
}

func mustNext(t *testing.T, cons jetstream.Consumer) jetstream.Msg {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := next(t, cons); m != nil {
			return m
		}
	}
	t.Fatal("no message within 10s")
	return nil
}

// term fetches the next message and terminates it.
func term(t *testing.T, cons jetstream.Consumer, reason string) jetstream.Msg {
	t.Helper()
	m := mustNext(t, cons)
	var err error
	if reason == "" {
		err = m.Term()
	} else {
		err = m.TermWithReason(reason)
	}
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// waitDeadLetters polls the queue until it holds n dead letters matching f,
// calling poke between polls (nil: nothing), and returns them.
func waitDeadLetters(t *testing.T, c *client.Client, f client.DeadLetterFilter, n int, poke func()) []semaq.DeadLetter {
	t.Helper()
	if f.Limit == 0 {
		f.Limit = 1000
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		dls, err := c.DeadLetters(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		if len(dls) >= n {
			if len(dls) > n {
				t.Fatalf("%d dead letters, want %d: %+v", len(dls), n, dls)
			}
			return dls
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d dead letters after 10s, want %d", len(dls), n)
		}
		if poke != nil {
			poke()
		} else {
			time.Sleep(5 * time.Millisecond) // polling interval, not synchronisation
		}
	}
}

// rawDeadLetter reads a dead letter as it is stored in SQ_DLQ.
func rawDeadLetter(t *testing.T, c *client.Client, seq uint64) *jetstream.RawStreamMsg {
	t.Helper()
	js, err := jetstream.New(c.Conn())
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(context.Background(), semaq.DLQStream)
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(context.Background(), seq)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func publish(t *testing.T, c *client.Client, subject, data string, opts ...client.PublishOption) *semaq.PubAck {
	t.Helper()
	ack, err := c.Publish(context.Background(), subject, []byte(data), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return ack
}

func TestDLQMaxDeliveries(t *testing.T) {
	t.Parallel()
	_, c := startDLQ(t)
	ctx := context.Background()
	addStream(t, c, semaq.StreamConfig{Name: "DL", Subjects: []string{"dl.>"}})
	publish(t, c, "dl.x", "hello", client.WithModel("llama3"), client.WithMsgID("order-1"), client.WithHeader("X-Order", "42"))
	cons := consumer(t, c, "DL", "C", 2)
	for range 2 {
		if err := mustNext(t, cons).Nak(); err != nil {
			t.Fatal(err)
		}
	}
	// JetStream notices the exhausted message when it would redeliver it:
	// keep a pull open while waiting.
	dls := waitDeadLetters(t, c, client.DeadLetterFilter{}, 1, func() {
		if m := next(t, cons); m != nil {
			t.Fatalf("message delivered %d+1 times with MaxDeliver 2", 2)
		}
	})
	d := dls[0]
	if d.Stream != "DL" || d.Consumer != "C" || d.StreamSeq != 1 || d.Subject != "dl.x" ||
		d.Reason != semaq.DLQReasonMaxDeliveries || d.Deliveries != 2 || d.Size != 5 || d.PayloadLost != "" || d.Data != nil {
		t.Fatalf("dead letter = %+v", d)
	}
	if time.Since(d.Time) > time.Minute || d.Stored.IsZero() || d.Stored.After(d.Time) {
		t.Fatalf("dead letter times: stored %s, dead-lettered %s", d.Stored, d.Time)
	}
	for k, want := range map[string]string{"AI-Model": "llama3", "X-Order": "42", "Nats-Msg-Id": "order-1"} {
		if got := d.Headers[k]; len(got) != 1 || got[0] != want {
			t.Errorf("header %s = %q, want %q (headers %v)", k, got, want, d.Headers)
		}
	}
	if d.Headers["AI-Received"] == nil {
		t.Errorf("original AI-Received header lost: %v", d.Headers)
	}
	full, err := c.DeadLetter(ctx, d.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if string(full.Data) != "hello" || full.Size != 5 || full.Reason != d.Reason || len(full.Headers) != len(d.Headers) {
		t.Fatalf("dead letter with payload = %+v", full)
	}
	// The dead letter is a copy: a limits stream keeps its message.
	if info, err := c.StreamInfo(ctx, "DL"); err != nil || info.State.Messages != 1 {
		t.Fatalf("stream DL after dead-lettering: %+v, %v", info, err)
	}

	// Stored as the documented headers, on the documented subject.
	raw := rawDeadLetter(t, c, d.Seq)
	if raw.Subject != "$SQ.dlq.DL.C" {
		t.Errorf("dead letter subject %s", raw.Subject)
	}
	for k, want := range map[string]string{
		semaq.HdrDLQReason: "max_deliveries", semaq.HdrDLQStream: "DL", semaq.HdrDLQSeq: "1", semaq.HdrDLQConsumer: "C",
		semaq.HdrDLQDeliveries: "2", semaq.HdrDLQSubject: "dl.x", "AI-DLQ-Orig-Nats-Msg-Id": "order-1", "Nats-Msg-Id": "DL:1:C",
		"AI-Model": "llama3", "X-Order": "42",
	} {
		if got := raw.Header.Get(k); got != want {
			t.Errorf("stored header %s = %q, want %q", k, got, want)
		}
	}
	if _, err := time.Parse(time.RFC3339Nano, raw.Header.Get(semaq.HdrDLQTime)); err != nil {
		t.Errorf("%s: %v", semaq.HdrDLQTime, err)
	}
}

func TestDLQTerminated(t *testing.T) {
	t.Parallel()
	_, c := startDLQ(t)
	addStream(t, c, semaq.StreamConfig{Name: "T", Subjects: []string{"t.>"}})
	publish(t, c, "t.a", "one")
	publish(t, c, "t.b", "two")
	cons := consumer(t, c, "T", "W", 0)
	term(t, cons, "bad input\r\nsecond line")
	term(t, cons, "")
	dls := waitDeadLetters(t, c, client.DeadLetterFilter{Stream: "T"}, 2, nil)
	for i, want := range []struct{ subject, reason string }{
		{"t.a", "terminated: bad input  second line"},
		{"t.b", "terminated"},
	} {
		d := dls[i]
		if d.Subject != want.subject || d.Reason != want.reason || d.Consumer != "W" || d.Deliveries != 1 || d.StreamSeq != uint64(i+1) || d.PayloadLost != "" {
			t.Errorf("dead letter %d = %+v, want subject %s reason %q", i, d, want.subject, want.reason)
		}
	}
	if dls[0].Seq >= dls[1].Seq {
		t.Errorf("dead letters not oldest first: %d, %d", dls[0].Seq, dls[1].Seq)
	}
}

// DLQ replay restores a message: on its original subject, with its headers,
// and it leaves the queue.
func TestDLQReplayRestoresMessage(t *testing.T) {
	t.Parallel()
	_, c := startDLQ(t)
	ctx := context.Background()
	addStream(t, c, semaq.StreamConfig{Name: "R", Subjects: []string{"r.>"}})
	publish(t, c, "r.job", "payload\x00binary", client.WithModel("m1"), client.WithMsgID("job-7"),
		client.WithHeader("X-Order", "42"), client.WithTTL(time.Hour))
	term(t, consumer(t, c, "R", "C", 0), "flaky")
	d := waitDeadLetters(t, c, client.DeadLetterFilter{}, 1, nil)[0]

	sub, err := c.Subscribe(ctx, "r.job", client.WithDeliver(client.DeliverNew))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	// The original Nats-Msg-Id is still in the stream's duplicate window:
	// a replay under it would be dropped as a duplicate.
	r, err := c.Replay(ctx, d.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if r.Seq != d.Seq || r.Subject != "r.job" || r.Stream != "R" || r.StreamSeq != 2 || r.Duplicate {
		t.Fatalf("replay = %+v", r)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := sub.Next(rctx)
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject != "r.job" || m.Seq != 2 || string(m.Data) != "payload\x00binary" {
		t.Fatalf("replayed message: %s seq %d %q", m.Subject, m.Seq, m.Data)
	}
	for k, want := range map[string]string{"AI-Model": "m1", "X-Order": "42", "Nats-TTL": "1h0m0s", "Nats-Msg-Id": "replay:R:1:C"} {
		if got := m.Header.Get(k); got != want {
			t.Errorf("replayed header %s = %q, want %q", k, got, want)
		}
	}
	for k := range m.Header {
		if strings.HasPrefix(k, semaq.HdrDLQPrefix) {
			t.Errorf("replayed message carries %s", k)
		}
	}
	if err := m.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeadLetter(ctx, d.Seq); !errors.Is(err, semaq.ErrDeadLetterNotFound) {
		t.Fatalf("dead letter after replay: %v", err)
	}
	if _, err := c.Replay(ctx, d.Seq); !errors.Is(err, semaq.ErrDeadLetterNotFound) {
		t.Fatalf("second replay: %v", err)
	}
	if dls, err := c.DeadLetters(ctx, client.DeadLetterFilter{}); err != nil || len(dls) != 0 {
		t.Fatalf("queue after replay: %+v, %v", dls, err)
	}

	// A replay that stored its message but did not remove the dead letter
	// (a crash in between) is recognised when run again.
	publish(t, c, "r.job", "again")
	term(t, consumer(t, c, "R", "C2", 0), "")
	d = waitDeadLetters(t, c, client.DeadLetterFilter{Consumer: "C2"}, 1, nil)[0]
	first := publish(t, c, "r.job", "again", client.WithMsgID(fmt.Sprintf("replay:R:%d:C2", d.StreamSeq)))
	r, err = c.Replay(ctx, d.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Duplicate || r.StreamSeq != first.Sequence {
		t.Fatalf("repeated replay = %+v, want a duplicate of seq %d", r, first.Sequence)
	}
	if _, err := c.DeadLetter(ctx, d.Seq); !errors.Is(err, semaq.ErrDeadLetterNotFound) {
		t.Fatalf("dead letter after repeated replay: %v", err)
	}
}

func TestDLQDuplicateAdvisory(t *testing.T) {
	t.Parallel()
	s, c := startDLQ(t)
	addStream(t, c, semaq.StreamConfig{Name: "D", Subjects: []string{"d.>"}})
	publish(t, c, "d.x", "x")
	advisories, err := c.Conn().SubscribeSync("$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	term(t, consumer(t, c, "D", "C", 0), "no")
	adv, err := advisories.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	first := waitDeadLetters(t, c, client.DeadLetterFilter{}, 1, nil)[0]
	// The same advisory again, synchronously: nothing new is stored.
	broker.HandleDLQAdvisory(s, adv)
	broker.HandleDLQAdvisory(s, adv)
	dls, err := c.DeadLetters(context.Background(), client.DeadLetterFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Seq != first.Seq {
		t.Fatalf("after a repeated advisory: %+v", dls)
	}
}

// advisory forges a JetStream advisory for the handler.
func advisory(kind, stream, consumer string, seq uint64, reason string) *nats.Msg {
	typ, pre := "io.nats.jetstream.advisory.v1.max_deliver", "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."
	if kind == "term" {
		typ, pre = "io.nats.jetstream.advisory.v1.terminated", "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED."
	}
	b, _ := json.Marshal(map[string]any{"type": typ, "stream": stream, "consumer": consumer, "stream_seq": seq, "deliveries": 3, "reason": reason})
	return &nats.Msg{Subject: pre + stream + "." + consumer, Data: b}
}

func TestDLQPayloadLost(t *testing.T) {
	t.Parallel()
	s, c := startDLQ(t)
	ctx := context.Background()
	addStream(t, c, semaq.StreamConfig{Name: "WQ", Subjects: []string{"wq.>"}, Retention: "workqueue"})
	addStream(t, c, semaq.StreamConfig{Name: "L", Subjects: []string{"l.>"}})

	// A workqueue stream removes a terminated message before JetStream
	// reports the termination.
	publish(t, c, "wq.job", "work")
	term(t, consumer(t, c, "WQ", "W", 0), "nope")
	d := waitDeadLetters(t, c, client.DeadLetterFilter{Stream: "WQ"}, 1, nil)[0]
	if d.PayloadLost != "message 1 was no longer in stream WQ" || d.Reason != "terminated: nope" || d.Size != 0 ||
		d.Subject != "" || d.StreamSeq != 1 || d.Consumer != "W" || d.Headers != nil {
		t.Fatalf("dead letter of a terminated workqueue message = %+v", d)
	}
	raw := rawDeadLetter(t, c, d.Seq)
	if got := raw.Header.Get(semaq.HdrDLQReason); got != "terminated: nope (payload lost: message 1 was no longer in stream WQ)" {
		t.Errorf("stored %s = %q", semaq.HdrDLQReason, got)
	}
	if _, err := c.Replay(ctx, d.Seq); !errors.Is(err, semaq.ErrPayloadLost) {
		t.Fatalf("replaying a dead letter without payload: %v", err)
	}

	// Streams SemaQ does not manage, the queue itself included, are not
	// dead-lettered; malformed advisories are ignored; advisories no
	// consumer confirms (a message never delivered, a stream gone, a
	// consumer that never was) store nothing.
	broker.HandleDLQAdvisory(s, advisory("term", semaq.DLQStream, "C", d.Seq, "reader gave up"))
	broker.HandleDLQAdvisory(s, advisory("term", "KV_SQ_SCHEMAS", "C", 1, ""))
	broker.HandleDLQAdvisory(s, advisory("term", "L", "bad.name", 1, ""))
	broker.HandleDLQAdvisory(s, &nats.Msg{Subject: "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.L.C", Data: []byte("{")})
	broker.HandleDLQAdvisory(s, advisory("max", "L", "C", 999, ""))
	broker.HandleDLQAdvisory(s, advisory("term", "GONE", "C", 5, "x"))
	if dls, err := c.DeadLetters(ctx, client.DeadLetterFilter{}); err != nil || len(dls) != 1 {
		t.Fatalf("dead letters after advisories to ignore: %+v, %v", dls, err)
	}
}

// An advisory is not taken on its word (docs/security.md, Confused
// deputies): what a user can make JetStream deliver to an advisory subject
// (a stored copy of an advisory, through a consumer or an API reply) or
// forge about a consumer that never gives up, such as the dispatcher of a
// work queue, dead-letters nothing and removes nothing.
func TestDLQForgedAdvisoriesRefused(t *testing.T) {
	t.Parallel()
	s, c := startDLQ(t)
	ctx := context.Background()
	addStream(t, c, semaq.StreamConfig{Name: "F", Subjects: []string{"f.>"}})
	addStream(t, c, semaq.StreamConfig{Name: "FW", Subjects: []string{"fw.>"}, Retention: "workqueue"})
	publish(t, c, "f.a", "a")
	publish(t, c, "fw.job", "job")
	cons := consumer(t, c, "F", "C", 5)
	m := mustNext(t, cons) // delivered once, max_deliver 5

	for _, tc := range []struct {
		name   string
		msg    *nats.Msg
		reason string
	}{
		{"a stored advisory delivered by a consumer", func() *nats.Msg {
			a := advisory("max", "F", "C", 1, "")
			a.Reply = "$JS.ACK.X.Y.1.1.1.1700000000000000000.0"
			return a
		}(), "not_advisory"},
		{"a direct get answered onto the advisory subject", func() *nats.Msg {
			a := advisory("term", "F", "C", 1, "")
			a.Header = nats.Header{"Nats-Stream": {"X"}, "Nats-Sequence": {"1"}}
			return a
		}(), "not_advisory"},
		{"max deliveries below the consumer's max_deliver", advisory("max", "F", "C", 1, ""), "unconfirmed"},
		{"a message the consumer never delivered", advisory("term", "F", "C", 2, "x"), "unconfirmed"},
		{"a consumer that does not exist", advisory("term", "F", "NOBODY", 1, "x"), "unconfirmed"},
		{"the dispatcher of a work queue, which never gives up", advisory("max", "FW", "semaq-dispatch", 1, ""), "unconfirmed"},
	} {
		before := dlqRefusals(t, s, tc.reason)
		broker.HandleDLQAdvisory(s, tc.msg)
		if got := dlqRefusals(t, s, tc.reason); got != before+1 {
			t.Errorf("%s: semaq_dlq_advisories_refused_total{reason=%q} went %v -> %v, want one more", tc.name, tc.reason, before, got)
		}
	}
	if dls, err := c.DeadLetters(ctx, client.DeadLetterFilter{}); err != nil || len(dls) != 0 {
		t.Fatalf("forged advisories stored dead letters: %+v, %v", dls, err)
	}
	info, err := c.StreamInfo(ctx, "FW")
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Messages != 1 {
		t.Fatalf("the work queue holds %d jobs after a forged advisory about its dispatcher, want 1", info.State.Messages)
	}
	// A real termination is still dead-lettered.
	if err := m.TermWithReason("really bad"); err != nil {
		t.Fatal(err)
	}
	waitDeadLetters(t, c, client.DeadLetterFilter{Stream: "F"}, 1, nil)
}

// dlqRefusals reads semaq_dlq_advisories_refused_total{reason} of s.
func dlqRefusals(t *testing.T, s *broker.Server, reason string) float64 {
	t.Helper()
	return counterOf(t, s, "semaq_dlq_advisories_refused_total", "reason", reason)
}

func TestDLQWorkqueueMaxDeliveriesMovesMessage(t *testing.T) {
	t.Parallel()
	_, c := startDLQ(t)
	ctx := context.Background()
	addStream(t, c, semaq.StreamConfig{Name: "JOBS", Subjects: []string{"jobs.>"}, Retention: "workqueue"})
	publish(t, c, "jobs.a", "job")
	cons := consumer(t, c, "JOBS", "W", 1)
	if err := mustNext(t, cons).Nak(); err != nil {
		t.Fatal(err)
	}
	d := waitDeadLetters(t, c, client.DeadLetterFilter{}, 1, func() { next(t, cons) })[0]
	if d.PayloadLost != "" || d.Size != 3 || d.Reason != semaq.DLQReasonMaxDeliveries {
		t.Fatalf("dead letter = %+v", d)
	}
	// JetStream leaves an exhausted message in a workqueue stream, where no
	// consumer gets it again; the dead letter takes it over.
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := c.StreamInfo(ctx, "JOBS")
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Messages == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workqueue still holds %d messages after dead-lettering", info.State.Messages)
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
	if _, err := c.Replay(ctx, d.Seq); err != nil {
		t.Fatal(err)
	}
	if m := mustNext(t, cons); string(m.Data()) != "job" {
		t.Fatalf("replayed job = %q", m.Data())
	}
}

// TermDeadLetter keeps the payload of a workqueue message, and the advisory
// that follows the term adds nothing.
func TestDLQCaptureBeforeTerm(t *testing.T) {
	t.Parallel()
	_, c := startDLQ(t)
	ctx := context.Background()
	addStream(t, c, semaq.StreamConfig{Name: "WQ", Subjects: []string{"wq.>"}, Retention: "workqueue"})
	publish(t, c, "wq.a", "keep me", client.WithModel("m"))
	publish(t, c, "wq.b", "marker")
	sub, err := c.Subscribe(ctx, "wq.>", client.WithDurable("W"), client.WithPrefetch(1))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := sub.Next(rctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.TermDeadLetter(ctx, "schema mismatch"); err != nil {
		t.Fatal(err)
	}
	// The advisory of the term above is handled before the one of this
	// plain term: once the second dead letter is there, the first advisory
	// has been seen.
	marker, err := sub.Next(rctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := marker.Term("marker"); err != nil {
		t.Fatal(err)
	}
	dls := waitDeadLetters(t, c, client.DeadLetterFilter{}, 2, nil)
	d := dls[0]
	if d.StreamSeq != 1 || d.Subject != "wq.a" || d.PayloadLost != "" || d.Size != 7 || d.Reason != "terminated: schema mismatch" ||
		d.Consumer != "W" || d.Deliveries != 1 || d.Headers["AI-Model"][0] != "m" {
		t.Fatalf("captured dead letter = %+v", d)
	}
	if dls[1].StreamSeq != 2 || dls[1].PayloadLost == "" {
		t.Fatalf("marker dead letter = %+v", dls[1])
	}
}

// A message deleted from its stream while a consumer held it unacked is
// reported by JetStream as terminated ("Unacknowledged message was
// deleted"): nobody gave up on it — the broker deletes a work-queue job
// once it is answered, and a consumer recreated after a failover still
// held it — so it is not a dead letter.
func TestDLQDeletedMessageIsNoDeadLetter(t *testing.T) {
	t.Parallel()
	s, c := startDLQ(t)
	addStream(t, c, semaq.StreamConfig{Name: "DEL", Subjects: []string{"del.>"}})
	publish(t, c, "del.a", "a")
	publish(t, c, "del.b", "b")
	cons := consumer(t, c, "DEL", "C", 0)
	mustNext(t, cons)
	mustNext(t, cons) // C has delivered both: it confirms advisories about them
	broker.HandleDLQAdvisory(s, advisory("term", "DEL", "C", 1, "Unacknowledged message was deleted"))
	broker.HandleDLQAdvisory(s, advisory("term", "DEL", "C", 2, "bad input"))
	dls, err := c.DeadLetters(context.Background(), client.DeadLetterFilter{Stream: "DEL"})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].StreamSeq != 2 {
		t.Fatalf("dead letters %+v; want only message 2's", dls)
	}
}
