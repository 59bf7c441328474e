package subsystem_test

import (
	"context"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/broker/subsystem"
)

func TestGateWaitsAndRefusesAfterClose(t *testing.T) {
	g := subsystem.NewGate("node")
	child := g.Child("part")
	started := make(chan string, 2)
	for _, gate := range []*subsystem.Gate{g, child} {
		if !gate.Go("worker", func(ctx context.Context) {
			label, _ := pprof.Label(ctx, "semaq.goroutine")
			started <- label
			<-ctx.Done()
		}) {
			t.Fatal("a new gate refused a goroutine")
		}
	}
	labels := map[string]bool{<-started: true, <-started: true}
	if !labels["node/worker"] || !labels["node/part/worker"] {
		t.Fatalf("labels %v, want node/worker and node/part/worker", labels)
	}
	if g.Running() != 2 || child.Running() != 1 {
		t.Fatalf("running: node %d, part %d; want 2 and 1", g.Running(), child.Running())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := child.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if child.Running() != 0 || g.Running() != 1 {
		t.Fatalf("after the part closed: node %d, part %d; want 1 and 0", g.Running(), child.Running())
	}
	if child.Go("late", func(context.Context) { t.Error("ran after close") }) {
		t.Fatal("a closed gate took a goroutine")
	}
	if err := g.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if g.Running() != 0 {
		t.Fatalf("%d running after the node closed", g.Running())
	}
	if g.Go("late", func(context.Context) { t.Error("ran after close") }) || g.Child("new").Go("late", func(context.Context) {}) {
		t.Fatal("a closed node's gate took a goroutine")
	}
}

func TestGateCloseBoundedByContext(t *testing.T) {
	g := subsystem.NewGate("node")
	release := make(chan struct{})
	g.Go("stubborn", func(context.Context) { <-release }) // ignores its context
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := g.Close(ctx); err == nil {
		t.Fatal("Close returned nil with a goroutine still running and ctx done")
	}
	if g.Running() != 1 {
		t.Fatalf("running %d, want 1", g.Running())
	}
	close(release)
	if err := g.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}
