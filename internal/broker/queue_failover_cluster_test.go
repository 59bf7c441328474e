package broker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// The node dispatching an R3 queue stops with jobs in flight: held jobs
// keep their leases (their worker, reconnected to another node, acks
// them), jobs acked before are not served again, a job whose worker died
// is served once more with delivery count 2 after its lease, queued jobs
// are kept, and workers on the surviving nodes keep fetching.
func TestClusterQueueFailover(t *testing.T) {
	t.Parallel()
	// The lease must outlast the setup after the fetch and the failover
	// itself (a graceful stop, an election, the new dispatcher's start):
	// on a loaded 2-core machine that took more than 10 s, and the acks
	// under the held jobs' leases were then rightly refused.
	const ackWait = 30 * time.Second
	c := brokertest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 180*time.Second)
	defer cancel()
	admin := brokertest.Connect(t, c.Node(0))
	if _, err := admin.AddQueue(ctx, semaq.QueueConfig{Name: "Q", Subjects: []string{"infer.>"}, Replicas: 3, AckWait: ackWait}); err != nil {
		t.Fatal(err)
	}
	lead := queueLeader(t, c, clusterJS(t, c.Node(0)), "Q")
	far := others(c, lead)
	pubC := brokertest.Connect(t, far[0])
	const n = 30
	c.Eventually(30*time.Second, "a far node's ingress to serve Q", func() error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := pubC.Publish(ctx, "infer.x", []byte(`{}`), client.WithMsgID("r0"))
		return err
	})
	for i := 1; i < n; i++ {
		pubReq(t, pubC, "r"+strconv.Itoa(i))
	}
	waitQueued(t, pubC, "Q", n)

	// A worker on the dispatching node holds 3 jobs; it reconnects to
	// another node when its node goes.
	urls := c.Node(lead).ClientURL()
	for _, s := range far {
		urls += "," + s.ClientURL()
	}
	onLead, err := nats.Connect(urls, nats.DontRandomize(), nats.ReconnectWait(50*time.Millisecond), nats.MaxReconnects(-1))
	if err != nil {
		t.Fatal(err)
	}
	defer onLead.Close()
	leadJobs := rawFetch(t, onLead, "Q", 3)
	// A worker on a surviving node dies holding 2.
	dying := brokertest.Connect(t, far[1])
	deadAt := time.Now() // their lease starts after this
	deadJobs := fetch(t, dying, "Q", client.FetchMax(2))
	dying.Close()
	// Another has acked 5 before the node stops.
	w1, w2 := brokertest.Connect(t, far[0]), brokertest.Connect(t, far[1])
	doneBefore := fetch(t, w1, "Q", client.FetchMax(5))
	ackAll(t, doneBefore)
	if len(leadJobs) != 3 || len(deadJobs) != 2 || len(doneBefore) != 5 {
		t.Fatalf("before the failover: %d, %d, %d jobs", len(leadJobs), len(deadJobs), len(doneBefore))
	}
	served := map[string]int{}
	for _, j := range doneBefore {
		served[j.ID]++
	}

	c.Stop(lead)

	// The worker that was on the stopped node acks under its leases.
	for _, fj := range leadJobs {
		ackUntilHeard(t, func() error {
			m, err := onLead.Request(fj.Reply, []byte(semaq.JobAck), 5*time.Second)
			if err != nil {
				return err
			}
			if string(m.Data) == `{"ok":true}` {
				return nil
			}
			var r semaq.JobReply
			if err := json.Unmarshal(m.Data, &r); err != nil {
				return err
			}
			if r.Error == nil {
				return fmt.Errorf("refused: %s", m.Data)
			}
			return r.Error
		}, "a job held on the stopped node")
		served[nats.Header(fj.Header).Get(semaq.HdrMsgID)]++
	}
	// Survivors drain the rest: 20 queued, then the dead worker's 2 once
	// their lease ends.
	left := n - len(served)
	workers := []*client.Client{w1, w2}
	for k := 0; left > 0; k++ {
		if k > 200 {
			t.Fatalf("%d jobs never came back (served %v)", left, served)
		}
		var jobs []*client.Job
		c.Eventually(30*time.Second, "a fetch on a surviving node", func() error {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			var err error
			jobs, err = workers[k%2].Fetch(ctx, "Q", client.FetchMax(4), client.FetchWait(2*time.Second))
			return err
		})
		for _, j := range jobs {
			served[j.ID]++
			if served[j.ID] > 1 {
				t.Fatalf("%s served twice", j.ID)
			}
			wantDeliveries := 1
			for _, d := range deadJobs {
				if d.ID == j.ID {
					wantDeliveries = 2
					if since := time.Since(deadAt); since < ackWait {
						t.Fatalf("%s, held by a dead worker, served again %s after, before its lease of %s", j.ID, since, ackWait)
					}
				}
			}
			if j.Deliveries != wantDeliveries {
				t.Fatalf("%s delivered with count %d, want %d", j.ID, j.Deliveries, wantDeliveries)
			}
			ackUntilHeard(t, func() error {
				ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				return j.Ack(ctx)
			}, j.ID)
			left--
		}
	}
	if len(served) != n {
		t.Fatalf("served %d distinct jobs, want %d", len(served), n)
	}
	js := clusterJS(t, far[0])
	c.Eventually(30*time.Second, "the queue's stream to empty", func() error {
		n, _ := streamMsgs(t, js, "Q")
		if n != 0 {
			return fmt.Errorf("%d left", n)
		}
		return nil
	})
	if extra := fetch(t, w1, "Q", client.FetchWait(200*time.Millisecond)); len(extra) != 0 {
		t.Fatalf("after every job was acked, fetch got %v", ids(extra))
	}
}
