package chains

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// flakyKV answers Put with err for its first fails calls.
type flakyKV struct {
	jetstream.KeyValue
	fails, calls int
	err          error
}

func (f *flakyKV) Put(context.Context, string, []byte) (uint64, error) {
	f.calls++
	if f.calls <= f.fails {
		return 0, f.err
	}
	return 1, nil
}

// A node whose keys bucket does not answer yet (its leader just died)
// puts its key again; a refusal is not retried.
func TestPutKeyWaitsForTheBucket(t *testing.T) {
	kv := &flakyKV{fails: 3, err: jetstream.ErrNoStreamResponse}
	if err := putKey(context.Background(), kv, "k", nil); err != nil || kv.calls != 4 {
		t.Fatalf("put: %v after %d calls; want nil after 4", err, kv.calls)
	}
	refused := errors.New("refused")
	kv = &flakyKV{fails: 3, err: refused}
	if err := putKey(context.Background(), kv, "k", nil); !errors.Is(err, refused) || kv.calls != 1 {
		t.Fatalf("put: %v after %d calls; want the refusal after 1", err, kv.calls)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	kv = &flakyKV{fails: 1000, err: jetstream.ErrNoStreamResponse}
	if err := putKey(ctx, kv, "k", nil); err == nil {
		t.Fatal("put with the start's context done: no error")
	}
}
