package gateway

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

// Close returns only after every request withdrawal in flight has ended,
// and gives up when its context does.
func TestCloseWaitsForWithdrawals(t *testing.T) {
	g := New(Options{})
	release := make(chan struct{})
	var started, ended atomic.Int32
	running := make(chan struct{}, 2)
	g.withdraw = func(ctx context.Context, model, id, _ string) error {
		started.Add(1)
		running <- struct{}{}
		<-release
		ended.Add(1)
		return nil
	}
	g.cancelRequest("m", "req-1", "")
	g.cancelRequest("m", "req-2", "")
	<-running
	<-running

	// Both withdrawals are blocked: a Close whose context is done reports
	// it rather than return as if they had ended.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Close(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("Close with withdrawals in flight and a done context: %v, want context.Canceled", err)
	}
	if g.closing.Err() == nil {
		t.Fatal("Close did not end the open response streams")
	}

	closed := make(chan error, 1)
	go func() { closed <- g.Close(context.Background()) }()
	// Released only after Close has started waiting (or is about to): if
	// Close did not wait, it could return before the withdrawals end.
	close(release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if n := ended.Load(); n != 2 {
		t.Fatalf("Close returned with %d of 2 withdrawals ended", n)
	}

	// A withdrawal that starts around Close is waited for too.
	release2 := make(chan struct{})
	g.withdraw = func(ctx context.Context, model, id, _ string) error {
		<-release2
		ended.Add(1)
		return nil
	}
	g.cancelRequest("m", "req-3", "")
	closed = make(chan error, 1)
	go func() { closed <- g.Close(context.Background()) }()
	g.cancelRequest("m", "req-4", "")
	close(release2)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if n := ended.Load(); n != 4 {
		t.Fatalf("Close returned with %d of 4 withdrawals ended", n)
	}
	if started.Load() != 2 {
		t.Fatalf("%d withdrawals started, want 2", started.Load())
	}
}
