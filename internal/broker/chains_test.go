package broker_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/provenance"
	"github.com/semaq/semaq/semaq"
)

// storedChain reads every message of session (tenant "") of stream, in
// stream order, from the stream itself.
func storedChain(t *testing.T, s *broker.Server, stream, tenant, session string) []jetstream.RawStreamMsg {
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && seq > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(semaq.HdrSession) == session && m.Header.Get(semaq.HdrTenant) == tenant && m.Subject[0] != '$' {
			out = append(out, *m)
		}
	}
	return out
}

// checkLinks checks msgs are a whole chain of stream: numbered from 1,
// each hashing to its AI-Hash and naming the one before.
func checkLinks(t *testing.T, stream string, msgs []jetstream.RawStreamMsg) {
	t.Helper()
	prev := ""
	for i, m := range msgs {
		n, _ := strconv.ParseUint(m.Header.Get(provenance.HdrChainSeq), 10, 64)
		if n != uint64(i+1) {
			t.Fatalf("message %d (seq %d) is link %q, want %d", i, m.Sequence, m.Header.Get(provenance.HdrChainSeq), i+1)
		}
		if got := m.Header.Get(provenance.HdrPrevHash); got != prev {
			t.Fatalf("link %d: previous hash %q, want %q", n, got, prev)
		}
		want := provenance.HashHex(&provenance.Link{Stream: stream, Subject: m.Subject, Seq: n, Prev: prev, Header: m.Header, Data: m.Data})
		if got := m.Header.Get(provenance.HdrHash); got != want {
			t.Fatalf("link %d: hash %s, content hashes to %s", n, got, want)
		}
		prev = want
	}
}

// provenanceHead asks the provenance API for a session's head.
func provenanceHead(t *testing.T, c *client.Client, stream, tenant, session string) *semaq.ProvenanceHead {
	t.Helper()
	h, err := c.ProvenanceHead(context.Background(), stream, tenant, session)
	if err != nil {
		t.Fatalf("provenance head of %s/%s: %v", stream, session, err)
	}
	return h
}

func TestProvenanceChainsEachSession(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx := context.Background()
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "AGENT", Subjects: []string{"agent.>"}, Provenance: semaq.ProvenanceSession}); err != nil {
		t.Fatal(err)
	}
	info, err := c.StreamInfo(ctx, "AGENT")
	if err != nil {
		t.Fatal(err)
	}
	if info.Config.Provenance != semaq.ProvenanceSession || len(info.Config.Subjects) != 1 {
		t.Fatalf("stream info %+v", info.Config)
	}
	// Four sessions, 25 messages each, published concurrently.
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for sess := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				_, err := c.Publish(ctx, fmt.Sprintf("agent.s%d.turn", sess), []byte(fmt.Sprintf(`{"turn":%d}`, i)), client.WithSession(fmt.Sprintf("s-%d", sess)))
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Messages without a session are stored as they are.
	if _, err := c.Publish(ctx, "agent.loose", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	for sess := range 4 {
		msgs := storedChain(t, s, "AGENT", "", fmt.Sprintf("s-%d", sess))
		if len(msgs) != 25 {
			t.Fatalf("session s-%d has %d messages stored, want 25", sess, len(msgs))
		}
		checkLinks(t, "AGENT", msgs)
		head := provenanceHead(t, c, "AGENT", "", fmt.Sprintf("s-%d", sess))
		if head.Links != 25 || head.Hash != msgs[24].Header.Get(provenance.HdrHash) {
			t.Fatalf("head %+v, last link %s", head, msgs[24].Header.Get(provenance.HdrHash))
		}
	}
	// A client may not set the chain's headers.
	_, err = c.Publish(ctx, "agent.x", []byte("{}"), client.WithSession("s-0"), client.WithHeader(provenance.HdrHash, "00"))
	if !errors.Is(err, semaq.ErrEnvelope) {
		t.Fatalf("publish with AI-Hash: %v, want an envelope error", err)
	}
	_ = nats.Header{}
}

func ts(sec int) string {
	return time.Date(2026, 12, 7, 12, 0, sec, 0, time.UTC).Format(time.RFC3339Nano)
}

func TestSessionOrderStrict(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx := context.Background()
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "TURNS", Subjects: []string{"turns.>"}, SessionOrder: semaq.SessionOrderStrict}); err != nil {
		t.Fatal(err)
	}
	pub := func(session, stamp string, opts ...client.PublishOption) error {
		opts = append(opts, client.WithSession(session))
		if stamp != "" {
			opts = append(opts, client.WithHeader(semaq.HdrTimestamp, stamp))
		}
		_, err := c.Publish(ctx, "turns.x", []byte(`{"ok":true}`), opts...)
		return err
	}
	for _, sec := range []int{1, 2, 5} {
		if err := pub("a", ts(sec)); err != nil {
			t.Fatal(err)
		}
	}
	// Another session has its own order.
	if err := pub("b", ts(3)); err != nil {
		t.Fatal(err)
	}
	for _, sec := range []int{5, 4} {
		err := pub("a", ts(sec))
		if !errors.Is(err, semaq.ErrSessionOrder) {
			t.Fatalf("AI-Timestamp %s after %s: %v, want the session order refusal", ts(sec), ts(5), err)
		}
		for _, want := range []string{`session "a"`, ts(sec), "last accepted " + ts(5)} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("refusal %q does not name %q", err, want)
			}
		}
	}
	if err := pub("a", ""); !errors.Is(err, semaq.ErrEnvelope) || !strings.Contains(err.Error(), semaq.HdrTimestamp) {
		t.Fatalf("no AI-Timestamp: %v", err)
	}
	if err := pub("a", "yesterday"); !errors.Is(err, semaq.ErrEnvelope) {
		t.Fatalf("a malformed AI-Timestamp: %v", err)
	}
	// Out of order is refused before the schema: a payload the schema
	// refuses gets the order's refusal when it is also late.
	if _, _, err := c.RegisterSchema(ctx, "turns-value", `{"type":"object","required":["ok"]}`); err != nil {
		t.Fatal(err)
	}
	if err := c.BindSchema(ctx, "turns.>", "turns-value"); err != nil {
		t.Fatal(err)
	}
	_, err := c.Publish(ctx, "turns.x", []byte(`{}`), client.WithSession("a"), client.WithHeader(semaq.HdrTimestamp, ts(0)))
	if !errors.Is(err, semaq.ErrSessionOrder) {
		t.Fatalf("late and invalid: %v, want the order refusal first", err)
	}
	if err := pub("a", ts(6)); err != nil {
		t.Fatal(err)
	}
	msgs := storedChain(t, s, "TURNS", "", "a")
	if len(msgs) != 4 {
		t.Fatalf("session a has %d messages stored, want 4", len(msgs))
	}
	for i, m := range msgs {
		if m.Header.Get(provenance.HdrChainSeq) != strconv.Itoa(i+1) || m.Header.Get(provenance.HdrHash) != "" {
			t.Fatalf("message %d: chain seq %q, hash %q (an ordered stream numbers its links, hashes none)", i, m.Header.Get(provenance.HdrChainSeq), m.Header.Get(provenance.HdrHash))
		}
	}
	// A session's messages in a fast batch are ordered too; in an atomic
	// batch they are refused (a chain's batch is the session's own).
	ack, err := c.PublishBatch(ctx, []*nats.Msg{
		batchMsg("turns.x", `{"ok":true}`, semaq.HdrSession, "a", semaq.HdrTimestamp, ts(7)),
		batchMsg("turns.x", `{"ok":true}`, semaq.HdrSession, "a", semaq.HdrTimestamp, ts(7)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if ack.Results[0].Error != nil || !errors.Is(ack.Results[1].Error, semaq.ErrSessionOrder) {
		t.Fatalf("fast batch results %+v", ack.Results)
	}
	_, err = c.PublishBatch(ctx, []*nats.Msg{batchMsg("turns.x", `{"ok":true}`, semaq.HdrSession, "a", semaq.HdrTimestamp, ts(8))}, client.Atomic())
	if !errors.Is(err, semaq.ErrBatchRefused) || !strings.Contains(err.Error(), "chains its sessions") {
		t.Fatalf("atomic batch of a chained session: %v", err)
	}
}

func TestSessionOrderBySeqSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	withDir := func(c *broker.Config) { c.DataDir = dir }
	ctx := context.Background()
	s1 := brokertest.Start(t, withDir)
	c1 := brokertest.Connect(t, s1)
	if _, err := c1.AddStream(ctx, semaq.StreamConfig{Name: "SEQ", Subjects: []string{"seq.>"}, SessionOrder: semaq.SessionOrderStrictSeq, Provenance: semaq.ProvenanceSession}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		if _, err := c1.Publish(ctx, "seq.a", []byte("x"), client.WithSession("s"), client.WithHeader(semaq.HdrSeq, strconv.Itoa(i*10))); err != nil {
			t.Fatal(err)
		}
	}
	c1.Close()
	if err := s1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	s2 := brokertest.Start(t, withDir)
	c2 := brokertest.Connect(t, s2)
	// The last value lives in the stream: the new process knows it.
	_, err := c2.Publish(ctx, "seq.a", []byte("x"), client.WithSession("s"), client.WithHeader(semaq.HdrSeq, "30"))
	if !errors.Is(err, semaq.ErrSessionOrder) || !strings.Contains(err.Error(), "last accepted 30") {
		t.Fatalf("AI-Seq 30 again after a restart: %v", err)
	}
	if _, err := c2.Publish(ctx, "seq.a", []byte("x"), client.WithSession("s"), client.WithHeader(semaq.HdrSeq, "31")); err != nil {
		t.Fatal(err)
	}
	msgs := storedChain(t, s2, "SEQ", "", "s")
	if len(msgs) != 4 {
		t.Fatalf("%d messages, want 4", len(msgs))
	}
	checkLinks(t, "SEQ", msgs) // one chain across the restart
}

func TestProvenanceSigned(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx := context.Background()
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "SIGNED", Subjects: []string{"signed.>"}, Provenance: semaq.ProvenanceSigned}); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := c.Publish(ctx, "signed.a", []byte(strconv.Itoa(i)), client.WithSession("s"), client.WithTenant("acme")); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := c.ProvenanceKeys(ctx)
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %+v: %v", keys, err)
	}
	k := keys[0]
	msgs := storedChain(t, s, "SIGNED", "acme", "s")
	if len(msgs) != 3 {
		t.Fatalf("%d messages, want 3", len(msgs))
	}
	checkLinks(t, "SIGNED", msgs)
	for _, m := range msgs {
		if m.Header.Get(provenance.HdrKeyID) != k.ID {
			t.Fatalf("link signed by %q, the node's key is %q", m.Header.Get(provenance.HdrKeyID), k.ID)
		}
		sig, err := base64.StdEncoding.DecodeString(m.Header.Get(provenance.HdrSignature))
		if err != nil || !provenance.VerifySignature(k.PublicKey, m.Header.Get(provenance.HdrHash), sig) {
			t.Fatalf("link %s: signature does not verify (%v)", m.Header.Get(provenance.HdrChainSeq), err)
		}
	}
	// The chain of tenant acme's session s is not another tenant's.
	if h := provenanceHead(t, c, "SIGNED", "acme", "s"); h.Links != 3 {
		t.Fatalf("head %+v", h)
	}
	var ae *semaq.APIError
	if _, err := c.ProvenanceHead(ctx, "SIGNED", "", "s"); !errors.As(err, &ae) || ae.ErrCode != semaq.ErrCodeChainNotFound {
		t.Fatalf("head of session s without tenant: %v", err)
	}
}

// A writer that died after its head record and before all of its batch:
// the head claims links the stream does not have. The next writer waits
// out the batch's window, fences it off with a record of what is stored,
// and goes on from there — one chain, no gap, no fork.
func TestChainSettlesAnUnfinishedBatch(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx := context.Background()
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "DIED", Subjects: []string{"died.>"}, Provenance: semaq.ProvenanceSession}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := c.Publish(ctx, "died.x", []byte(strconv.Itoa(i)), client.WithSession("s")); err != nil {
			t.Fatal(err)
		}
	}
	// The dead writer's record (links 3 and 4 on the base of 2) and link
	// 3, stored as the ingress stores it; link 4 never came.
	nc, err := brokertest.DialOperator(s)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	h := provenanceHead(t, c, "DIED", "", "s")
	head := nats.NewMsg("$SQ.w." + semaq.ChainHeadSubject("DIED", provenance.SessionKey("", "s")))
	head.Header.Set(semaq.HdrSession, "s")
	head.Header.Set(semaq.HdrChainLinks, "4")
	head.Header.Set("AI-Chain-Base", "2")
	head.Header.Set("AI-Chain-Base-Hash", h.Hash)
	head.Header.Set(provenance.HdrHash, strings.Repeat("ab", 32))
	head.Header.Set(semaq.HdrChainFirst, h.First.Format(time.RFC3339Nano))
	head.Header.Set(semaq.HdrChainLast, h.Last.Format(time.RFC3339Nano))
	head.Header.Set("Nats-Rollup", "sub")
	head.Header.Set(semaq.HdrExpectedLastSubjSeq, strconv.FormatUint(h.Seq, 10))
	r, err := nc.RequestMsg(head, 5*time.Second)
	if err != nil || strings.Contains(string(r.Data), "error") {
		t.Fatalf("the dead writer's head record: %s %v", r.Data, err)
	}
	var hack semaq.PubAck
	_ = json.Unmarshal(r.Data, &hack)
	link3 := nats.NewMsg("$SQ.w.died.x")
	link3.Header.Set(semaq.HdrSession, "s")
	link3.Header.Set(provenance.HdrChainSeq, "3")
	link3.Header.Set(provenance.HdrPrevHash, h.Hash)
	link3.Data = []byte("from the dead writer")
	link3.Header.Set(provenance.HdrHash, provenance.HashHex(&provenance.Link{Stream: "DIED", Subject: "died.x", Seq: 3, Prev: h.Hash, Header: link3.Header, Data: link3.Data}))
	link3.Header.Set(semaq.HdrExpectedLastSubjSeq, strconv.FormatUint(hack.Sequence, 10))
	link3.Header.Set(semaq.HdrExpectedLastSubjSeqSubj, semaq.ChainHeadSubject("DIED", provenance.SessionKey("", "s")))
	if r, err := nc.RequestMsg(link3, 5*time.Second); err != nil || strings.Contains(string(r.Data), "error") {
		t.Fatalf("link 3: %s %v", r.Data, err)
	}

	// The live writer's head is stale: its record is refused, it reads the
	// head, waits out the window and settles the batch at link 3.
	if _, err := c.Publish(ctx, "died.x", []byte("after"), client.WithSession("s")); err != nil {
		t.Fatal(err)
	}
	msgs := storedChain(t, s, "DIED", "", "s")
	if len(msgs) != 4 {
		t.Fatalf("%d links stored, want 4", len(msgs))
	}
	checkLinks(t, "DIED", msgs)
	if string(msgs[2].Data) != "from the dead writer" || string(msgs[3].Data) != "after" {
		t.Fatalf("links 3 and 4: %q %q", msgs[2].Data, msgs[3].Data)
	}
	if h := provenanceHead(t, c, "DIED", "", "s"); h.Links != 4 || h.Hash != msgs[3].Header.Get(provenance.HdrHash) {
		t.Fatalf("head %+v", h)
	}
	// The dead writer's link 4, late, is fenced out.
	late := nats.NewMsg("$SQ.w.died.x")
	late.Header.Set(semaq.HdrSession, "s")
	late.Header.Set(provenance.HdrChainSeq, "4")
	late.Header.Set(semaq.HdrExpectedLastSubjSeq, strconv.FormatUint(hack.Sequence, 10))
	late.Header.Set(semaq.HdrExpectedLastSubjSeqSubj, semaq.ChainHeadSubject("DIED", provenance.SessionKey("", "s")))
	if r, err := nc.RequestMsg(late, 5*time.Second); err != nil || !strings.Contains(string(r.Data), "wrong last sequence") {
		t.Fatalf("the dead writer's late link 4: %s %v", r.Data, err)
	}
}

func TestChainNeedsLimitsRetention(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx := context.Background()
	for _, cfg := range []semaq.StreamConfig{
		{Name: "WQ", Subjects: []string{"wq.>"}, Retention: "workqueue", Provenance: semaq.ProvenanceSession},
		{Name: "IN", Subjects: []string{"in.>"}, Retention: "interest", SessionOrder: semaq.SessionOrderStrict},
		{Name: "BADP", Subjects: []string{"badp.>"}, Provenance: "sessions"},
		{Name: "BADO", Subjects: []string{"bado.>"}, SessionOrder: "loose"},
	} {
		_, err := c.AddStream(ctx, cfg)
		if err == nil {
			t.Fatalf("stream %s made", cfg.Name)
		}
		want := "limits retention"
		switch cfg.Name {
		case "BADP":
			want = `provenance "sessions" is not one of session, signed`
		case "BADO":
			want = `session order "loose" is not one of strict, strict-seq`
		}
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("stream %s: %v, want it to say %q", cfg.Name, err, want)
		}
	}
}

// A message JetStream finds a duplicate (its Nats-Msg-Id stored before)
// takes no link: the chain goes on without a gap.
func TestChainDuplicateTakesNoLink(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx := context.Background()
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "DUP", Subjects: []string{"dup.>"}, Provenance: semaq.ProvenanceSession}); err != nil {
		t.Fatal(err)
	}
	pub := func(id string) *semaq.PubAck {
		t.Helper()
		ack, err := c.Publish(ctx, "dup.x", []byte(id), client.WithSession("s"), client.WithMsgID(id))
		if err != nil {
			t.Fatal(err)
		}
		return ack
	}
	first := pub("a")
	if again := pub("a"); !again.Duplicate || again.Sequence != first.Sequence {
		t.Fatalf("the same message again: %+v, want a duplicate of %d", again, first.Sequence)
	}
	pub("b")
	// In one fast batch: a duplicate between two new ones.
	ack, err := c.PublishBatch(ctx, []*nats.Msg{
		batchMsg("dup.x", "c", semaq.HdrSession, "s", semaq.HdrMsgID, "c"),
		batchMsg("dup.x", "b", semaq.HdrSession, "s", semaq.HdrMsgID, "b"),
		batchMsg("dup.x", "d", semaq.HdrSession, "s", semaq.HdrMsgID, "d"),
	})
	if err != nil || ack.Stored != 3 || !ack.Results[1].Duplicate {
		t.Fatalf("batch %+v %v", ack, err)
	}
	msgs := storedChain(t, s, "DUP", "", "s")
	var got []string
	for _, m := range msgs {
		got = append(got, string(m.Data))
	}
	if strings.Join(got, ",") != "a,b,c,d" {
		t.Fatalf("stored %v, want a,b,c,d", got)
	}
	checkLinks(t, "DUP", msgs)
	if h := provenanceHead(t, c, "DUP", "", "s"); h.Links != 4 || h.Settling {
		t.Fatalf("head %+v", h)
	}
}
