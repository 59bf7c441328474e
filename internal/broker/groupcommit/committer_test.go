package groupcommit_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
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
	nc := operatorConn(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "1.blk"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	got := subscribeReplies(t, nc)
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

// At a block rollover the finished block, the new one and the directory
// are fsynced together; when one of those fsyncs fails the batch fails and
// the next commit fsyncs the finished block again before any ack is
// released.
func TestCommitterRolloverSyncsTogetherAndRetries(t *testing.T) {
	nc := operatorConn(t)
	dir := t.TempDir()
	blk := func(n string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, n+".blk"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	blk("1")
	got := subscribeReplies(t, nc)
	recv := func() *nats.Msg {
		t.Helper()
		select {
		case m := <-got:
			return m
		case <-time.After(10 * time.Second):
			t.Fatal("no ack released")
			return nil
		}
	}

	var (
		mu      sync.Mutex
		synced  []string
		waitFor int // fsyncs that must be running at once
		running int // fsyncs inside the hook
		all     = make(chan struct{})
		failOn  atomic.Pointer[string]
	)
	c := groupcommit.New(groupcommit.Config{Stream: "S", Dir: dir, Conn: nc, Sync: func(f *os.File) error {
		name := filepath.Base(f.Name())
		mu.Lock()
		synced = append(synced, name)
		running++
		if waitFor > 0 && running == waitFor {
			close(all)
		}
		w := waitFor
		mu.Unlock()
		if w > 0 {
			select {
			case <-all:
			case <-time.After(5 * time.Second):
				return errors.New("fsyncs of a rollover ran one after the other")
			}
		}
		mu.Lock()
		running--
		mu.Unlock()
		if p := failOn.Load(); p != nil && *p == name {
			return errors.New("disk on fire")
		}
		return nil
	}})
	defer c.Close(context.Background())
	c.Hold("reply.1", []byte(`{"stream":"S","seq":1}`))
	if m := recv(); string(m.Data) != `{"stream":"S","seq":1}` {
		t.Fatalf("released %q", m.Data)
	}

	// Rollover: 1.blk is finished, 2.blk is new. Its fsync fails.
	blk("2")
	want := strings.Join(slices.Sorted(slices.Values([]string{"1.blk", "2.blk", filepath.Base(dir)})), ",")
	mu.Lock()
	synced, waitFor, running = nil, 3, 0
	mu.Unlock()
	one := "1.blk"
	failOn.Store(&one)
	c.Hold("reply.2", []byte(`{"stream":"S","seq":2}`))
	if m := recv(); !strings.Contains(string(m.Data), "disk on fire") {
		t.Fatalf("a batch whose finished block failed to fsync was released as %q", m.Data)
	}
	mu.Lock()
	if got := strings.Join(slices.Sorted(slices.Values(synced)), ","); got != want {
		t.Fatalf("rollover fsynced %s, want %s", got, want)
	}
	synced, waitFor, running, all = nil, 3, 0, make(chan struct{})
	mu.Unlock()
	failOn.Store(nil)
	c.Hold("reply.3", []byte(`{"stream":"S","seq":3}`))
	if m := recv(); string(m.Data) != `{"stream":"S","seq":3}` {
		t.Fatalf("released %q", m.Data)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(slices.Sorted(slices.Values(synced)), ","); got != want {
		t.Fatalf("after the failure the next commit fsynced %s, want %s", got, want)
	}
}

// operatorConn starts a broker and connects to it as its operator; the
// connection closes with the test.
func operatorConn(t *testing.T) *nats.Conn {
	t.Helper()
	s := brokertest.Start(t)
	nc, err := brokertest.DialOperator(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// subscribeReplies subscribes nc to the released acks (reply.>) and
// returns once the server has the subscription.
func subscribeReplies(t *testing.T, nc *nats.Conn) chan *nats.Msg {
	t.Helper()
	got := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe("reply.>", got)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return got
}
