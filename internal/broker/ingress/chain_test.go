package ingress

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/semaq"
)

// The chains' bounds: a session's queue and the node's bytes are bounded,
// and a message past either is refused as busy with a retry time, not
// held.
func TestChainBounds(t *testing.T) {
	in := &Ingress{}
	in.chains.sessions = map[chainKey]*chainSession{}
	in.chains.inflight = map[string]*chainBatch{}
	in.chains.conn = &nats.Conn{} // never used: every session below is busy
	st := &stream{name: "S", chain: api.Chain{Provenance: semaq.ProvenanceSession}}
	k := chainKey{stream: "S", session: "s"}
	busy := &chainSession{key: k, st: st, busy: true, loaded: true}
	in.chains.sessions[k] = busy
	pub := func(session string, size int) *semaq.APIError {
		m := nats.NewMsg("s.x")
		m.Data = make([]byte, size)
		p := &publication{m: m, received: time.Now(), subject: "s.x", stream: st, env: semaq.Envelope{Session: session}}
		kk, ok := chainKeyOf(p)
		if !ok {
			t.Fatal("a session's message on a chained stream is not chained")
		}
		return in.chain(p, kk)
	}
	for range maxChainQueue {
		if e := pub("s", 10); e != nil {
			t.Fatal(e)
		}
	}
	e := pub("s", 10)
	if !errors.Is(e, semaq.ErrChainBusy) || e.RetryAfterMs == 0 || !strings.Contains(e.Description, `session "s" has 1000 messages waiting`) {
		t.Fatalf("past the session's queue: %v", e)
	}
	// The node's bytes: another busy session's big messages.
	k2 := chainKey{stream: "S", session: "t"}
	in.chains.sessions[k2] = &chainSession{key: k2, st: st, busy: true, loaded: true}
	var refused *semaq.APIError
	for i := 0; i < 100 && refused == nil; i++ {
		refused = pub("t", 1<<20)
	}
	if !errors.Is(refused, semaq.ErrChainBusy) || !strings.Contains(refused.Description, "bytes of chained messages") {
		t.Fatalf("past the node's bytes: %v", refused)
	}
	if in.chains.bytes > maxChainBytes {
		t.Fatalf("%d bytes held, over the bound of %d", in.chains.bytes, maxChainBytes)
	}
	// A message without a session, or on a stream that chains nothing, is
	// not chained.
	if _, ok := chainKeyOf(&publication{stream: st}); ok {
		t.Fatal("a message without a session is chained")
	}
	if _, ok := chainKeyOf(&publication{stream: &stream{name: "P"}, env: semaq.Envelope{Session: "s"}}); ok {
		t.Fatal("a message on a stream without a chain is chained")
	}
}

func TestAckSeq(t *testing.T) {
	for _, tc := range []struct {
		ack string
		seq uint64
		ok  bool
	}{
		{`{"stream":"S","seq":42}`, 42, true},
		{`{"stream":"S","seq":42,"duplicate": true}`, 0, false},
		{`{"stream":"S","seq":42,"duplicate":true}`, 0, false},
		{`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 3"},"stream":"S","seq":0}`, 0, false},
		{`{"stream":"S"}`, 0, false},
		{``, 0, false},
	} {
		seq, ok := ackSeq([]byte(tc.ack))
		if seq != tc.seq || ok != tc.ok {
			t.Errorf("ackSeq(%s) = %d, %v; want %d, %v", tc.ack, seq, ok, tc.seq, tc.ok)
		}
	}
}
