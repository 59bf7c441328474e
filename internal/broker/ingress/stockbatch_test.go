package ingress

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/semaq"
)

func TestBatchHeaders(t *testing.T) {
	for _, tc := range []struct {
		hdr    map[string][]string
		id     string
		seq    uint64
		commit string
		err    string
	}{
		{map[string][]string{semaq.HdrBatchID: {"b"}, semaq.HdrBatchSeq: {"1"}}, "b", 1, "", ""},
		{map[string][]string{semaq.HdrBatchID: {"b"}, semaq.HdrBatchSeq: {"7"}, semaq.HdrBatchCommit: {"1"}}, "b", 7, "1", ""},
		{map[string][]string{semaq.HdrBatchID: {"b"}, semaq.HdrBatchSeq: {"7"}, semaq.HdrBatchCommit: {"eob"}}, "b", 7, "eob", ""},
		{map[string][]string{semaq.HdrBatchID: {"b"}, semaq.HdrBatchSeq: {"1"}, semaq.HdrBatchCommit: {"eob"}}, "", 0, "", "first message"},
		{map[string][]string{semaq.HdrBatchID: {"b"}, semaq.HdrBatchSeq: {"1"}, semaq.HdrBatchCommit: {"yes"}}, "", 0, "", "must be 1 or eob"},
		{map[string][]string{semaq.HdrBatchID: {"b", "c"}, semaq.HdrBatchSeq: {"1"}}, "", 0, "", "given once"},
		{map[string][]string{semaq.HdrBatchID: {strings.Repeat("x", 65)}, semaq.HdrBatchSeq: {"1"}}, "", 0, "", "1 to 64"},
		{map[string][]string{semaq.HdrBatchID: {"b"}}, "", 0, "", "no single"},
		{map[string][]string{semaq.HdrBatchID: {"b"}, semaq.HdrBatchSeq: {"0"}}, "", 0, "", "not a number from 1"},
		{map[string][]string{semaq.HdrBatchID: {"b"}, semaq.HdrBatchSeq: {"1002"}}, "", 0, "", "not a number from 1"},
		{map[string][]string{semaq.HdrBatchID: {"b"}, semaq.HdrBatchSeq: {"-1"}}, "", 0, "", "not a number from 1"},
	} {
		m := &nats.Msg{Subject: "a.b", Header: nats.Header(tc.hdr)}
		id, seq, commit, e := batchHeaders(m)
		if tc.err != "" {
			if e == nil || !errors.Is(e, semaq.ErrBadBatch) || !strings.Contains(e.Description, tc.err) {
				t.Errorf("%v: error %v, want one saying %q", tc.hdr, e, tc.err)
			}
			continue
		}
		if e != nil || id != tc.id || seq != tc.seq || commit != tc.commit {
			t.Errorf("%v: %q %d %q %v", tc.hdr, id, seq, commit, e)
		}
		if len(m.Header) != 0 {
			t.Errorf("%v: batch headers left on the message: %v", tc.hdr, m.Header)
		}
	}
}

// The bounds of open stock batches: per connection, per batch bytes, and
// the sweeper freeing an abandoned batch.
func TestStockBatchBounds(t *testing.T) {
	var sbs stockBatches
	for i := range semaq.MaxOpenBatches {
		if _, e := sbs.get(stockKey{"c1", fmt.Sprint(i)}, 1); e != nil {
			t.Fatal(e)
		}
	}
	if _, e := sbs.get(stockKey{"c1", "one-more"}, 1); !errors.Is(e, semaq.ErrBatchLimit) {
		t.Fatalf("batch %d of one connection: %v", semaq.MaxOpenBatches+1, e)
	}
	if _, e := sbs.get(stockKey{"c2", "x"}, 1); e != nil {
		t.Fatalf("another connection: %v", e)
	}
	if _, e := sbs.get(stockKey{"c2", "never-started"}, 2); !errors.Is(e, semaq.ErrBadBatch) {
		t.Fatalf("message 2 of a batch not open: %v", e)
	}
	sb, _ := sbs.get(stockKey{"c2", "x"}, 2)
	if e := sbs.reserve(sb, semaq.MaxBatchBytes); e != nil {
		t.Fatal(e)
	}
	if e := sbs.reserve(sb, 1); !errors.Is(e, semaq.ErrBatchLimit) {
		t.Fatalf("a byte past the batch's bound: %v", e)
	}
	if sbs.held != semaq.MaxBatchBytes {
		t.Fatalf("held %d", sbs.held)
	}
	in := &Ingress{log: slog.New(slog.DiscardHandler)}
	sbs.sweep(in, time.Now()) // nothing idle yet
	if len(sbs.open) != semaq.MaxOpenBatches+1 {
		t.Fatalf("%d open after a sweep of nothing idle", len(sbs.open))
	}
	sbs.sweep(in, time.Now().Add(semaq.BatchTimeoutSeconds*time.Second+time.Second))
	if len(sbs.open) != 0 || sbs.held != 0 || len(sbs.perConn) != 0 {
		t.Fatalf("after the timeout: %d open, %d bytes held, %v", len(sbs.open), sbs.held, sbs.perConn)
	}
	if _, e := sbs.get(stockKey{"c1", "again"}, 1); e != nil {
		t.Fatalf("a new batch after the sweep: %v", e)
	}
	// A late message of an abandoned batch is told so, for as long again;
	// its id may start a new batch at once.
	if _, e := sbs.get(stockKey{"c2", "x"}, 3); !errors.Is(e, semaq.ErrBatchAbandoned) {
		t.Fatalf("message 3 of an abandoned batch: %v", e)
	}
	sbs.sweep(in, time.Now().Add(3*semaq.BatchTimeoutSeconds*time.Second))
	if _, e := sbs.get(stockKey{"c2", "x"}, 3); !errors.Is(e, semaq.ErrBadBatch) {
		t.Fatalf("message 3 of a batch abandoned long ago: %v", e)
	}
	if _, e := sbs.get(stockKey{"c1", "0"}, 1); e != nil {
		t.Fatalf("an abandoned batch's id again: %v", e)
	}
	if _, e := sbs.get(stockKey{"c1", "0"}, 2); e != nil {
		t.Fatalf("message 2 of it: %v", e)
	}
}

func TestRequestInfoConn(t *testing.T) {
	h := nats.Header{}
	h.Set(api.RequestInfoHeader, `{"acc":"$G","rtt":"1.2ms","server":"n2","cluster":"c","id":42,"user":"alice"}`)
	if id, server := requestInfoConn(h); id != "42" || server != "n2" {
		t.Fatalf("id %q, server %q", id, server)
	}
	if id, server := requestInfoConn(nats.Header{}); id != "" || server != "" {
		t.Fatalf("no header: id %q, server %q", id, server)
	}
}
