package groupcommit_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/groupcommit"
	"github.com/semaq/semaq/internal/brokertest"
)

// A committer releases each held ack after an fsync of the stream's block
// file, fails the batch when the fsync fails, counts both, and Close
// commits what is still held before it returns.
func TestCommitter(t *testing.T) {
	s := brokertest.Start(t)
	nc, err := brokertest.DialOperator(s)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "1.blk"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe("reply.>", got)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	var syncs atomic.Int64
	var fail atomic.Bool
	c := groupcommit.New(groupcommit.Config{Stream: "S", Dir: dir, Conn: nc, Sync: func(f *os.File) error {
		syncs.Add(1)
		if fail.Load() {
			return errors.New("disk on fire")
		}
		return nil
	}})
	recv := func() *nats.Msg {
		t.Helper()
		select {
		case m := <-got:
			return m
		case <-time.After(5 * time.Second):
			t.Fatal("no ack released")
			return nil
		}
	}
	c.Hold("reply.1", []byte(`{"stream":"S","seq":1}`))
	if m := recv(); m.Subject != "reply.1" || string(m.Data) != `{"stream":"S","seq":1}` {
		t.Fatalf("released %s %q", m.Subject, m.Data)
	}
	if syncs.Load() == 0 {
		t.Fatal("ack released without an fsync")
	}
	fail.Store(true)
	c.Hold("reply.2", []byte(`{"stream":"S","seq":2}`))
	if m := recv(); m.Subject != "reply.2" || !strings.Contains(string(m.Data), "disk on fire") {
		t.Fatalf("failed commit released %s %q", m.Subject, m.Data)
	}
	fail.Store(false)
	c.Hold("reply.3", []byte(`{"stream":"S","seq":3}`))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if m := recv(); m.Subject != "reply.3" {
		t.Fatalf("after Close released %s", m.Subject)
	}
	st := c.Stats()
	if st.Acks != 2 || st.Failures != 1 || st.Batches != 3 {
		t.Fatalf("stats %+v, want 2 acks, 1 failure, 3 batches", st)
	}
}
