package jsutil

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrStopped is returned by WaitRev once the follower's watcher has
// stopped: after Close, or when JetStream ended the watch.
var ErrStopped = errors.New("bucket watcher stopped")

// Follower keeps an immutable snapshot of a KV bucket current: a watcher
// feeds every entry to the caller's model (apply) and, after each batch
// (everything already queued), publishes the model's snapshot, so a burst
// of writes costs one snapshot. Readers take the snapshot with one atomic
// load and no lock.
//
// The watcher runs for the follower's whole life. It does not stop at the
// end of the initial values: nats.go may send that marker early when the
// bucket is written to while the watch starts (its per-message pending
// count reaches zero before every initial value arrived), and the values
// that follow are applied like any update.
//
// Its methods are safe for concurrent use. apply and snapshot are called
// from one goroutine at a time, never concurrently.
type Follower[S any] struct {
	kv       jetstream.KeyValue
	watcher  jetstream.KeyWatcher
	apply    func(jetstream.KeyValueEntry)
	snapshot func() S

	cur atomic.Pointer[followed[S]]
	rev uint64 // highest revision applied; owned by the watch goroutine

	// mu guards changed, closed and replaced each time a snapshot is
	// published, waking WaitRev callers. Nothing is held while calling
	// out.
	mu      sync.Mutex
	changed chan struct{}

	done      chan struct{} // closed by Close
	stopped   chan struct{} // closed when the watch goroutine returns
	closeOnce sync.Once
}

// followed is a snapshot and the revision it includes.
type followed[S any] struct {
	rev uint64
	s   S
}

// Follow watches every key of kv, applies the bucket's current values and
// publishes their snapshot before it returns, then keeps applying updates
// on its own goroutine until Close. ctx bounds the initial load only.
func Follow[S any](ctx context.Context, kv jetstream.KeyValue, apply func(jetstream.KeyValueEntry), snapshot func() S) (*Follower[S], error) {
	f := &Follower[S]{
		kv:       kv,
		apply:    apply,
		snapshot: snapshot,
		changed:  make(chan struct{}),
		done:     make(chan struct{}),
		stopped:  make(chan struct{}),
	}
	// The watcher outlives ctx: it runs until Close. In a cluster the
	// bucket's stream may have no leader yet (a node started again right
	// after a crash, while the others elect one): its consumer is then not
	// made in time, and is asked for again.
	var w jetstream.KeyWatcher
	err := Retry(ctx, func(actx context.Context) (err error) {
		w, err = kv.WatchAll(context.WithoutCancel(actx))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("watching bucket %s: %w", kv.Bucket(), err)
	}
	f.watcher = w
load:
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("watcher of bucket %s stopped while loading", kv.Bucket())
			}
			if e == nil {
				break load
			}
			f.applyEntry(e)
		case <-ctx.Done():
			_ = w.Stop()
			return nil, fmt.Errorf("loading bucket %s: %w", kv.Bucket(), ctx.Err())
		}
	}
	f.cur.Store(&followed[S]{rev: f.rev, s: f.snapshot()})
	go f.watch()
	return f, nil
}

func (f *Follower[S]) applyEntry(e jetstream.KeyValueEntry) {
	f.rev = max(f.rev, e.Revision())
	f.apply(e)
}

// Load returns the current snapshot.
func (f *Follower[S]) Load() S { return f.cur.Load().s }

// watch applies updates and publishes a snapshot after each batch.
func (f *Follower[S]) watch() {
	defer close(f.stopped)
	updates := f.watcher.Updates()
	for {
		select {
		case e, ok := <-updates:
			if !ok {
				return
			}
			if e != nil {
				f.applyEntry(e)
			}
		case <-f.done:
			// Free a sender the watcher's subscription may have blocked.
			for range len(updates) {
				<-updates
			}
			return
		}
	batch:
		for {
			select {
			case e, ok := <-updates:
				if !ok {
					break batch
				}
				if e != nil {
					f.applyEntry(e)
				}
			default:
				break batch
			}
		}
		f.publish(&followed[S]{rev: f.rev, s: f.snapshot()})
	}
}

func (f *Follower[S]) publish(p *followed[S]) {
	f.cur.Store(p)
	f.mu.Lock()
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

// WaitRev returns the first snapshot that includes KV revision rev. It
// fails with ErrStopped once the watcher has stopped, or with ctx's error.
func (f *Follower[S]) WaitRev(ctx context.Context, rev uint64) (S, error) {
	for {
		f.mu.Lock()
		p, ch := f.cur.Load(), f.changed
		f.mu.Unlock()
		if p.rev >= rev {
			return p.s, nil
		}
		select {
		case <-ch:
		case <-f.stopped:
			var zero S
			return zero, ErrStopped
		case <-ctx.Done():
			var zero S
			return zero, ctx.Err()
		}
	}
}

// Changed returns a channel closed when the next snapshot is published:
// take it, check the snapshot, then wait on it, and no change is missed.
func (f *Follower[S]) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

// Closed reports whether Close has been called.
func (f *Follower[S]) Closed() bool {
	select {
	case <-f.done:
		return true
	default:
		return false
	}
}

// consumerDeleteWait bounds how long Close waits for JetStream to confirm
// the deletion of the watch's consumer.
const consumerDeleteWait = time.Second

// Close stops the watcher and waits for its goroutine. The last snapshot
// stays readable. Close is idempotent.
//
// Stopping unsubscribes at once and then asks JetStream to delete the
// watch's ephemeral consumer. A cluster without a quorum (a node stopping
// after most of its peers) cannot answer that; the subscription is gone
// all the same and the server removes the consumer after its inactivity
// threshold, so such an answer, or none within consumerDeleteWait, is no
// failure of Close.
func (f *Follower[S]) Close() error {
	var err error
	f.closeOnce.Do(func() {
		close(f.done)
		<-f.stopped
		res := make(chan error, 1)
		go func() { res <- f.watcher.Stop() }()
		t := time.NewTimer(consumerDeleteWait)
		defer t.Stop()
		select {
		case err = <-res:
		case <-t.C:
			// Stop unsubscribes first, then waits up to 5 s for the
			// consumer's deletion: leave that to the server's
			// inactivity threshold (Stop's goroutine ends by itself).
		}
	})
	// A watcher whose connection closed first has nothing left to stop.
	if err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) && !transient(err) {
		return fmt.Errorf("stopping the watcher of bucket %s: %w", f.kv.Bucket(), err)
	}
	return nil
}
