package broker_test

import (
	"bytes"
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

	// Deleted or expired before JetStream gave up on it; its stream gone.
	broker.HandleDLQAdvisory(s, advisory("max", "L", "C", 999, ""))
	broker.HandleDLQAdvisory(s, advisory("term", "GONE", "C", 5, "x"))
	dls, err := c.DeadLetters(ctx, client.DeadLetterFilter{Consumer: "C"})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 2 || dls[0].PayloadLost != "message 999 was no longer in stream L" || dls[0].Reason != "max_deliveries" ||
		dls[1].PayloadLost != "stream GONE no longer exists" || dls[1].Stream != "GONE" || dls[1].Reason != "terminated: x" {
		t.Fatalf("dead letters of vanished messages: %+v", dls)
	}

	// Streams SemaQ does not manage, the queue itself included, are not
	// dead-lettered; malformed advisories are ignored.
	broker.HandleDLQAdvisory(s, advisory("term", semaq.DLQStream, "C", d.Seq, "reader gave up"))
	broker.HandleDLQAdvisory(s, advisory("term", "KV_SQ_SCHEMAS", "C", 1, ""))
	broker.HandleDLQAdvisory(s, advisory("term", "L", "bad.name", 1, ""))
	broker.HandleDLQAdvisory(s, &nats.Msg{Subject: "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.L.C", Data: []byte("{")})
	if dls, err := c.DeadLetters(ctx, client.DeadLetterFilter{}); err != nil || len(dls) != 3 {
		t.Fatalf("dead letters after advisories to ignore: %+v, %v", dls, err)
	}
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

func TestDLQListFiltersPagingAndPurge(t *testing.T) {
	t.Parallel()
	_, c := startDLQ(t)
	ctx := context.Background()
	addStream(t, c, semaq.StreamConfig{Name: "A", Subjects: []string{"a.>"}})
	addStream(t, c, semaq.StreamConfig{Name: "B", Subjects: []string{"b.>"}})
	for i := range 5 {
		publish(t, c, "a.x", fmt.Sprint(i))
	}
	publish(t, c, "b.x", "b")
	ca1, ca2 := consumer(t, c, "A", "C1", 0), consumer(t, c, "A", "C2", 0)
	for range 5 {
		term(t, ca1, "")
	}
	term(t, ca2, "")
	term(t, consumer(t, c, "B", "C1", 0), "")
	waitDeadLetters(t, c, client.DeadLetterFilter{}, 7, nil)

	for _, tc := range []struct {
		f    client.DeadLetterFilter
		want int
	}{
		{client.DeadLetterFilter{Stream: "A"}, 6},
		{client.DeadLetterFilter{Consumer: "C1"}, 6},
		{client.DeadLetterFilter{Stream: "A", Consumer: "C2"}, 1},
		{client.DeadLetterFilter{Stream: "B"}, 1},
		{client.DeadLetterFilter{Stream: "NONE"}, 0},
		{client.DeadLetterFilter{Limit: 3}, 3},
	} {
		dls, err := c.DeadLetters(ctx, tc.f)
		if err != nil || len(dls) != tc.want {
			t.Errorf("DeadLetters(%+v) = %d, %v; want %d", tc.f, len(dls), err, tc.want)
		}
	}

	// Paging through the raw API.
	var seen []uint64
	after := uint64(0)
	for {
		var resp semaq.DLQListResponse
		apiRequest(t, c, semaq.APIDLQList, semaq.DLQListRequest{Stream: "A", Limit: 4, After: after}, &resp)
		for _, d := range resp.DeadLetters {
			seen = append(seen, d.Seq)
		}
		if want := 6 - uint64(len(seen)); resp.Remaining != want {
			t.Fatalf("remaining %d after %d listed, want %d", resp.Remaining, len(seen), want)
		}
		if resp.Remaining == 0 {
			break
		}
		after = seen[len(seen)-1]
	}
	if len(seen) != 6 {
		t.Fatalf("paged through %v", seen)
	}

	for _, tc := range []struct {
		subj string
		req  any
		want *semaq.APIError
	}{
		{semaq.APIDLQList, semaq.DLQListRequest{Limit: -1}, semaq.ErrBadRequest},
		{semaq.APIDLQList, semaq.DLQListRequest{Stream: "a.b"}, semaq.ErrBadRequest},
		{semaq.APIDLQList, "not an object", semaq.ErrBadRequest},
		{semaq.APIDLQGet, semaq.DLQGetRequest{}, semaq.ErrBadRequest},
		{semaq.APIDLQGet, semaq.DLQGetRequest{Seq: 999}, semaq.ErrDeadLetterNotFound},
		{semaq.APIDLQReplay, semaq.DLQReplayRequest{All: true}, semaq.ErrBadRequest},
		{semaq.APIDLQReplay, semaq.DLQReplayRequest{Seq: 1, All: true, Stream: "A"}, semaq.ErrBadRequest},
		{semaq.APIDLQReplay, semaq.DLQReplayRequest{Seq: 1, Stream: "A"}, semaq.ErrBadRequest},
		{semaq.APIDLQReplay, semaq.DLQReplayRequest{Seq: 1, ExtendDeadline: -time.Second}, semaq.ErrBadRequest},
		{semaq.APIDLQReplay, semaq.DLQReplayRequest{Stream: "A", All: true, ExtendDeadline: semaq.DLQMaxExtendDeadline + 1}, semaq.ErrBadRequest},
		{semaq.APIDLQPurge, semaq.DLQPurgeRequest{Seq: 999}, semaq.ErrDeadLetterNotFound},
		{semaq.APIDLQPurge, semaq.DLQPurgeRequest{Seq: 1, Stream: "A"}, semaq.ErrBadRequest},
		{semaq.APIDLQCapture, semaq.DLQCaptureRequest{Stream: "A", Consumer: "C", StreamSeq: 0}, semaq.ErrBadRequest},
		{semaq.APIDLQCapture, semaq.DLQCaptureRequest{Stream: "KV_SQ_SCHEMAS", Consumer: "C", StreamSeq: 1}, semaq.ErrStreamNotFound},
	} {
		if err := apiRequestErr(c, tc.subj, tc.req); !errors.Is(err, tc.want) {
			t.Errorf("%s %+v: %v, want %v", tc.subj, tc.req, err, tc.want)
		}
	}

	dls, _ := c.DeadLetters(ctx, client.DeadLetterFilter{Stream: "B"})
	if err := c.DeleteDeadLetter(ctx, dls[0].Seq); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteDeadLetter(ctx, dls[0].Seq); !errors.Is(err, semaq.ErrDeadLetterNotFound) {
		t.Fatalf("deleting twice: %v", err)
	}
	if n, err := c.PurgeDeadLetters(ctx, "A", "C2"); err != nil || n != 1 {
		t.Fatalf("purge A/C2: %d, %v", n, err)
	}
	if n, err := c.PurgeDeadLetters(ctx, "", ""); err != nil || n != 5 {
		t.Fatalf("purge all: %d, %v", n, err)
	}
	if dls, err := c.DeadLetters(ctx, client.DeadLetterFilter{}); err != nil || len(dls) != 0 {
		t.Fatalf("after purge: %+v, %v", dls, err)
	}
}

func TestDLQReplayAll(t *testing.T) {
	t.Parallel()
	_, c := startDLQ(t)
	ctx := context.Background()
	addStream(t, c, semaq.StreamConfig{Name: "A", Subjects: []string{"a.>"}})
	addStream(t, c, semaq.StreamConfig{Name: "WQ", Subjects: []string{"wq.>"}, Retention: "workqueue"})
	const n = 120 // more than one page
	for i := range n {
		publish(t, c, "a.x", fmt.Sprint(i))
	}
	cons := consumer(t, c, "A", "C", 0)
	for got := 0; got < n; {
		b, err := cons.Fetch(n-got, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range b.Messages() {
			got++
			if err := m.Term(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// One dead letter of A has lost its payload.
	publish(t, c, "wq.x", "w")
	term(t, consumer(t, c, "WQ", "W", 0), "")
	waitDeadLetters(t, c, client.DeadLetterFilter{Stream: "A"}, n, nil)

	res, err := c.ReplayAll(ctx, "A")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Replayed) != n || len(res.Skipped) != 0 {
		t.Fatalf("replayed %d, skipped %+v", len(res.Replayed), res.Skipped)
	}
	for i, r := range res.Replayed {
		if r.StreamSeq != uint64(n+i+1) || r.Subject != "a.x" || r.Duplicate {
			t.Fatalf("replay %d = %+v", i, r)
		}
	}
	// Oldest first: the replayed copies are in the original order.
	js, _ := jetstream.New(c.Conn())
	st, _ := js.Stream(ctx, "A")
	for i := range n {
		m, err := st.GetMsg(ctx, uint64(n+i+1))
		if err != nil || string(m.Data) != fmt.Sprint(i) {
			t.Fatalf("replayed seq %d: %v %q", n+i+1, err, m.Data)
		}
	}
	res, err = c.ReplayAll(ctx, "WQ")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Replayed) != 0 || len(res.Skipped) != 1 || !strings.Contains(res.Skipped[0].Reason, "no payload") {
		t.Fatalf("replay-all of a lost payload = %+v", res)
	}
	if dls, _ := c.DeadLetters(ctx, client.DeadLetterFilter{}); len(dls) != 1 {
		t.Fatalf("left in the queue: %+v", dls)
	}
	if _, err := c.ReplayAll(ctx, "no.such"); !errors.Is(err, semaq.ErrBadRequest) {
		t.Fatalf("ReplayAll of a bad name: %v", err)
	}
}

func TestDLQReplayToVanishedSubject(t *testing.T) {
	t.Parallel()
	_, c := startDLQ(t)
	ctx := context.Background()
	addStream(t, c, semaq.StreamConfig{Name: "OLD", Subjects: []string{"old.>"}})
	publish(t, c, "old.x", "x")
	term(t, consumer(t, c, "OLD", "C", 0), "")
	d := waitDeadLetters(t, c, client.DeadLetterFilter{}, 1, nil)[0]
	if err := c.DeleteStream(ctx, "OLD"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Replay(ctx, d.Seq); !errors.Is(err, semaq.ErrNoStream) {
		t.Fatalf("replay to a subject no stream captures: %v", err)
	}
	res, err := c.ReplayAll(ctx, "OLD")
	if err != nil || len(res.Skipped) != 1 || !strings.Contains(res.Skipped[0].Reason, "no stream captures subject old.x") {
		t.Fatalf("replay-all: %+v, %v", res, err)
	}
	if _, err := c.DeadLetter(ctx, d.Seq); err != nil {
		t.Fatalf("a dead letter that failed to replay must stay: %v", err)
	}
}

// A dead letter too large for a JSON reply is still readable through the SDK.
func TestDLQLargePayload(t *testing.T) {
	t.Parallel()
	_, c := startDLQ(t)
	ctx := context.Background()
	addStream(t, c, semaq.StreamConfig{Name: "BIG", Subjects: []string{"big.>"}})
	payload := bytes.Repeat([]byte("x"), 900_000)
	publish(t, c, "big.x", string(payload))
	term(t, consumer(t, c, "BIG", "C", 0), "")
	d := waitDeadLetters(t, c, client.DeadLetterFilter{}, 1, nil)[0]
	if d.Size != len(payload) {
		t.Fatalf("listed size %d", d.Size)
	}
	if err := apiRequestErr(c, semaq.APIDLQGet, semaq.DLQGetRequest{Seq: d.Seq}); !errors.Is(err, semaq.ErrTooLarge) {
		t.Fatalf("GET of a dead letter larger than a reply: %v", err)
	}
	full, err := c.DeadLetter(ctx, d.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(full.Data, payload) || full.Subject != "big.x" || full.Headers["AI-Received"] == nil {
		t.Fatalf("dead letter read directly: %d bytes, %+v", len(full.Data), full.Headers)
	}
	if _, err := c.Replay(ctx, d.Seq); err != nil {
		t.Fatal(err)
	}

	// A payload that fitted its stream but not beside the dead-letter
	// headers: the dead letter is kept without it, saying so.
	addStream(t, c, semaq.StreamConfig{Name: "HUGE", Subjects: []string{"huge.>"}})
	huge := bytes.Repeat([]byte("y"), int(c.Conn().MaxPayload())-120) // room for AI-Received only
	publish(t, c, "huge.x", string(huge))
	term(t, consumer(t, c, "HUGE", "C", 0), "")
	d = waitDeadLetters(t, c, client.DeadLetterFilter{Stream: "HUGE"}, 1, nil)[0]
	if want := fmt.Sprintf("payload of %d bytes too large to store with its dead-letter headers", len(huge)); d.PayloadLost != want || d.Subject != "huge.x" {
		t.Fatalf("dead letter of a maximal payload = %+v", d)
	}
}

func apiRequest(t *testing.T, c *client.Client, subj string, req, out any) {
	t.Helper()
	b, _ := json.Marshal(req)
	m, err := c.Conn().Request(subj, b, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(m.Data, out); err != nil {
		t.Fatal(err)
	}
}

func apiRequestErr(c *client.Client, subj string, req any) error {
	b, _ := json.Marshal(req)
	m, err := c.Conn().Request(subj, b, 5*time.Second)
	if err != nil {
		return err
	}
	var r semaq.ErrorReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return err
	}
	if r.Error == nil {
		return nil
	}
	return r.Error
}

// On an interest stream a terminated message stays while another consumer
// still wants it: only the last consumer's dead letter loses the payload.
func TestDLQInterestStream(t *testing.T) {
	t.Parallel()
	_, c := startDLQ(t)
	addStream(t, c, semaq.StreamConfig{Name: "I", Subjects: []string{"i.>"}, Retention: "interest"})
	a, b := consumer(t, c, "I", "A", 0), consumer(t, c, "I", "B", 0)
	publish(t, c, "i.x", "shared")
	term(t, a, "a")
	waitDeadLetters(t, c, client.DeadLetterFilter{}, 1, nil)
	term(t, b, "b")
	dls := waitDeadLetters(t, c, client.DeadLetterFilter{}, 2, nil)
	if dls[0].Consumer != "A" || dls[0].PayloadLost != "" || dls[0].Size != 6 {
		t.Errorf("first consumer's dead letter = %+v", dls[0])
	}
	if dls[1].Consumer != "B" || dls[1].PayloadLost == "" {
		t.Errorf("last consumer's dead letter = %+v", dls[1])
	}
}

// A dead letter whose deadline has passed is replayed as it was, and the
// reply says its deadline passed (a queue would expire it again); with
// ExtendDeadline it gets a new deadline and loses its spent AI-Timeout.
func TestDLQReplayPastDeadline(t *testing.T) {
	t.Parallel()
	_, c := startDLQ(t)
	ctx := context.Background()
	addStream(t, c, semaq.StreamConfig{Name: "E", Subjects: []string{"e.>"}})
	past := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	for range 2 {
		publish(t, c, "e.job", "late", client.WithHeader(semaq.HdrDeadline, past.Format(time.RFC3339Nano)), client.WithHeader(semaq.HdrTimeout, "8s"))
	}
	cons := consumer(t, c, "E", "C", 0)
	term(t, cons, "")
	term(t, cons, "")
	dls := waitDeadLetters(t, c, client.DeadLetterFilter{Stream: "E"}, 2, nil)

	r, err := c.Replay(ctx, dls[0].Seq)
	if err != nil {
		t.Fatal(err)
	}
	if !r.DeadlinePassed || !r.Deadline.Equal(past) {
		t.Fatalf("replay of an expired dead letter = %+v, want deadline %s reported passed", r, past)
	}

	if _, err := c.Replay(ctx, dls[1].Seq, client.ReplayExtendDeadline(-time.Second)); !errors.Is(err, semaq.ErrBadRequest) {
		t.Fatalf("negative extension: %v", err)
	}
	sub, err := c.Subscribe(ctx, "e.job", client.WithDeliver(client.DeliverNew))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	before := time.Now()
	r, err = c.Replay(ctx, dls[1].Seq, client.ReplayExtendDeadline(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if r.DeadlinePassed || r.Deadline.Before(before.Add(time.Hour)) || r.Deadline.After(time.Now().Add(time.Hour)) {
		t.Fatalf("replay with a new deadline = %+v, want about an hour from now", r)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	m, err := sub.Next(rctx)
	if err != nil {
		t.Fatal(err)
	}
	got, err := time.Parse(time.RFC3339Nano, m.Header.Get(semaq.HdrDeadline))
	if err != nil || !got.Equal(r.Deadline) || m.Header.Get(semaq.HdrTimeout) != "" {
		t.Fatalf("replayed message: AI-Deadline %q (%v), AI-Timeout %q; want %s and none",
			m.Header.Get(semaq.HdrDeadline), err, m.Header.Get(semaq.HdrTimeout), r.Deadline)
	}
}
