package cli

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// TestCrashLosesNoAckedMessage kills `semaq serve --sync always` with
// SIGKILL while several publishers stream acknowledged messages, restarts
// it, and repeats. Every acknowledged message must be stored exactly once.
func TestCrashLosesNoAckedMessage(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test starts and kills real processes; skipped with -short")
	}
	dir := t.TempDir()
	args := []string{"--data", dir, "--listen", "127.0.0.1:0", "--http", "", "--sync", "always"}
	const (
		cycles     = 5
		publishers = 4
		perCycle   = 300 // acks to see before each kill
	)
	acked := map[string]bool{}
	ctx := context.Background()
	start := time.Now()

	for cycle := range cycles {
		t0 := time.Now()
		srv := startChild(t, args...)
		t.Logf("cycle %d: ready after %s", cycle, time.Since(t0))
		if cycle == 0 {
			c, err := client.Connect(ctx, srv.url)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "CRASH", Subjects: []string{"crash.>"}}); err != nil {
				t.Fatal(err)
			}
			c.Close()
		}

		var (
			mu     sync.Mutex
			got    int
			enough = make(chan struct{})
			wg     sync.WaitGroup
		)
		for p := range publishers {
			// No reconnect: a publish in flight at the kill fails at once
			// instead of waiting for a server that is not coming back.
			c, err := client.Connect(ctx, srv.url, client.WithTimeout(5*time.Second), client.WithNATSOptions(nats.NoReconnect()))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; ; n++ {
					id := fmt.Sprintf("c%d-p%d-%d", cycle, p, n)
					_, err := c.Publish(ctx, "crash.p", []byte(id), client.WithMsgID(id), client.WithTenant("t"))
					if err != nil {
						return // the server is gone
					}
					mu.Lock()
					acked[id] = true
					got++
					if got == perCycle {
						close(enough)
					}
					mu.Unlock()
				}
			}()
		}
		select {
		case <-enough:
		case <-time.After(60 * time.Second):
			t.Fatalf("cycle %d: only %d acks in 60s", cycle, got)
		}
		t.Logf("cycle %d: %d acks after %s", cycle, perCycle, time.Since(t0))
		if err := srv.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		srv.wait(t)
		wg.Wait()
		t.Logf("cycle %d: killed after %s", cycle, time.Since(t0))
	}

	// Restart and read everything back.
	t.Logf("restart at %s", time.Since(start))
	srv := startChild(t, args...)
	t.Logf("ready at %s", time.Since(start))
	c, err := client.Connect(ctx, srv.url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	info, err := c.StreamInfo(ctx, "CRASH")
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]int{}
	if n := int(info.State.Messages); n > 0 {
		sub, err := c.Subscribe(ctx, "crash.p", client.WithMaxMessages(n), client.WithPrefetch(min(n, 1000)))
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		for {
			m, err := sub.Next(rctx)
			if errors.Is(err, client.ErrSubscriptionDone) {
				break
			}
			if err != nil {
				t.Fatalf("reading back after %d messages: %v", len(stored), err)
			}
			stored[string(m.Data)]++
		}
		sub.Close()
	}
	missing := 0
	for id := range acked {
		if stored[id] == 0 {
			missing++
			if missing <= 5 {
				t.Errorf("acknowledged message %s lost", id)
			}
		}
	}
	for id, n := range stored {
		if n > 1 {
			t.Errorf("message %s stored %d times", id, n)
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d acknowledged messages lost", missing, len(acked))
	}
	t.Logf("%d cycles: %d acknowledged, %d stored", cycles, len(acked), len(stored))

	t.Logf("read back done at %s", time.Since(start))
	// SIGTERM drains and exits 0.
	if err := srv.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	code := srv.wait(t)
	t.Logf("exited at %s", time.Since(start))
	if code != 0 {
		t.Fatalf("exit code after SIGTERM = %d\n%s", code, srv.output())
	}
}
