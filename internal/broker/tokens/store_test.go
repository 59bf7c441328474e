package tokens

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/jstest"
	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/semaq"
)

// waitFor waits until cond holds, failing with what() after 10 seconds.
func waitFor(t *testing.T, cond func() bool, what func() string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(what())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// write sends one record to the relay as a writer does and returns the
// answer: JetStream's PubAck, or the relay's refusal.
func write(t *testing.T, nc *nats.Conn, subj, key string, rec *semaq.TokenChunk) (*jetstream.PubAck, *semaq.APIError) {
	t.Helper()
	m := &nats.Msg{Subject: subj, Header: nats.Header{semaq.HdrTokenKey: {key}}, Data: semaq.AppendTokenChunk(nil, rec)}
	resp, err := nc.RequestMsg(m, 5*time.Second)
	if err != nil {
		t.Fatalf("writing %s: %v", subj, err)
	}
	var r struct {
		jetstream.PubAck
		Error *semaq.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		t.Fatalf("answer %q: %v", resp.Data, err)
	}
	if r.Error != nil {
		return nil, r.Error
	}
	return &r.PubAck, nil
}

// The store runs on what Deps gives it alone: the relay stores a writer's
// records and refuses a foreign one, the status API answers from the
// stream, the claims and Deps.QueuedJob, and Close waits for the purge a
// job's binding started before it returns.
func TestStoreThroughDeps(t *testing.T) {
	nc, js := jstest.Start(t)
	ctx := t.Context()
	st, err := New(Deps{JS: js, Conn: nc, Egress: nc, Metrics: metrics.New(metrics.Options{NoRuntime: true}),
		QueuedJob: func(id string) (string, bool) { return "acme", id == "queued-1" }})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })

	const key, foreign = "writer-key-0123456789", "foreign-key-0123456789"
	if _, e := write(t, nc, semaq.TokenWriteChunkSubject("req-1"), key, &semaq.TokenChunk{Seq: 1, N: 1, Text: "Hi"}); e != nil {
		t.Fatalf("first record refused: %v", e)
	}
	if _, e := write(t, nc, semaq.TokenWriteChunkSubject("req-1"), foreign, &semaq.TokenChunk{Seq: 2, Offset: 1, N: 1, Text: "x"}); e == nil || e.ErrCode != semaq.ErrCodeTokenWriter {
		t.Fatalf("foreign writer's record: %v, want ErrTokenWriter", e)
	}
	if _, e := write(t, nc, semaq.TokenWriteEndSubject("req-2"), key, &semaq.TokenChunk{Seq: 1, Final: &semaq.TokenFinal{FinishReason: "stop"}}); e != nil {
		t.Fatalf("terminal record refused: %v", e)
	}
	// The writer's PubAck comes from JetStream, maybe before the relay
	// has counted the record and scheduled the purge.
	waitFor(t, func() bool {
		s := st.Stats()
		return s.Stored == 2 && s.Refused == 1 && s.Claims == 2 && s.PendingPurges == 1
	}, func() string {
		return fmt.Sprintf("stats %+v, want 2 stored, 1 refused, 2 claims, 1 pending purge", st.Stats())
	})

	h := st.Handlers()[semaq.APITokenStatus]
	if h == nil {
		t.Fatalf("no handler for %s", semaq.APITokenStatus)
	}
	sub, err := nc.Subscribe(semaq.APITokenStatus, h)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	for _, tc := range []struct {
		id           string
		known, ended bool
		records      uint64
	}{
		{"req-1", true, false, 1},
		{"req-2", true, true, 1},
		{"queued-1", true, false, 0},
		{"nobody-1", false, false, 0},
	} {
		resp, err := nc.Request(semaq.APITokenStatus, []byte(`{"id":"`+tc.id+`"}`), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var got semaq.TokenStatus
		if err := json.Unmarshal(resp.Data, &got); err != nil {
			t.Fatal(err)
		}
		if got.ID != tc.id || got.Known != tc.known || got.Ended != tc.ended || got.Records != tc.records {
			t.Errorf("status of %s: %+v, want known %v ended %v records %d", tc.id, got, tc.known, tc.ended, tc.records)
		}
	}

	// A job bound to req-1 with another lease purges what the first
	// writer stored, on a goroutine Close must wait for.
	st.BindJob("req-1", "", foreign, api.AnswerChain{})
	if err := st.Close(ctx); err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, semaq.TokenStream)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.GetLastMsgForSubject(ctx, semaq.TokenSubjectFilter(semaq.TokenAnyTenant, "req-1")); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("after Close, req-1's records: %v; want them purged", err)
	}
	if s := st.Stats(); s.PendingPurges != 0 {
		t.Fatalf("%d purges pending after Close", s.PendingPurges)
	}
	// The relay has stopped listening: nobody answers a writer.
	_, err = nc.RequestMsg(&nats.Msg{Subject: semaq.TokenWriteChunkSubject("req-3"), Header: nats.Header{semaq.HdrTokenKey: {key}},
		Data: semaq.AppendTokenChunk(nil, &semaq.TokenChunk{Seq: 1, N: 1, Text: "x"})}, 5*time.Second)
	if !errors.Is(err, nats.ErrNoResponders) {
		t.Fatalf("record after Close: %v, want no responders", err)
	}
	if err := st.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// A store never started closes at once, and a closed one binds nothing;
// New refuses missing dependencies.
func TestCloseUnstarted(t *testing.T) {
	if _, err := New(Deps{}); err == nil {
		t.Fatal("New without JetStream or a connection succeeded")
	}
	nc, js := jstest.Start(t)
	st, err := New(Deps{JS: js, Conn: nc})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.status(t.Context(), "req-1", semaq.TokenAnyTenant); err == nil {
		t.Fatal("status answered before Start")
	}
	if err := st.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
	st.BindJob("req-1", "", "writer-key-0123456789", api.AnswerChain{}) // closed: nothing started
	if s := st.Stats(); s.Claims != 0 {
		t.Fatalf("closed store bound a job: %+v", s)
	}
	var nilStore *Store
	if err := nilStore.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}
