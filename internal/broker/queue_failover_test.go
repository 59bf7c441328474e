package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// answerRaw answers a job on its ack subject from a plain NATS connection,
// as a worker that reconnected (to any node) does, and returns the
// broker's reply.
func answerRaw(t *testing.T, nc *nats.Conn, ackSubject, body string) semaq.JobReply {
	t.Helper()
	m, err := nc.Request(ackSubject, []byte(body), 10*time.Second)
	if err != nil {
		t.Fatalf("answer %s on %s: %v", body, ackSubject, err)
	}
	var r semaq.JobReply
	if err := json.Unmarshal(m.Data, &r); err != nil {
		t.Fatalf("answer reply %q: %v", m.Data, err)
	}
	return r
}

func leaseLost(r semaq.JobReply) bool {
	return r.Error != nil && errors.Is(r.Error, semaq.ErrLeaseLost)
}

// TestQueueLeasesSurviveRestart: jobs held by a worker when the dispatcher
// (or the whole node, file store) restarts keep their leases. The worker
// answers them after the restart and is heard; nothing it holds is handed
// to anyone else before its lease ends; a lease that ends is redelivered
// with its delivery count carried over; every job is acked once and the
// queue ends empty.
func TestQueueLeasesSurviveRestart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		restart func(t *testing.T, s *broker.Server, dir string) *broker.Server
	}{
		{"dispatcher", func(t *testing.T, s *broker.Server, _ string) *broker.Server {
			if err := broker.RestartDispatcher(s, "Q"); err != nil {
				t.Fatalf("restarting the dispatcher: %v", err)
			}
			return s
		}},
		{"node", func(t *testing.T, s *broker.Server, dir string) *broker.Server {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := s.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			return brokertest.Start(t, func(cfg *broker.Config) { cfg.DataDir = dir })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const ackWait = 3 * time.Second
			dir := t.TempDir()
			s1 := brokertest.Start(t, func(cfg *broker.Config) { cfg.DataDir = dir })
			c1 := brokertest.Connect(t, s1)
			addQueue(t, c1, semaq.QueueConfig{Name: "Q", AckWait: ackWait})
			for i := range 10 {
				pubReq(t, c1, "r"+strconv.Itoa(i))
			}
			waitQueued(t, c1, "Q", 10)
			fetchedAt := time.Now()
			held := fetch(t, c1, "Q", client.FetchMax(3)) // r0..r2
			if fmt.Sprint(ids(held)) != "[r0 r1 r2]" {
				t.Fatalf("worker got %v", ids(held))
			}
			ackAll(t, held[:1]) // r0 done before the restart
			held[1].Detach()
			held[2].Detach()
			c1.Close()

			s2 := tc.restart(t, s1, dir)
			c2 := brokertest.Connect(t, s2)
			waitFor(t, "the restarted dispatcher to index 7 queued and 2 held", func() bool {
				st, err := c2.QueueInfo(context.Background(), "Q")
				return err == nil && st.Status.Queued == 7 && st.Status.Held == 2
			})
			// Only the queued requests are handed out: the held ones are
			// still their worker's.
			rest := fetch(t, c2, "Q", client.FetchMax(20))
			if fmt.Sprint(ids(rest)) != "[r3 r4 r5 r6 r7 r8 r9]" {
				t.Fatalf("after the restart a fetch got %v, want r3..r9 only", ids(rest))
			}
			// Answered now: their leases would lapse during the wait for
			// r2's below, and a lapsed lease refuses the ack.
			ackAll(t, rest)
			// The worker, reconnected, answers r1 under its old lease.
			nc, err := nats.Connect(s2.ClientURL())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if r := answerRaw(t, nc, held[1].AckSubject(), semaq.JobAck); !r.OK {
				t.Fatalf("ack of r1 under its lease after the restart: %+v", r.Error)
			}
			// Asked again (its answer was not heard in time), the same ack is
			// done already; any other answer is refused.
			if r := answerRaw(t, nc, held[1].AckSubject(), semaq.JobAck); !r.OK {
				t.Fatalf("repeated ack of r1: %+v, want ok", r.Error)
			}
			if r := answerRaw(t, nc, held[1].AckSubject(), semaq.JobNak); !leaseLost(r) {
				t.Fatalf("nak of r1 after its ack: %+v, want lease lost", r)
			}
			// r2's worker never answers: it comes back once its lease ends,
			// not before, delivered a second time.
			again := fetch(t, c2, "Q", client.FetchMax(5), client.FetchWait(3*ackWait))
			if fmt.Sprint(ids(again)) != "[r2]" {
				t.Fatalf("waiting fetch got %v, want r2", ids(again))
			}
			if since := time.Since(fetchedAt); since < ackWait {
				t.Fatalf("r2 redelivered %s after it was leased, before its lease of %s ended", since, ackWait)
			}
			if again[0].Deliveries != 2 {
				t.Fatalf("r2 redelivered with deliveries %d, want 2", again[0].Deliveries)
			}
			if r := answerRaw(t, nc, held[2].AckSubject(), semaq.JobAck); !leaseLost(r) {
				t.Fatalf("ack of r2 under its lapsed lease: %+v, want lease lost", r)
			}
			ackAll(t, again)
			js := internalJS(t, s2)
			waitFor(t, "every acked request to leave the stream", func() bool {
				n, _ := streamMsgs(t, js, "Q")
				return n == 0
			})
			if extra := fetch(t, c2, "Q", client.FetchWait(100*time.Millisecond)); len(extra) != 0 {
				t.Fatalf("after every job was acked, fetch got %v", ids(extra))
			}
		})
	}
}
