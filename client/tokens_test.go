package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

const testTrace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// rawRecord stores a record as a misbehaving writer would if the relay
// let it: straight into the token stream, in whatever order the test
// wants, with the broker's own rights.
func rawRecord(t *testing.T, s *broker.Server, id string, rec semaq.TokenChunk) {
	t.Helper()
	nc, err := brokertest.DialOperator(s)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// Stored as the relay stores a request made without a tenant.
	subj := reserved.TokenStorePrefix + semaq.TokenNoTenant + "." + id + ".c"
	if rec.Terminal() {
		subj = reserved.TokenStorePrefix + semaq.TokenNoTenant + "." + id + ".end"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, subj, semaq.AppendTokenChunk(nil, &rec)); err != nil {
		t.Fatalf("storing record %d: %v", rec.Seq, err)
	}
}

func readAllTokens(t *testing.T, r *client.TokenReader) ([]*semaq.TokenChunk, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []*semaq.TokenChunk
	for {
		c, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, c)
	}
}

func TestTokenStreamWriteRead(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// The reader starts first: it waits for the writer.
	r, err := c.ReadTokens(ctx, "req-1")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := c.OpenTokenStream(ctx, "req-1", client.WithStreamTraceParent(testTrace), client.WithStreamSession("sess-9"))
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for i := range 2000 {
		tok := fmt.Sprintf(" t%d", i)
		want.WriteString(tok)
		if err := w.Write(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []semaq.FunctionCallFragment{
		{Index: 0, ID: "call_1", Name: "get_weather", Arguments: `{"ci`},
		{Index: 0, Arguments: `ty":"Par`},
		{Index: 1, ID: "call_2", Name: "get_time"},
		{Index: 0, Arguments: `is"}`},
	} {
		if err := w.WriteFunctionCall(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx, semaq.TokenFinal{FinishReason: "tool_calls", Usage: &semaq.TokenUsage{Prompt: 5, Completion: 2004, Total: 2009}}); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(ctx, "late"); err == nil {
		t.Fatal("Write after Close succeeded")
	}

	res, err := r.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != want.String() {
		t.Fatalf("text differs: got %d bytes, want %d", len(res.Text), want.Len())
	}
	if res.Tokens != 2004 || res.Final.FinishReason != "tool_calls" || res.Final.Usage.Total != 2009 {
		t.Fatalf("tokens %d final %+v", res.Tokens, res.Final)
	}
	if res.TraceParent != testTrace || res.Session != "sess-9" {
		t.Fatalf("trace %q session %q not bound", res.TraceParent, res.Session)
	}
	if len(res.Calls) != 2 || res.Calls[0].Arguments != `{"city":"Paris"}` || res.Calls[1].Arguments != "{}" || res.Calls[1].Name != "get_time" {
		t.Fatalf("calls %+v", res.Calls)
	}
	if _, err := r.Next(ctx); !errors.Is(err, io.EOF) {
		t.Fatalf("Next after the final record: %v, want io.EOF", err)
	}

	// Every record carries the trace and session, for a reader that joins
	// anywhere.
	r2, err := c.ReadTokens(ctx, "req-1", client.FromSeq(2))
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	chunks, err := readAllTokens(t, r2)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range chunks {
		if ch.TraceParent != testTrace || ch.Session != "sess-9" || ch.RequestID != "req-1" {
			t.Fatalf("record %d: trace %q session %q id %q", ch.Seq, ch.TraceParent, ch.Session, ch.RequestID)
		}
	}
	if chunks[0].Seq != 2 {
		t.Fatalf("FromSeq(2) started at %d", chunks[0].Seq)
	}
}

func TestTokenReaderReordersAndDropsDuplicates(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	for _, seq := range []uint64{1, 3, 2, 5, 4, 4, 3} {
		rawRecord(t, s, "ooo", semaq.TokenChunk{Seq: seq, Offset: seq - 1, N: 1, Text: fmt.Sprint(seq)})
	}
	rawRecord(t, s, "ooo", semaq.TokenChunk{Seq: 6, Offset: 5, Final: &semaq.TokenFinal{FinishReason: "stop"}})
	r, err := c.ReadTokens(context.Background(), "ooo")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	chunks, err := readAllTokens(t, r)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for _, ch := range chunks {
		got = append(got, ch.Seq)
	}
	if fmt.Sprint(got) != "[1 2 3 4 5 6]" {
		t.Fatalf("records in order %v, want [1 2 3 4 5 6]", got)
	}
	if r.Duplicates() != 2 {
		t.Fatalf("duplicates dropped: %d, want 2", r.Duplicates())
	}
}

func TestTokenReaderGap(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx := context.Background()

	t.Run("timeout", func(t *testing.T) {
		rawRecord(t, s, "gap1", semaq.TokenChunk{Seq: 1, N: 1, Text: "a"})
		rawRecord(t, s, "gap1", semaq.TokenChunk{Seq: 3, Offset: 2, N: 1, Text: "c"})
		r, err := c.ReadTokens(ctx, "gap1", client.WithGapTimeout(200*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		chunks, err := readAllTokens(t, r)
		var gap *client.TokenGapError
		if !errors.Is(err, client.ErrTokenGap) || !errors.As(err, &gap) || gap.Missing != 2 {
			t.Fatalf("err = %v, want a gap at record 2", err)
		}
		if len(chunks) != 1 || chunks[0].Text != "a" {
			t.Fatalf("delivered %d records before the gap, want only record 1", len(chunks))
		}
		if gap.Waited < 200*time.Millisecond {
			t.Fatalf("gap reported after %s, before its timeout", gap.Waited)
		}
	})
	t.Run("window", func(t *testing.T) {
		for _, seq := range []uint64{2, 3, 4} {
			rawRecord(t, s, "gap2", semaq.TokenChunk{Seq: seq, Offset: seq - 1, N: 1, Text: "x"})
		}
		r, err := c.ReadTokens(ctx, "gap2", client.WithReorderWindow(2), client.WithGapTimeout(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		_, err = readAllTokens(t, r)
		var gap *client.TokenGapError
		if !errors.As(err, &gap) || gap.Missing != 1 || gap.Buffered != 2 {
			t.Fatalf("err = %v, want a gap at record 1 with 2 held back", err)
		}
	})
}

func TestTokenReaderResume(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx := context.Background()
	rawRecord(t, s, "res", semaq.TokenChunk{Seq: 1, Offset: 0, N: 1, Text: "a"})
	rawRecord(t, s, "res", semaq.TokenChunk{Seq: 2, Offset: 1, N: 3, Text: "bbcccd", Lens: []int{2, 3, 1}})
	rawRecord(t, s, "res", semaq.TokenChunk{Seq: 3, Offset: 4, N: 1, Text: "e"})
	rawRecord(t, s, "res", semaq.TokenChunk{Seq: 4, Offset: 5, Final: &semaq.TokenFinal{FinishReason: "stop"}})
	cases := []struct {
		name string
		opt  client.TokenReadOption
		want string
	}{
		{"from start", client.FromOffset(0), "abbcccde"},
		{"inside a merged record", client.FromOffset(2), "cccde"},
		{"at a record", client.FromOffset(4), "e"},
		{"past the end", client.FromOffset(9), ""},
		{"from seq", client.FromSeq(3), "e"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := c.ReadTokens(ctx, "res", tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			res, err := r.Collect(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if res.Text != tc.want || res.Final.FinishReason != "stop" {
				t.Fatalf("text %q final %+v, want %q", res.Text, res.Final, tc.want)
			}
		})
	}
}

func TestTokenStreamAbort(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	w, err := c.OpenTokenStream(ctx, "ab1")
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"a", "b"} {
		if err := w.Write(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Abort(ctx, &semaq.TokenError{Code: semaq.TokenErrUpstream, Message: "model crashed"}); err != nil {
		t.Fatal(err)
	}
	r, err := c.ReadTokens(ctx, "ab1")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	chunks, err := readAllTokens(t, r)
	if !errors.Is(err, semaq.ErrTokenAborted) || !errors.Is(err, &semaq.TokenError{Code: semaq.TokenErrUpstream}) {
		t.Fatalf("err = %v, want the upstream error", err)
	}
	if len(chunks) == 0 || chunks[0].Text+chunks[len(chunks)-1].Text != "ab" && chunks[0].Text != "ab" {
		t.Fatalf("tokens before the abort were not all delivered: %+v", chunks)
	}

	// A writer that is gone: whoever holds its key (a worker that took
	// over the job) ends its stream after the last record stored.
	const key = "writer-key-of-ab2-0123"
	w2, _ := c.OpenTokenStream(ctx, "ab2", client.WithWriterKey(key))
	_ = w2.Write(ctx, "x")
	_ = w2.Write(ctx, "y")
	// Wait until the writer's records are stored, as a crashed writer's
	// would be.
	waitFor(t, func() bool {
		last, err := c.LastTokenRecord(ctx, "ab2")
		return err == nil && last != nil && last.Offset+uint64(last.N) == 2
	})
	if err := c.AbortTokenStream(ctx, "ab2", &semaq.TokenError{Code: "forged"}); !errors.Is(err, semaq.ErrTokenWriter) {
		t.Fatalf("AbortTokenStream without the writer's key: %v", err)
	}
	if err := c.AbortTokenStream(ctx, "ab2", &semaq.TokenError{Code: semaq.TokenErrWorkerLost, Message: "worker w1 stopped"},
		client.WithWriterKey(key)); err != nil {
		t.Fatal(err)
	}
	r2, _ := c.ReadTokens(ctx, "ab2")
	defer r2.Close()
	chunks, err = readAllTokens(t, r2)
	if !errors.Is(err, &semaq.TokenError{Code: semaq.TokenErrWorkerLost}) {
		t.Fatalf("err = %v, want worker_lost", err)
	}
	text := ""
	for _, ch := range chunks {
		text += ch.Text
	}
	if text != "xy" {
		t.Fatalf("text before the abort %q, want xy", text)
	}
	// Ending an ended stream changes nothing.
	if err := c.AbortTokenStream(ctx, "ab2", &semaq.TokenError{Code: "again"}); err != nil {
		t.Fatal(err)
	}
}

// A reader that reads nothing does not hold up the writer: the writer
// finishes, and the reader later gets everything in order.
func TestTokenWriterNotBlockedBySlowReader(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	r, err := c.ReadTokens(ctx, "slow")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	w, err := c.OpenTokenStream(ctx, "slow", client.WithWriteWindow(64))
	if err != nil {
		t.Fatal(err)
	}
	const n = 50000
	for i := range n {
		if err := w.Write(ctx, fmt.Sprintf("%d,", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx, semaq.TokenFinal{}); err != nil {
		t.Fatalf("writer did not finish while its reader was idle: %v", err)
	}
	res, err := r.Collect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Tokens != n || !strings.HasPrefix(res.Text, "0,1,2,") || !strings.HasSuffix(res.Text, fmt.Sprintf(",%d,", n-1)) {
		t.Fatalf("reader got %d tokens", res.Tokens)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestTokenStreamRetentionAfterClose(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w, err := c.OpenTokenStream(ctx, "ret", client.WithRetention(300*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Write(ctx, "a")
	// The broker starts the retention when it takes the final record, which
	// is after this instant and before Close returns: time from here.
	closed := time.Now()
	if err := w.Close(ctx, semaq.TokenFinal{}); err != nil {
		t.Fatal(err)
	}
	last, err := c.LastTokenRecord(ctx, "ret")
	if err != nil || last == nil || last.Final == nil || last.Final.FinishReason != "stop" {
		t.Fatalf("right after close: %+v %v", last, err)
	}
	waitFor(t, func() bool {
		last, err := c.LastTokenRecord(ctx, "ret")
		return err == nil && last == nil
	})
	if time.Since(closed) < 300*time.Millisecond {
		t.Fatalf("stream removed %s after close, before its retention", time.Since(closed))
	}
}

func TestTokenStreamBadInput(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx := context.Background()
	if _, err := c.OpenTokenStream(ctx, "a.b"); !errors.Is(err, semaq.ErrBadRequest) || !strings.Contains(err.Error(), "request id") {
		t.Fatalf("OpenTokenStream(a.b) = %v", err)
	}
	if _, err := c.ReadTokens(ctx, "x", client.FromSeq(0)); !errors.Is(err, semaq.ErrBadRequest) {
		t.Fatalf("FromSeq(0) = %v", err)
	}
	if _, err := c.OpenTokenStream(ctx, "x", client.WithWriteWindow(0)); !errors.Is(err, semaq.ErrBadRequest) {
		t.Fatalf("WithWriteWindow(0) = %v", err)
	}
	// A record the broker cannot take breaks the writer: Close says so and
	// writes no final record.
	w, err := c.OpenTokenStream(ctx, "too-big")
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Write(ctx, strings.Repeat("x", 2<<20))
	if err := w.Close(ctx, semaq.TokenFinal{}); err == nil || !strings.Contains(err.Error(), "too-big") {
		t.Fatalf("Close after an oversized record: %v", err)
	}
	if last, err := c.LastTokenRecord(ctx, "too-big"); err != nil || last != nil {
		t.Fatalf("a broken stream has records: %+v %v", last, err)
	}
	var fc client.FunctionCalls
	fc.Add(semaq.FunctionCallFragment{Name: "f", Arguments: `{"a":`})
	if _, err := fc.Calls(); err == nil || !strings.Contains(err.Error(), "not complete JSON") {
		t.Fatalf("incomplete arguments: %v", err)
	}
}

// A live reader takes records from a subscription; one made after records
// were stored sees the jump and fills it from the stored stream.
func TestTokenReaderLiveStart(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	write := func(id string, from, to int, end bool) {
		t.Helper()
		for i := from; i < to; i++ {
			rawRecord(t, s, id, semaq.TokenChunk{Seq: uint64(i + 1), Offset: uint64(i), N: 1, Text: fmt.Sprintf("%d,", i)})
		}
		if end {
			rawRecord(t, s, id, semaq.TokenChunk{Seq: uint64(to + 1), Offset: uint64(to), Final: &semaq.TokenFinal{FinishReason: "stop"}})
		}
	}
	want := ""
	for i := range 20 {
		want += fmt.Sprintf("%d,", i)
	}

	r, err := c.ReadTokens(ctx, "live1", client.WithLiveStart())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	write("live1", 0, 20, true)
	res, err := r.Collect(ctx)
	if err != nil || res.Text != want {
		t.Fatalf("live from the start: %q %v", res.Text, err)
	}

	write("live2", 0, 10, false) // before the reader: the subscription misses them
	r2, err := c.ReadTokens(ctx, "live2", client.WithLiveStart())
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	write("live2", 10, 20, true)
	res, err = r2.Collect(ctx)
	if err != nil || res.Text != want {
		t.Fatalf("live after records were stored: %q %v", res.Text, err)
	}
}

// A worker writes its job's answer keyed by the job's lease; another
// writer, without the lease, cannot write into it.
func TestJobTokenStream(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	other := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.AddQueue(ctx, semaq.QueueConfig{Name: "JOBTOK", Subjects: []string{"jobtok.>"}, Storage: "memory"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, "jobtok.a", []byte("prompt"), client.WithMsgID("req-job-1")); err != nil {
		t.Fatal(err)
	}
	jobs, err := c.Fetch(ctx, "JOBTOK", client.FetchWait(10*time.Second))
	if err != nil || len(jobs) != 1 {
		t.Fatalf("fetch: %v %v", jobs, err)
	}
	job := jobs[0]
	w, err := job.OpenTokenStream(ctx, client.WithWriteWindow(1))
	if err != nil {
		t.Fatal(err)
	}
	if w.ID() != "req-job-1" {
		t.Fatalf("job stream id %q", w.ID())
	}
	if err := w.Write(ctx, "answer"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool {
		last, err := c.LastTokenRecord(ctx, "req-job-1")
		return err == nil && last != nil
	})
	// Someone else, with a key of its own, cannot end it.
	if err := other.AbortTokenStream(ctx, "req-job-1", &semaq.TokenError{Code: "cancelled"}); !errors.Is(err, semaq.ErrTokenWriter) {
		t.Fatalf("abort by another writer: %v", err)
	}
	if err := w.Close(ctx, semaq.TokenFinal{}); err != nil {
		t.Fatal(err)
	}
	_ = job.Ack(ctx)
	r, err := other.ReadTokens(ctx, "req-job-1")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if res, err := r.Collect(ctx); err != nil || res.Text != "answer" {
		t.Fatalf("the job's answer: %+v %v", res, err)
	}
}
