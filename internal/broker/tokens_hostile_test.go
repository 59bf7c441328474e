package broker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/internal/sse"
	"github.com/semaq/semaq/semaq"
)

// Hostile token writers: a public user with a stock nats.go client tries to
// write into other requests' token streams, end them, break their readers
// and fill the broker's memory. Every attempt must be refused with a clear
// error and never reach a reader.

// attacker is a stock NATS client of the public user.
type attacker struct {
	t  *testing.T
	nc *nats.Conn
	js jetstream.JetStream
}

func newAttacker(t *testing.T, s *broker.Server) *attacker {
	t.Helper()
	errs := make(chan error, 64)
	nc, err := nats.Connect(s.ClientURL(), nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &attacker{t: t, nc: nc, js: js}
}

// send publishes data on subj with key (none when "") and returns the
// broker's answer: nil for a PubAck, else the error.
func (a *attacker) send(subj, key string, data []byte) error {
	a.t.Helper()
	m := nats.NewMsg(subj)
	m.Data = data
	if key != "" {
		m.Header.Set(semaq.HdrTokenKey, key)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := a.js.PublishMsg(ctx, m)
	return err
}

func rec(c semaq.TokenChunk) []byte { return semaq.AppendTokenChunk(nil, &c) }

// wantRefused fails unless err is the relay's refusal with errCode (or
// orCode, when given).
func wantRefused(t *testing.T, what string, err error, errCode uint16, mention string, orCode ...uint16) {
	t.Helper()
	var ae *jetstream.APIError
	if !errors.As(err, &ae) || ae.ErrorCode != jetstream.ErrorCode(errCode) && !slices.Contains(orCode, uint16(ae.ErrorCode)) {
		t.Fatalf("%s: got %v, want a refusal with err_code %d", what, err, errCode)
	}
	if mention != "" && !strings.Contains(ae.Description, mention) {
		t.Fatalf("%s: refusal %q does not mention %q", what, ae.Description, mention)
	}
}

// victim is a legitimate SDK writer with a consumer reader and a live
// reader started before it writes.
type victim struct {
	id       string
	w        *client.TokenWriter
	consumer *client.TokenReader
	live     *client.TokenReader
	text     string
}

func startVictim(t *testing.T, c *client.Client, id string) *victim {
	t.Helper()
	ctx := context.Background()
	cons, err := c.ReadTokens(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cons.Close() })
	live, err := c.ReadTokens(ctx, id, client.WithLiveStart(), client.WithGapTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.Close() })
	w, err := c.OpenTokenStream(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	v := &victim{id: id, w: w, consumer: cons, live: live}
	v.write(t, "Hello", " world")
	// Until the records are stored, as an attacker reading the stream
	// would see them.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		last, err := c.LastTokenRecord(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if last != nil && last.Offset+uint64(last.N) == 2 {
			return v
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the victim's records were not stored: last %+v", last)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func (v *victim) write(t *testing.T, toks ...string) {
	t.Helper()
	for _, tok := range toks {
		if err := v.w.Write(context.Background(), tok); err != nil {
			t.Fatal(err)
		}
		v.text += tok
	}
}

// finish closes the stream and checks that both readers got exactly what
// the victim wrote, ended by its own final record.
func (v *victim) finish(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := v.w.Close(ctx, semaq.TokenFinal{FinishReason: "length", Usage: &semaq.TokenUsage{Completion: 7}}); err != nil {
		t.Fatalf("victim's Close: %v", err)
	}
	for name, r := range map[string]*client.TokenReader{"consumer": v.consumer, "live": v.live} {
		res, err := r.Collect(ctx)
		if err != nil {
			t.Fatalf("%s reader: %v", name, err)
		}
		if res.Text != v.text || res.Final.FinishReason != "length" || res.Final.Usage == nil || res.Final.Usage.Completion != 7 {
			t.Fatalf("%s reader got %q %+v, want %q ended by the victim's final", name, res.Text, res.Final, v.text)
		}
		if r.Duplicates() != 0 {
			t.Fatalf("%s reader dropped %d duplicates: forged records reached it", name, r.Duplicates())
		}
	}
}

func TestTokenHostileForgedChunk(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	a := newAttacker(t, s)
	v := startVictim(t, c, "victim-chunk")
	last, err := c.LastTokenRecord(context.Background(), v.id)
	if err != nil || last == nil {
		t.Fatalf("victim's records: %+v %v", last, err)
	}
	// The attacker reads the stream, so it knows the next seq and offset.
	next := semaq.TokenChunk{Seq: last.Seq + 1, Offset: last.Offset + uint64(last.N), N: 1, Text: " FORGED"}
	forged := rec(next)

	// Core publishes first (no answer comes); the requests below, on the
	// same connection, are handled after them.
	if err := a.nc.Publish(semaq.TokenWriteChunkSubject(v.id), forged); err != nil {
		t.Fatal(err)
	}
	for _, subj := range []string{
		semaq.TokenChunkSubject("", v.id),                                   // where records are stored: nothing captures it now
		reserved.TokenStorePrefix + semaq.TokenNoTenant + "." + v.id + ".c", // storage: denied to the public user
		semaq.TokenLivePrefix + semaq.TokenNoTenant + "." + v.id + ".c",     // live readers' subject: denied too
		"$SQ.w.$tok.$none." + v.id + ".c",                                   // spelled out
		semaq.TokenWritePrefix + v.id + ".c.x",                              // not a write subject
		semaq.TokenWritePrefix + "victim-chunk.c" + ".end",                  // nor this
	} {
		if err := a.nc.Publish(subj, forged); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := a.send(semaq.TokenWriteChunkSubject(v.id), "", forged); err == nil {
		t.Fatal("a record without a writer key was stored")
	} else {
		wantRefused(t, "no key", err, semaq.ErrCodeTokenWriter, semaq.HdrTokenKey)
	}
	for _, key := range []string{"0123456789abcdef0123456789", "AAAAAAAAAAAAAAAAAAAAAA"} {
		wantRefused(t, "wrong key", a.send(semaq.TokenWriteChunkSubject(v.id), key, forged), semaq.ErrCodeTokenWriter, "another writer")
	}
	wantRefused(t, "short key", a.send(semaq.TokenWriteChunkSubject(v.id), "k", forged), semaq.ErrCodeTokenWriter, "writer key")
	// Straight onto the stored subject: public users may not publish there
	// (the server refuses it, so no answer comes), and no stream takes it.
	if err := a.send(semaq.TokenChunkSubject("", v.id), "", forged); err == nil {
		t.Fatal("a record published on the stored subject was acked")
	}
	v.write(t, " and", " more")
	v.finish(t)
}

func TestTokenHostileForgedFinal(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	a := newAttacker(t, s)
	ctx := context.Background()
	v := startVictim(t, c, "victim-end")
	last, err := c.LastTokenRecord(ctx, v.id)
	if err != nil || last == nil {
		t.Fatalf("victim's records: %+v %v", last, err)
	}
	seq, off := last.Seq+1, last.Offset+uint64(last.N)
	final := rec(semaq.TokenChunk{Seq: seq, Offset: off, Final: &semaq.TokenFinal{FinishReason: "stop"}})
	abort := rec(semaq.TokenChunk{Seq: seq, Offset: off, Error: &semaq.TokenError{Code: "worker_lost", Message: "forged"}})
	for _, key := range []string{"", "AAAAAAAAAAAAAAAAAAAAAA"} {
		for name, data := range map[string][]byte{"final": final, "error": abort} {
			m := nats.NewMsg(semaq.TokenWriteEndSubject(v.id))
			m.Data = data
			m.Header.Set(semaq.HdrTokenRetention, "0s") // would purge the victim's answer at once
			if key != "" {
				m.Header.Set(semaq.HdrTokenKey, key)
			}
			_, err := a.js.PublishMsg(ctx, m)
			wantRefused(t, "forged "+name+" key "+key, err, semaq.ErrCodeTokenWriter, "")
		}
	}
	// The SDK's own abort, used by a worker that took over a request, is
	// a forgery too when it is not the stream's writer.
	if err := c.AbortTokenStream(ctx, v.id, &semaq.TokenError{Code: "cancelled"}); !errors.Is(err, semaq.ErrTokenWriter) {
		t.Fatalf("AbortTokenStream by another writer: %v", err)
	}
	v.write(t, " still", " going")
	v.finish(t)
	if last, err := c.LastTokenRecord(ctx, v.id); err != nil || last.Final == nil || last.Final.FinishReason != "length" {
		t.Fatalf("last record %+v %v, want the victim's final", last, err)
	}
}

func TestTokenHostileMalformed(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	a := newAttacker(t, s)
	const key = "attacker-key-0123456789"
	v := startVictim(t, c, "victim-bad")

	// Against someone else's stream: refused, as a bad record or for the
	// key.
	for _, data := range [][]byte{nil, []byte("garbage"), []byte("{}"), rec(semaq.TokenChunk{Seq: 3, Offset: 2, N: 1, Text: "x"})} {
		wantRefused(t, fmt.Sprintf("%q into the victim's stream", data),
			a.send(semaq.TokenWriteChunkSubject(v.id), key, data), semaq.ErrCodeTokenWriter, "", semaq.ErrCodeTokenRecord)
		wantRefused(t, fmt.Sprintf("%q without a key", data),
			a.send(semaq.TokenWriteChunkSubject(v.id), "", data), semaq.ErrCodeTokenWriter, "")
	}
	// Against its own stream: the key is right, the records are not.
	own := "attacker-own"
	if err := a.send(semaq.TokenWriteChunkSubject(own), key, rec(semaq.TokenChunk{Seq: 1, N: 1, Text: "a"})); err != nil {
		t.Fatalf("a well-formed first record: %v", err)
	}
	bad := []struct {
		name string
		subj string
		data []byte
		code uint16
	}{
		{"empty", semaq.TokenWriteChunkSubject(own), nil, semaq.ErrCodeTokenRecord},
		{"not JSON", semaq.TokenWriteChunkSubject(own), []byte("\x00\xff garbage"), semaq.ErrCodeTokenRecord},
		{"seq 0", semaq.TokenWriteChunkSubject(own), []byte(`{"s":0,"o":1,"n":1,"t":"x"}`), semaq.ErrCodeTokenRecord},
		{"no tokens", semaq.TokenWriteChunkSubject(own), rec(semaq.TokenChunk{Seq: 2, Offset: 1}), semaq.ErrCodeTokenRecord},
		{"bad lengths", semaq.TokenWriteChunkSubject(own), []byte(`{"s":2,"o":1,"n":2,"t":"ab","l":[5,-3]}`), semaq.ErrCodeTokenRecord},
		{"final on .c", semaq.TokenWriteChunkSubject(own), rec(semaq.TokenChunk{Seq: 2, Offset: 1, Final: &semaq.TokenFinal{FinishReason: "stop"}}), semaq.ErrCodeTokenRecord},
		{"chunk on .end", semaq.TokenWriteEndSubject(own), rec(semaq.TokenChunk{Seq: 2, Offset: 1, N: 1, Text: "x"}), semaq.ErrCodeTokenRecord},
		{"gap", semaq.TokenWriteChunkSubject(own), rec(semaq.TokenChunk{Seq: 3, Offset: 1, N: 1, Text: "x"}), semaq.ErrCodeTokenRecord},
		{"duplicate", semaq.TokenWriteChunkSubject(own), rec(semaq.TokenChunk{Seq: 1, N: 1, Text: "x"}), semaq.ErrCodeTokenRecord},
		{"wrong offset", semaq.TokenWriteChunkSubject(own), rec(semaq.TokenChunk{Seq: 2, Offset: 7, N: 1, Text: "x"}), semaq.ErrCodeTokenRecord},
		{"huge", semaq.TokenWriteChunkSubject(own), rec(semaq.TokenChunk{Seq: 2, Offset: 1, N: 1, Text: strings.Repeat("x", 300<<10)}), semaq.ErrCodeTokenLimit},
		{"first record not 1", semaq.TokenWriteChunkSubject("attacker-other"), rec(semaq.TokenChunk{Seq: 5, Offset: 4, N: 1, Text: "x"}), semaq.ErrCodeTokenRecord},
		{"no kind", semaq.TokenWritePrefix + own, rec(semaq.TokenChunk{Seq: 2, Offset: 1, N: 1, Text: "x"}), semaq.ErrCodeTokenRecord},
		{"bad id", semaq.TokenWritePrefix + "a$b.c", rec(semaq.TokenChunk{Seq: 1, N: 1, Text: "x"}), semaq.ErrCodeTokenRecord},
	}
	for _, b := range bad {
		wantRefused(t, b.name, a.send(b.subj, key, b.data), b.code, "")
	}
	// Its own stream is intact: record 2 still follows record 1.
	if err := a.send(semaq.TokenWriteEndSubject(own), key, rec(semaq.TokenChunk{Seq: 2, Offset: 1, Final: &semaq.TokenFinal{FinishReason: "stop"}})); err != nil {
		t.Fatalf("the right record 2 after the refusals: %v", err)
	}
	wantRefused(t, "after the end", a.send(semaq.TokenWriteChunkSubject(own), key, rec(semaq.TokenChunk{Seq: 3, Offset: 1, N: 1, Text: "x"})),
		semaq.ErrCodeTokenRecord, "ended")
	r, err := c.ReadTokens(context.Background(), own)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if res, err := r.Collect(context.Background()); err != nil || res.Text != "a" || res.Records != 2 {
		t.Fatalf("the attacker's own stream read back as %+v %v", res, err)
	}
	v.write(t, "!")
	v.finish(t)
}

func TestTokenHostileFlood(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)

	t.Run("bytes of one request", func(t *testing.T) {
		// The default limit, 16 MiB, with records of 200 KiB.
		a := newAttacker(t, s)
		const key = "flood-bytes-key-0123456789"
		text := strings.Repeat("x", 200<<10)
		var sent int
		var err error
		for seq := uint64(1); seq < 200; seq++ {
			data := rec(semaq.TokenChunk{Seq: seq, Offset: seq - 1, N: 1, Text: text})
			if err = a.send(semaq.TokenWriteChunkSubject("flood-bytes"), key, data); err != nil {
				break
			}
			sent += len(data)
		}
		wantRefused(t, "past 16 MiB", err, semaq.ErrCodeTokenLimit, fmt.Sprint(semaq.DefaultTokenStreamMaxBytes))
		if sent > semaq.DefaultTokenStreamMaxBytes || sent < semaq.DefaultTokenStreamMaxBytes-(210<<10) {
			t.Fatalf("stored %d bytes before the refusal, want just under %d", sent, semaq.DefaultTokenStreamMaxBytes)
		}
	})

	t.Run("records of one request, SDK writer", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := broker.SetTokenLimits(ctx, s, broker.TokenLimits{StreamRecords: 50}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = broker.SetTokenLimits(context.Background(), s, broker.TokenLimits{}) })
		// Window 1: a record per acknowledgement, so the limit comes soon.
		w, err := c.OpenTokenStream(ctx, "flood-records", client.WithWriteWindow(1))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 50_000_000 && err == nil; i++ {
			err = w.Write(ctx, "t")
		}
		if !errors.Is(err, semaq.ErrTokenLimit) {
			t.Fatalf("Write past the record limit: %v", err)
		}
		err = w.Abort(ctx, errors.New("stopped by the limit"))
		if !errors.Is(err, semaq.ErrTokenLimit) || !strings.Contains(err.Error(), "50 records") {
			t.Fatalf("writer past the record limit: %v", err)
		}
		// Its readers see the stream end with the writer's error.
		r, err := c.ReadTokens(ctx, "flood-records")
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		if _, err := r.Collect(ctx); !errors.Is(err, semaq.ErrTokenAborted) {
			t.Fatalf("reader of a stream cut by the limit: %v", err)
		}
	})

	t.Run("request ids", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := broker.SetTokenLimits(ctx, s, broker.TokenLimits{MaxStreams: broker.TokenClaims(s) + 5}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = broker.SetTokenLimits(context.Background(), s, broker.TokenLimits{}) })
		a := newAttacker(t, s)
		var err error
		n := 0
		for ; n < 50 && err == nil; n++ {
			err = a.send(semaq.TokenWriteChunkSubject(fmt.Sprintf("ids-%d", n)), "flood-ids-key-0123456789",
				rec(semaq.TokenChunk{Seq: 1, N: 1, Text: "x"}))
		}
		wantRefused(t, "past the stream limit", err, semaq.ErrCodeTokenBusy, "retry later")
		if n != 6 {
			t.Fatalf("refused at the %dth new id, want the 6th", n)
		}
	})
}

// Many requests, each under its own limit, fill SQ_TOKENS: past its
// MaxBytes new records are refused and no stored answer is evicted.
func TestTokenHostileFloodTotal(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const limit = 2 << 20
	if err := broker.SetTokenLimits(ctx, s, broker.TokenLimits{StoreBytes: limit}); err != nil {
		t.Fatal(err)
	}
	// An answer stored before the flood stays readable.
	v := startVictim(t, c, "before-flood")
	if err := v.w.Close(ctx, semaq.TokenFinal{FinishReason: "length", Usage: &semaq.TokenUsage{Completion: 7}}); err != nil {
		t.Fatal(err)
	}
	a := newAttacker(t, s)
	text := strings.Repeat("y", 100<<10)
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		err = a.send(semaq.TokenWriteChunkSubject(fmt.Sprintf("flood-%d", i)), "flood-total-key-0123456789",
			rec(semaq.TokenChunk{Seq: 1, N: 1, Text: text}))
	}
	var ae *jetstream.APIError
	if !errors.As(err, &ae) || !strings.Contains(ae.Description, "maximum bytes") {
		t.Fatalf("flood past SQ_TOKENS' limit: %v, want JetStream's maximum bytes refusal", err)
	}
	st, err := a.js.Stream(ctx, semaq.TokenStream)
	if err != nil {
		t.Fatal(err)
	}
	if b := st.CachedInfo().State.Bytes; b > limit || b < limit/2 {
		t.Fatalf("SQ_TOKENS holds %d bytes, want up to its limit %d", b, limit)
	}
	// Nothing of other answers was evicted to make room.
	r, err := c.ReadTokens(ctx, v.id)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if res, err := r.Collect(ctx); err != nil || res.Text != v.text {
		t.Fatalf("an answer stored before the flood: %+v %v", res, err)
	}
}

// The dispatcher binds a job's request id to the job's lease: the holder
// is the only writer, even when an attacker wrote first.
func TestTokenHostileBoundJob(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	a := newAttacker(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const akey = "attacker-key-0123456789"

	t.Run("attacker first", func(t *testing.T) {
		id := "job-sniffed"
		for seq := uint64(1); seq <= 3; seq++ {
			if err := a.send(semaq.TokenWriteChunkSubject(id), akey, rec(semaq.TokenChunk{Seq: seq, Offset: seq - 1, N: 1, Text: "EVIL"})); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.send(semaq.TokenWriteEndSubject(id), akey, rec(semaq.TokenChunk{Seq: 4, Offset: 3, Final: &semaq.TokenFinal{FinishReason: "stop"}})); err != nil {
			t.Fatal(err)
		}
		const lease = "LeaseOfTheJob0123456789"
		broker.BindTokenJob(s, id, "", lease)
		wantRefused(t, "attacker after the bind", a.send(semaq.TokenWriteChunkSubject(id), akey, rec(semaq.TokenChunk{Seq: 1, N: 1, Text: "EVIL"})),
			semaq.ErrCodeTokenWriter, "another writer")
		w, err := c.OpenTokenStream(ctx, id, client.WithWriterKey(lease))
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range []string{"good", " answer"} {
			if err := w.Write(ctx, tok); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(ctx, semaq.TokenFinal{FinishReason: "length"}); err != nil {
			t.Fatal(err)
		}
		r, err := c.ReadTokens(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		res, err := r.Collect(ctx)
		if err != nil || res.Text != "good answer" || res.Final.FinishReason != "length" || r.Duplicates() != 0 {
			t.Fatalf("the job's stream read back as %+v (dups %d) %v", res, r.Duplicates(), err)
		}
	})

	t.Run("bound first, then redelivered", func(t *testing.T) {
		id := "job-redelivered"
		const lease1, lease2 = "FirstLease0123456789AB", "SecondLease0123456789A"
		broker.BindTokenJob(s, id, "", lease1)
		wantRefused(t, "attacker on a bound id", a.send(semaq.TokenWriteChunkSubject(id), akey, rec(semaq.TokenChunk{Seq: 1, N: 1, Text: "EVIL"})),
			semaq.ErrCodeTokenWriter, "another writer")
		w, err := c.OpenTokenStream(ctx, id, client.WithWriterKey(lease1), client.WithWriteWindow(1))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Write(ctx, "part"); err != nil {
			t.Fatal(err)
		}
		// Wait until the record is stored: the first holder "dies" here.
		for {
			last, err := c.LastTokenRecord(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if last != nil {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatal("the first holder's record was never stored")
			case <-time.After(5 * time.Millisecond):
			}
		}
		broker.BindTokenJob(s, id, "", lease2)
		if err := w.Write(ctx, "late"); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(ctx, semaq.TokenFinal{}); !errors.Is(err, semaq.ErrTokenWriter) {
			t.Fatalf("the previous holder after a redelivery: %v", err)
		}
		if err := c.AbortTokenStream(ctx, id, &semaq.TokenError{Code: semaq.TokenErrWorkerLost, Message: "taken over"},
			client.WithWriterKey(lease2)); err != nil {
			t.Fatalf("the new holder ends the stream: %v", err)
		}
		r, err := c.ReadTokens(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		res, err := r.Collect(ctx)
		var te *semaq.TokenError
		if !errors.As(err, &te) || te.Message != "taken over" || res != nil {
			t.Fatalf("the redelivered job's stream: %+v %v", res, err)
		}
	})
}

// Legitimate streams still work end to end through the relay: SDK writer,
// SDK readers (consumer and live) and the SSE door.
func TestTokenRelayLegitimate(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v := startVictim(t, c, "legit")
	for i := range 3000 {
		v.write(t, fmt.Sprintf(" %d", i))
	}
	if err := v.w.WriteFunctionCall(ctx, semaq.FunctionCallFragment{Index: 0, ID: "call_1", Name: "f", Arguments: `{"a":1}`}); err != nil {
		t.Fatal(err)
	}
	v.finish(t)

	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.HTTPAddr()+"/api/v1/tokens/legit", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("SSE: %s", resp.Status)
	}
	sr := sse.NewReader(resp.Body, 0)
	var text strings.Builder
	final := false
	for {
		ev, err := sr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ch, err := semaq.ParseTokenChunk([]byte(ev.Data))
		if err != nil {
			t.Fatalf("SSE event %q: %v", ev.Data, err)
		}
		text.WriteString(ch.Text)
		final = final || ch.Final != nil
	}
	if text.String() != v.text || !final {
		t.Fatalf("SSE read %d bytes (final %v), want %d", text.Len(), final, len(v.text))
	}
	if n := broker.TokenRelayRefused(s); n != 0 {
		t.Fatalf("the relay refused %d records of a legitimate writer", n)
	}
}
