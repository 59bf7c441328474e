package jsutil_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/jsutil"
)

// Many nodes starting at once each open-or-create the same bucket: all get
// it, it is created once, and what is written through one is read through
// the others.
func TestBucketConcurrentOpenOrCreate(t *testing.T) {
	js := operatorJS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg := jetstream.KeyValueConfig{Bucket: "SQ_TEST", History: 1}
	kvs := make([]jetstream.KeyValue, 8)
	var wg sync.WaitGroup
	for i := range kvs {
		wg.Go(func() {
			kv, err := jsutil.Bucket(ctx, js, cfg)
			if err != nil {
				t.Errorf("opener %d: %v", i, err)
				return
			}
			kvs[i] = kv
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if _, err := kvs[0].Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	for i, kv := range kvs {
		e, err := kv.Get(ctx, "k")
		if err != nil || string(e.Value()) != "v" {
			t.Fatalf("opener %d reads %v, %v", i, e, err)
		}
	}
	// An error other than "not found" is returned, not papered over.
	if _, err := jsutil.Bucket(ctx, js, jetstream.KeyValueConfig{Bucket: "bad name"}); err == nil {
		t.Fatal("an invalid bucket name was accepted")
	}
}

// A bucket's stream that a node does not see yet is waited for, until the
// context ends.
func TestBucketStreamWaits(t *testing.T) {
	js := operatorJS(t)
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := jsutil.BucketStream(short, js, "SQ_LATE"); err == nil {
		t.Fatal("a bucket that never comes: no error")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan error, 1)
	go func() {
		st, err := jsutil.BucketStream(ctx, js, "SQ_LATE")
		if err == nil && st.CachedInfo().Config.Name != "KV_SQ_LATE" {
			err = context.Canceled
		}
		got <- err
	}()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "SQ_LATE"}); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("the bucket made meanwhile: %v", err)
	}
}

// operatorJS is JetStream on a broker of the test's own, below the semantic
// layer; the connection closes when the test ends.
func operatorJS(t *testing.T) jetstream.JetStream {
	t.Helper()
	nc, err := brokertest.DialOperator(brokertest.Start(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}
