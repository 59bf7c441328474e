package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
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
	req, _ := json.Marshal(semaq.ProvenanceHeadRequest{Stream: stream, Tenant: tenant, Session: session})
	m, err := c.Conn().Request(semaq.APIProvenanceHead, req, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		semaq.ProvenanceHead
		Error *semaq.APIError `json:"error"`
	}
	if err := json.Unmarshal(m.Data, &out); err != nil {
		t.Fatal(err)
	}
	if out.Error != nil {
		t.Fatalf("provenance head of %s/%s: %v", stream, session, out.Error)
	}
	return &out.ProvenanceHead
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
