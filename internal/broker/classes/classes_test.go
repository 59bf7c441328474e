package classes

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/jstest"
	"github.com/semaq/semaq/semaq"
)

func open(t *testing.T, deps Deps) *Classes {
	t.Helper()
	deps.Gate = subsystem.NewGate("classes")
	c, err := Open(context.Background(), deps)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// Two tables (two nodes' views of one bucket) racing for the slots of a
// class get no more than its cap between them; a release at a stale
// revision frees nothing; a slot whose lease ended SlotGrace ago is taken
// over.
func TestSlots(t *testing.T) {
	_, js := jstest.Start(t)
	a, b := open(t, Deps{JS: js}), open(t, Deps{JS: js})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	until := time.Now().Add(time.Minute).UnixMilli()
	var (
		mu   sync.Mutex
		refs []SlotRef
		full int
		wg   sync.WaitGroup
	)
	for i := range 20 {
		c := a
		if i%2 == 1 {
			c = b
		}
		wg.Go(func() {
			ref, err := c.Acquire(ctx, "gpu", 3, Slot{Queue: "Q", Seq: uint64(i), Until: until})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case errors.Is(err, ErrFull):
				full++
			case err != nil:
				t.Error(err)
			default:
				refs = append(refs, ref)
			}
		})
	}
	wg.Wait()
	if len(refs) != 3 || full != 17 {
		t.Fatalf("%d slots taken, %d refused; the cap is 3", len(refs), full)
	}
	waitHeld(t, b, "gpu", 3)

	// A release at another revision frees nothing; at its own it frees.
	stale := refs[0]
	stale.Rev++
	a.Release(stale)
	if _, err := b.Acquire(ctx, "gpu", 3, Slot{Queue: "Q", Seq: 100, Until: until}); !errors.Is(err, ErrFull) {
		t.Fatalf("after a release at a stale revision: %v, want full", err)
	}
	a.Release(refs[0])
	waitHeld(t, b, "gpu", 2)
	if _, err := b.Acquire(ctx, "gpu", 3, Slot{Queue: "Q", Seq: 100, Until: until}); err != nil {
		t.Fatalf("after a release: %v", err)
	}

	// A slot whose lease ended long ago is taken over by the next.
	ended := time.Now().Add(-SlotGrace - time.Second).UnixMilli()
	if _, err := a.Extend(ctx, refs[1], Slot{Queue: "Q", Seq: 1, Until: ended}); err != nil {
		t.Fatal(err)
	}
	waitHeld(t, b, "gpu", 2)
	if _, err := b.Acquire(ctx, "gpu", 3, Slot{Queue: "Q", Seq: 101, Until: until}); err != nil {
		t.Fatalf("a slot whose lease ended was not taken over: %v", err)
	}
	if owned := b.Owned("Q"); len(owned) != 3 || owned[101].Key != refs[1].Key {
		t.Fatalf("owned %+v, want 3 with seq 101 in %s", owned, refs[1].Key)
	}
}

// A class added is in both tables; a bad one is refused.
func TestClassTable(t *testing.T) {
	_, js := jstest.Start(t)
	a, b := open(t, Deps{JS: js}), open(t, Deps{JS: js})
	ctx := context.Background()
	if _, err := a.add(ctx, &semaq.ClassAddRequest{QueueClass: semaq.QueueClass{Name: "hbm2", MaxConcurrency: 8}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.add(ctx, &semaq.ClassAddRequest{QueueClass: semaq.QueueClass{Name: "hbm2"}}); !errors.Is(err, semaq.ErrClassExists) {
		t.Fatalf("second add: %v, want exists", err)
	}
	if _, err := a.add(ctx, &semaq.ClassAddRequest{QueueClass: semaq.QueueClass{Name: "x", MaxConcurrency: semaq.MaxClassConcurrency + 1}}); !errors.Is(err, semaq.ErrBadClass) {
		t.Fatalf("a cap past the bound: %v, want bad class", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if qc, ok := b.Class("hbm2"); ok && qc.MaxConcurrency == 8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the other table never saw the class")
		}
		time.Sleep(5 * time.Millisecond) // polling another watcher
	}
	if _, err := a.remove(ctx, &semaq.ClassNameRequest{Name: "hbm2"}); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Class("hbm2"); ok {
		t.Fatal("a removed class is still in the table that removed it")
	}
}

func waitHeld(t *testing.T, c *Classes, class string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if got := c.Held(class); got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d slots held, want %d", class, c.Held(class), n)
		}
		time.Sleep(5 * time.Millisecond) // polling the watcher
	}
}
