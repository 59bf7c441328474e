package broker_test

import (
	"context"
	"encoding/json"
	"errors"
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

// serveAnswer plays a worker: it fetches one job of queue, streams text
// (and the calls) as its answer, closes the stream and acks the job.
func serveAnswer(ctx context.Context, t *testing.T, c *client.Client, queue, wantID string, text []string, calls ...semaq.FunctionCallFragment) {
	t.Helper()
	jobs := fetch(t, c, queue, client.FetchMax(1))
	if len(jobs) != 1 || jobs[0].ID != wantID {
		t.Fatalf("fetched %v, want %s", ids(jobs), wantID)
	}
	w, err := jobs[0].OpenTokenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range text {
		if err := w.Write(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range calls {
		if err := w.WriteFunctionCall(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(ctx, semaq.TokenFinal{FinishReason: "stop"}); err != nil {
		t.Fatal(err)
	}
	if err := jobs[0].Ack(ctx); err != nil {
		t.Fatal(err)
	}
}

// tokenRecordsHash is the records hash of request id's stream as
// SQ_TOKENS stores it.
func tokenRecordsHash(ctx context.Context, t *testing.T, s *broker.Server, tenant, id string) string {
	t.Helper()
	nc, err := brokertest.DialOperator(s)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := js.Stream(ctx, semaq.TokenStream)
	if err != nil {
		t.Fatal(err)
	}
	h := semaq.NewAnswerHash()
	filter := semaq.TokenSubjectFilter(tenant, id)
	for seq := uint64(1); ; {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(filter))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return h.Sum()
		}
		if err != nil {
			t.Fatal(err)
		}
		h.Add(m.Data)
		seq = m.Sequence + 1
	}
}

// A queue that chains its answers: the answer a worker streams for a
// request of a session is appended to that session's chain in the
// provenance stream, after the session's own messages, with the text, the
// function calls and the hash of the stored records; the export verifies.
// A request without a session gets no answer record, nor does a writer
// that marks its own terminal record as a chained answer. A queue cannot
// chain answers where no stream keeps provenance.
func TestChainedAnswers(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "AGENT", Subjects: []string{"agent.>"}, Provenance: semaq.ProvenanceSigned}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "PLAIN", Subjects: []string{"plain.>"}}); err != nil {
		t.Fatal(err)
	}
	for subj, want := range map[string]string{"nowhere.answers": "no stream captures", "plain.answers": "keeps no provenance", "agent.*": "wildcard"} {
		_, err := c.AddQueue(ctx, semaq.QueueConfig{Name: "BAD", Subjects: []string{"bad.>"}, ChainAnswers: subj})
		if !errors.Is(err, semaq.ErrBadQueue) || !strings.Contains(err.Error(), want) {
			t.Fatalf("chain answers on %s: %v, want a refusal saying %q", subj, err, want)
		}
	}
	if _, err := c.AddQueue(ctx, semaq.QueueConfig{Name: "CHAT", Subjects: []string{"chat.>"}, ChainAnswers: "agent.answers"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, "agent.s1.turn", []byte(`{"say":"what is 6x7?"}`), client.WithSession("s-1")); err != nil {
		t.Fatal(err)
	}

	// A writer with no job claims an id of its own, and marks its terminal
	// record as the answer of session s-1.
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	for i, rec := range []*semaq.TokenChunk{{Seq: 1, N: 1, Text: "FORGED"}, {Seq: 2, Offset: 1, Final: &semaq.TokenFinal{FinishReason: "stop"}}} {
		m := nats.NewMsg(semaq.TokenWriteChunkSubject("forged-1"))
		if i == 1 {
			m.Subject = semaq.TokenWriteEndSubject("forged-1")
			m.Header.Set("SQ-Answer-Chain", "agent.answers")
			m.Header.Set("sq-answer-session", "s-1")
		}
		m.Header.Set(semaq.HdrTokenKey, "forger-key-0123456789")
		m.Data = semaq.AppendTokenChunk(nil, rec)
		if ack, err := nc.RequestMsg(m, 10*time.Second); err != nil || strings.Contains(string(ack.Data), `"error"`) {
			t.Fatalf("the forger's record %d: %v %s", i+1, err, ack.Data)
		}
	}

	// r-0 names no session; r-1 does.
	if _, err := c.Publish(ctx, "chat.x", []byte(`{"prompt":"hello"}`), client.WithMsgID("r-0")); err != nil {
		t.Fatal(err)
	}
	waitQueued(t, c, "CHAT", 1)
	serveAnswer(ctx, t, c, "CHAT", "r-0", []string{"hi"})
	if _, err := c.Publish(ctx, "chat.x", []byte(`{"prompt":"what is 6x7?"}`), client.WithMsgID("r-1"), client.WithSession("s-1")); err != nil {
		t.Fatal(err)
	}
	waitQueued(t, c, "CHAT", 1)
	serveAnswer(ctx, t, c, "CHAT", "r-1", []string{"It is", " 42."},
		semaq.FunctionCallFragment{Index: 0, ID: "call-1", Name: "calc", Arguments: `{"a":6,`},
		semaq.FunctionCallFragment{Index: 0, Arguments: `"b":7}`})

	var head *semaq.ProvenanceHead
	waitFor(t, "the answer of r-1 in session s-1's chain", func() bool {
		head, err = c.ProvenanceHead(ctx, "AGENT", "", "s-1")
		return err == nil && head.Links == 2
	})
	msgs := storedChain(t, s, "AGENT", "", "s-1")
	if len(msgs) != 2 {
		t.Fatalf("session s-1 holds %d messages, want the turn and the answer", len(msgs))
	}
	checkLinks(t, "AGENT", msgs)
	ans := msgs[1]
	if ans.Subject != "agent.answers" || ans.Header.Get(semaq.HdrAnswerOf) != "r-1" || ans.Header.Get(semaq.HdrMsgID) != semaq.AnswerMsgID("", "r-1") {
		t.Fatalf("answer record on %s with headers %v", ans.Subject, ans.Header)
	}
	var rec semaq.AnswerRecord
	if err := json.Unmarshal(ans.Data, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.RequestID != "r-1" || rec.Text != "It is 42." || rec.FinishReason != "stop" || rec.Truncated ||
		len(rec.Calls) != 1 || rec.Calls[0].Name != "calc" || rec.Calls[0].Arguments != `{"a":6,"b":7}` {
		t.Fatalf("answer record %s", ans.Data)
	}
	if want := tokenRecordsHash(ctx, t, s, semaq.TokenNoTenant, "r-1"); rec.RecordsSHA256 != want || rec.Records < 2 {
		t.Fatalf("answer record's hash %s over %d records; the stored records hash to %s", rec.RecordsSHA256, rec.Records, want)
	}
	// The recorder takes terminal records in stream order, one after
	// another: the forger's (which named s-1) came before r-1's and got
	// no link, or r-1's would be the third.
	rep, _ := exportVerified(ctx, t, c, "AGENT", "", "s-1")
	if rep.Links != 2 {
		t.Fatalf("export verified %d links, want 2", rep.Links)
	}
	waitMetrics(t, s, `semaq_chain_answers_total{result="chained"} 1`)
}

// With auth on, an answer goes to the chain of its request's tenant: two
// tenants' requests naming the same session id each add to their own
// tenant's chain, served by one worker that serves every tenant; and only
// an admin makes a queue chain its answers.
func TestChainedAnswersTenants(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, brokertest.WithAuth)
	admin := brokertest.ConnectKey(t, s, brokertest.AdminKey(t, s))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := admin.AddStream(ctx, semaq.StreamConfig{Name: "AG", Subjects: []string{"ag.>"}, Provenance: semaq.ProvenanceSession}); err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, u := range []semaq.UserAddRequest{
		{Name: "acme-pub", Tenant: "acme", Role: semaq.RolePublisher, Subjects: []string{"askq.>", "ag.>"}},
		{Name: "globex-pub", Tenant: "globex", Role: semaq.RolePublisher, Subjects: []string{"askq.>", "ag.>"}},
		{Name: "gpu", Role: semaq.RoleWorker, Queues: []string{"ASKQ"}},
	} {
		r, err := admin.AddUser(ctx, u)
		if err != nil {
			t.Fatalf("add user %s: %v", u.Name, err)
		}
		keys[u.Name] = r.Key
	}
	acme := brokertest.ConnectKey(t, s, keys["acme-pub"])
	cfg := semaq.QueueConfig{Name: "ASKQ", Subjects: []string{"askq.>"}, ChainAnswers: "ag.answers"}
	if _, err := acme.AddQueue(ctx, cfg); !errors.Is(err, semaq.ErrForbidden) {
		t.Fatalf("a publisher adding a queue that chains answers: %v", err)
	}
	if _, err := admin.AddQueue(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	globex := brokertest.ConnectKey(t, s, keys["globex-pub"])
	worker := brokertest.ConnectKey(t, s, keys["gpu"])
	for _, r := range []struct {
		c        *client.Client
		id, text string
	}{{acme, "r-acme", "for acme"}, {globex, "r-globex", "for globex"}} {
		if _, err := r.c.Publish(ctx, "askq.x", []byte(`{"prompt":"?"}`), client.WithMsgID(r.id), client.WithSession("s-1")); err != nil {
			t.Fatal(err)
		}
		waitQueued(t, admin, "ASKQ", 1)
		serveAnswer(ctx, t, worker, "ASKQ", r.id, []string{r.text})
	}
	for tenant, want := range map[string]string{"acme": "r-acme", "globex": "r-globex"} {
		waitFor(t, tenant+"'s answer in its chain", func() bool {
			h, err := admin.ProvenanceHead(ctx, "AG", tenant, "s-1")
			return err == nil && h.Links == 1
		})
		msgs := storedChain(t, s, "AG", tenant, "s-1")
		if len(msgs) != 1 || msgs[0].Header.Get(semaq.HdrAnswerOf) != want {
			t.Fatalf("%s's session s-1 holds %d messages, want the answer of %s", tenant, len(msgs), want)
		}
	}
}
