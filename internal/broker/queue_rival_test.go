package broker_test

import (
	"context"
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

// TestQueueTwoDispatchers: two dispatchers serving one queue at once — what
// a cluster has for a while when a partition or a pause cuts off the node
// dispatching the queue, which serves on until it hears that it no longer
// leads the queue's stream, while the new leader's dispatcher has started —
// never hand one job to two workers, and take a worker's answer under a
// lease either of them gave, whichever hears it first: every job is done
// exactly once, no ack is refused, and the queue ends empty.
func TestQueueTwoDispatchers(t *testing.T) {
	t.Parallel()
	const (
		n       = 40
		ackWait = 5 * time.Second
	)
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	qc := semaq.QueueConfig{Name: "Q", Subjects: []string{"infer.>"}, AckWait: ackWait, MaxDeliver: -1}
	addQueue(t, c, qc)
	for i := range n {
		pubReq(t, c, "r"+strconv.Itoa(i))
	}
	waitQueued(t, c, "Q", n)
	// Leased by the node's dispatcher before the second one starts; acked
	// while both serve.
	early := fetch(t, c, "Q", client.FetchMax(4), client.FetchWorker("early"))
	if len(early) != 4 {
		t.Fatalf("first fetch got %v", ids(early))
	}
	rival, err := broker.StartRivalDispatcher(s, qc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rival.Close() })
	// Both index every request (the rival's consumer replaced the node
	// dispatcher's, which made its own anew): both pick from all of them.
	var seen string
	defer func() {
		if t.Failed() {
			t.Logf("last seen: %s", seen)
		}
	}()
	waitFor(t, "both dispatchers to index every request", func() bool {
		st := rival.Status()
		qi, err := c.QueueInfo(context.Background(), "Q")
		if err != nil {
			seen = err.Error()
			return false
		}
		seen = fmt.Sprintf("rival %d queued %d held; node %d queued %d held", st.Queued, st.Held, qi.Status.Queued, qi.Status.Held)
		return st.Queued+st.Held == n && qi.Status.Queued+qi.Status.Held == n
	})

	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	holder := map[string]string{} // job -> the worker holding it
	done := map[string]string{}   // job -> the worker whose ack was taken
	receive := func(worker string, jobs []*client.Job) {
		t.Helper()
		for _, j := range jobs {
			if h, ok := holder[j.ID]; ok {
				t.Fatalf("%s handed to %s (delivery %d) while %s holds it", j.ID, worker, j.Deliveries, h)
			}
			if w, ok := done[j.ID]; ok {
				t.Fatalf("%s handed to %s (delivery %d) after %s's ack of it was taken", j.ID, worker, j.Deliveries, w)
			}
			holder[j.ID] = worker
		}
	}
	ack := func(worker string, jobs []*client.Job) {
		t.Helper()
		for _, j := range jobs {
			if r := answerRaw(t, nc, j.AckSubject(), semaq.JobAck); !r.OK {
				t.Fatalf("%s's ack of %s (delivery %d) refused: %+v", worker, j.ID, j.Deliveries, r.Error)
			}
			delete(holder, j.ID)
			done[j.ID] = worker
		}
	}
	receive("early", early)
	deadline := time.Now().Add(time.Minute)
	for round := 0; len(done) < n; round++ {
		if time.Now().After(deadline) {
			t.Fatalf("after a minute %d of %d jobs done; held %v", len(done), n, holder)
		}
		for _, w := range []string{"w1", "w2"} {
			jobs := fetch(t, c, "Q", client.FetchMax(3), client.FetchWait(time.Second), client.FetchWorker(w))
			receive(w, jobs)
			ack(w, jobs)
		}
		if round == 1 {
			ack("early", early) // through either dispatcher, under the first one's leases
		}
	}
	js := internalJS(t, s)
	waitFor(t, "every acked request to leave the stream", func() bool {
		msgs, _ := streamMsgs(t, js, "Q")
		return msgs == 0
	})
	qi, err := c.QueueInfo(context.Background(), "Q")
	if err != nil {
		t.Fatal(err)
	}
	if conflicts := qi.Status.Counters.LeaseConflicts + rival.Status().Counters.LeaseConflicts; conflicts == 0 {
		t.Fatal("no lease conflict counted: the two dispatchers never competed for a job")
	}
}
