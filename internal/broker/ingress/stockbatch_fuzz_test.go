package ingress

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/wire"
	"github.com/semaq/semaq/semaq"
)

// FuzzBatchHeaders: the Nats-Batch-* headers of a stock client's
// message, as the client sends them. batchHeaders either refuses them
// with ErrBadBatch or reads an id of 1 to 64 bytes, a sequence the
// ingress holds, and a commit it knows; either way it leaves none of them
// on the message, whose other headers it does not touch. And a message it
// reads as a batch's is sharded by that batch's id (batchKey), so the
// batch's messages stay in order on one shard.
func FuzzBatchHeaders(f *testing.F) {
	f.Add("b", "1", "", false, "AI-Model", "m")
	f.Add("b", "7", "1", false, "", "")
	f.Add("b", "7", "eob", false, "", "")
	f.Add("b", "1", "eob", false, "", "")
	f.Add("b", "0", "", true, "", "")
	f.Add("b", "1001", "1", false, "", "")
	f.Add("b", "+1", "", false, "", "")
	f.Add("  spaced id  ", "0001", "", false, "Nats-Batch-Id", "again")
	f.Add("", "1", "", false, "", "")
	f.Add("x\r\ny", "18446744073709551617", "yes", true, "k", "v")
	f.Fuzz(func(t *testing.T, id, seq, commit string, twice bool, k, v string) {
		h := nats.Header{semaq.HdrBatchID: {id}, semaq.HdrBatchSeq: {seq}}
		if commit != "" {
			h[semaq.HdrBatchCommit] = []string{commit}
		}
		if twice {
			h[semaq.HdrBatchSeq] = append(h[semaq.HdrBatchSeq], seq)
		}
		if k != "" {
			h.Add(k, v)
		}
		raw, err := wire.AppendHeader(nil, h)
		if err != nil {
			return // nats.go would not send it either
		}
		// As the ingress has it: decoded from the wire.
		m := &nats.Msg{Subject: "orders.a"}
		if m.Header, err = wire.DecodeHeader(string(raw)); err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		others := len(m.Header)
		for _, name := range []string{semaq.HdrBatchID, semaq.HdrBatchSeq, semaq.HdrBatchCommit} {
			if _, ok := m.Header[name]; ok {
				others--
			}
		}
		gotID, gotSeq, gotCommit, e := batchHeaders(m)
		for _, name := range []string{semaq.HdrBatchID, semaq.HdrBatchSeq, semaq.HdrBatchCommit} {
			if _, ok := m.Header[name]; ok {
				t.Fatalf("%q: %s left on the message", raw, name)
			}
		}
		if len(m.Header) != others {
			t.Fatalf("%q: %d other headers left of %d", raw, len(m.Header), others)
		}
		if e != nil {
			if !errors.Is(e, semaq.ErrBadBatch) || e.Description == "" {
				t.Fatalf("%q: refused with %+v, want ErrBadBatch saying why", raw, e)
			}
			return
		}
		switch {
		case gotID == "" || len(gotID) > 64:
			t.Fatalf("%q: accepted batch id %q", raw, gotID)
		case gotSeq < 1 || gotSeq > semaq.MaxBatchMsgs+1:
			t.Fatalf("%q: accepted sequence %d", raw, gotSeq)
		case gotCommit != "" && gotCommit != "1" && gotCommit != "eob", gotCommit == "eob" && gotSeq == 1:
			t.Fatalf("%q: accepted commit %q at %d", raw, gotCommit, gotSeq)
		}
		if key := batchKey(raw); string(key) != gotID {
			t.Fatalf("%q: batch %q sharded by %q", raw, gotID, key)
		}
	})
}
