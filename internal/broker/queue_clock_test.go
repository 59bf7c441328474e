package broker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/wallclock"
	"github.com/semaq/semaq/semaq"
)

// TestQueueLeasesSurviveClockJump: a dispatcher that takes a queue over
// after the wall clock jumped (an NTP step; another node's clock) keeps
// every lease it restores for a whole ack wait on its own monotonic clock.
// Jumped forward, a lease the record says ended an hour ago is still the
// worker's: nobody else gets the job and the worker's ack is heard. Jumped
// back, a lease the record says runs for another hour ends with its ack
// wait: the job of a worker that went away comes back.
//
// Not parallel: the wall clock offset is the process's, so no other test
// runs while it is set.
func TestQueueLeasesSurviveClockJump(t *testing.T) {
	t.Cleanup(func() { wallclock.Set(0) })
	for _, tc := range []struct {
		name    string
		jump    time.Duration
		ackWait time.Duration
	}{
		{"forward", time.Hour, 20 * time.Second},
		{"back", -time.Hour, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wallclock.Set(0)
			s := brokertest.Start(t)
			c := brokertest.Connect(t, s)
			addQueue(t, c, semaq.QueueConfig{Name: "Q", AckWait: tc.ackWait})
			pubReq(t, c, "r0")
			waitQueued(t, c, "Q", 1)
			held := fetch(t, c, "Q", client.FetchWorker("first"))
			if fmt.Sprint(ids(held)) != "[r0]" {
				t.Fatalf("first worker got %v", ids(held))
			}
			wallclock.Set(tc.jump)
			if err := broker.RestartDispatcher(s, "Q"); err != nil {
				t.Fatalf("restarting the dispatcher: %v", err)
			}
			waitFor(t, "the restarted dispatcher to restore the lease", func() bool {
				st, err := c.QueueInfo(context.Background(), "Q")
				return err == nil && st.Status.Held == 1
			})
			if tc.jump > 0 {
				// Well inside the ack wait the restored lease was given.
				if got := fetch(t, c, "Q", client.FetchWorker("second"), client.FetchWait(2*time.Second)); len(got) != 0 {
					t.Fatalf("with the clock an hour ahead, a second worker got %v while the first held it", ids(got))
				}
				if err := held[0].Ack(context.Background()); err != nil {
					t.Fatalf("the first worker's ack after the jump: %v", err)
				}
				waitFor(t, "the queue to be empty", func() bool {
					st, err := c.QueueInfo(context.Background(), "Q")
					return err == nil && st.Status.Held == 0 && st.Status.Queued == 0
				})
				return
			}
			// The first worker went away: the job comes back within its
			// ack wait, not after the hour its record names.
			held[0].Detach()
			again := fetch(t, c, "Q", client.FetchWorker("second"), client.FetchWait(10*tc.ackWait))
			if fmt.Sprint(ids(again)) != "[r0]" || again[0].Deliveries != 2 {
				t.Fatalf("with the clock an hour behind, a waiting fetch got %v, want r0 delivered a second time", ids(again))
			}
			ackAll(t, again)
		})
	}
}
