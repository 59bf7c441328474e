package jsutil_test

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/jsutil"
)

// kvModel is the simplest model a Follower keeps: the bucket as a map.
type kvModel map[string]string

func (m kvModel) apply(e jetstream.KeyValueEntry) {
	if e.Operation() == jetstream.KeyValuePut {
		m[e.Key()] = string(e.Value())
	} else {
		delete(m, e.Key())
	}
}

func (m kvModel) snapshot() map[string]string { return maps.Clone(m) }

// A Follower loads what the bucket holds before Follow returns, applies
// every write and delete after, wakes WaitRev callers at the revision they
// wait for, keeps its last snapshot after Close and then reports stopped.
func TestFollower(t *testing.T) {
	js := operatorJS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := jsutil.Bucket(ctx, js, jetstream.KeyValueConfig{Bucket: "SQ_FOLLOW", History: 1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := kv.Put(ctx, "k"+strconv.Itoa(i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	m := kvModel{}
	f, err := jsutil.Follow(ctx, kv, m.apply, m.snapshot)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(f.Load()); got != 50 {
		t.Fatalf("loaded %d keys, want 50", got)
	}
	rev, err := kv.Put(ctx, "new", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	snap, err := f.WaitRev(ctx, rev)
	if err != nil || snap["new"] != "x" {
		t.Fatalf("WaitRev(%d) = %v, %v", rev, snap["new"], err)
	}
	if err := kv.Delete(ctx, "k0"); err != nil {
		t.Fatal(err)
	}
	for {
		ch := f.Changed()
		if _, ok := f.Load()["k0"]; !ok {
			break
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatal("the delete never reached the snapshot")
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if !f.Closed() || len(f.Load()) != 50 {
		t.Fatalf("after Close: closed %v, %d keys", f.Closed(), len(f.Load()))
	}
	if _, err := f.WaitRev(ctx, rev+100); !errors.Is(err, jsutil.ErrStopped) {
		t.Fatalf("WaitRev after Close: %v, want ErrStopped", err)
	}
	// Loading is bounded by ctx.
	done, stop := context.WithCancel(ctx)
	stop()
	if _, err := jsutil.Follow(done, kv, m.apply, m.snapshot); err == nil {
		t.Fatal("Follow with a cancelled context succeeded")
	}
}
