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

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

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
