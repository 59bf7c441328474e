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
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// clusterJS is JetStream through node s, as its operator.
func clusterJS(t *testing.T, s *broker.Server) jetstream.JetStream {
	t.Helper()
	return internalJS(t, s)
}

// queueLeader is the index of the node leading queue's stream (the node
// that dispatches it).
func queueLeader(t *testing.T, c *brokertest.Cluster, js jetstream.JetStream, queue string) int {
	t.Helper()
	i := -1
	c.Eventually(30*time.Second, "queue "+queue+" to have a leader", func() error {
		st, err := js.Stream(context.Background(), queue)
		if err != nil {
			return err
		}
		if st.CachedInfo().Cluster == nil || st.CachedInfo().Cluster.Leader == "" {
			return errors.New("no leader")
		}
		if i = c.Index(st.CachedInfo().Cluster.Leader); i < 0 || c.Node(i) == nil {
			return fmt.Errorf("leader %s is not running", st.CachedInfo().Cluster.Leader)
		}
		return nil
	})
	return i
}

// others are the running nodes but i.
func others(c *brokertest.Cluster, i int) []*broker.Server {
	var out []*broker.Server
	for k := range c.N() {
		if k != i && c.Node(k) != nil {
			out = append(out, c.Node(k))
		}
	}
	return out
}

// ackUntilHeard acks j until the dispatcher answers, as a worker does
// while its queue fails over; a refusal of its lease fails the test.
func ackUntilHeard(t *testing.T, ackOnce func() error, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := ackOnce()
		if err == nil {
			return
		}
		if errors.Is(err, semaq.ErrLeaseLost) || errors.Is(err, semaq.ErrBadRequest) {
			t.Fatalf("ack of %s: %v", what, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("ack of %s never heard: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond) // polling the dispatcher's return, not synchronising
	}
}

// A queue on a 3-node cluster serves from every node: admission on a node
// that does not dispatch it, status, fetches, answers and cancels through
// any node; and when the dispatch consumer's own leader moves, held jobs
// keep their leases and nothing is served twice.
func TestClusterQueueEveryNode(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	admin := brokertest.Connect(t, c.Node(0))
	if _, err := admin.AddQueue(ctx, semaq.QueueConfig{Name: "Q", Subjects: []string{"infer.>"}, Replicas: 3,
		MaxMessages: 6, AckWait: 20 * time.Second}); err != nil {
		t.Fatal(err)
	}
	js := clusterJS(t, c.Node(0))
	lead := queueLeader(t, c, js, "Q")
	far := others(c, lead)
	pubC, workC, cancelC := brokertest.Connect(t, far[0]), brokertest.Connect(t, far[1]), brokertest.Connect(t, far[0])

	// Admission on a node that does not dispatch the queue.
	c.Eventually(30*time.Second, "a far node to know Q's dispatcher", func() error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := pubC.QueueInfo(ctx, "Q")
		return err
	})
	c.Eventually(30*time.Second, "a far node's ingress to serve Q", func() error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := pubC.Publish(ctx, "infer.x", []byte(`{}`), client.WithMsgID("r0"))
		return err
	})
	// r2 is cancelled by another client, which knows its cancel token.
	const r2Token = "cancel-token-of-r2"
	for i := 1; i < 6; i++ {
		var opts []client.PublishOption
		if i == 2 {
			opts = append(opts, client.WithHeader(semaq.HdrCancelToken, r2Token))
		}
		pubReq(t, pubC, "r"+strconv.Itoa(i), opts...)
	}
	_, err := pubC.Publish(ctx, "infer.x", []byte(`{}`), client.WithMsgID("r6"))
	if !errors.Is(err, semaq.ErrOverloaded) {
		t.Fatalf("7th request to a queue of 6 through a far node: %v, want overloaded", err)
	}
	for i, s := range c.Nodes() {
		cl := brokertest.Connect(t, s)
		c.Eventually(10*time.Second, fmt.Sprintf("node %d to report 6 queued", i+1), func() error {
			ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			qi, err := cl.QueueInfo(ctx, "Q")
			if err != nil {
				return err
			}
			if qi.Status.Queued != 6 {
				return fmt.Errorf("queued %d", qi.Status.Queued)
			}
			return nil
		})
	}

	// Fetch and answer through a far node; cancel through another.
	held := fetch(t, workC, "Q", client.FetchMax(2)) // r0, r1
	if fmt.Sprint(ids(held)) != "[r0 r1]" {
		t.Fatalf("far worker got %v", ids(held))
	}
	res, err := cancelC.Cancel(ctx, "Q", "r2", client.CancelToken(r2Token))
	if err != nil || res.Result != "removed" {
		t.Fatalf("cancel through a far node: %+v, %v", res, err)
	}

	// The dispatch consumer's own leader moves (and may now differ from
	// the stream's).
	cons, err := js.Consumer(ctx, "Q", reserved.DispatchConsumer)
	if err != nil {
		t.Fatal(err)
	}
	was := cons.CachedInfo().Cluster.Leader
	nc, err := brokertest.DialOperator(c.Node(0))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c.Eventually(30*time.Second, "the dispatch consumer's leader to move", func() error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second) // a request lost in the election is asked again
		defer cancel()
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.Cluster == nil || info.Cluster.Leader == "" || info.Cluster.Leader == was {
			_, err := nc.Request("$JS.API.CONSUMER.LEADER.STEPDOWN.Q."+reserved.DispatchConsumer, nil, 5*time.Second)
			return fmt.Errorf("not moved yet (stepdown asked: %v)", err)
		}
		return nil
	})
	// The dispatcher makes it anew (deliveries the former leader sent as
	// it went may be lost): the index keeps what it holds.
	c.Eventually(30*time.Second, "the dispatcher to renew its consumer", func() error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		qi, err := workC.QueueInfo(ctx, "Q")
		if err != nil {
			return err
		}
		if qi.Status.Counters.ConsumerRecoveries < 1 {
			return errors.New("not renewed yet")
		}
		return nil
	})
	pubReq(t, pubC, "r7") // after the move, arrivals are still indexed
	ackAll(t, held)
	seen := map[string]bool{"r0": true, "r1": true}
	for len(seen) < 6 { // r3..r7 left
		jobs := fetch(t, workC, "Q", client.FetchMax(6), client.FetchWait(5*time.Second))
		if len(jobs) == 0 {
			t.Fatalf("queue stopped serving with %v seen", seen)
		}
		for _, j := range jobs {
			if seen[j.ID] || j.ID == "r2" || j.Deliveries != 1 {
				t.Fatalf("%s served again (deliveries %d; seen %v)", j.ID, j.Deliveries, seen)
			}
			seen[j.ID] = true
		}
		ackAll(t, jobs)
	}
	c.Eventually(30*time.Second, "the queue's stream to empty", func() error {
		n, _ := streamMsgs(t, js, "Q")
		if n != 0 {
			return fmt.Errorf("%d left", n)
		}
		return nil
	})
}

// A queue added through one node is served by every node's ingress the
// moment the add returns, as a stream is: the next publish anywhere is
// stored.
func TestClusterQueueAddServedEveryNode(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	first := brokertest.Connect(t, c.Node(0))
	others := []*client.Client{brokertest.Connect(t, c.Node(1)), brokertest.Connect(t, c.Node(2))}
	// Several rounds: a race between the add and the other nodes would
	// show in one of them.
	for round := range 5 {
		name, subj := fmt.Sprintf("Q%d", round), fmt.Sprintf("q%d.req", round)
		if _, err := first.AddQueue(ctx, semaq.QueueConfig{Name: name, Subjects: []string{subj}}); err != nil {
			t.Fatal(err)
		}
		for i, o := range others {
			ack, err := o.Publish(ctx, subj, []byte(`{}`))
			if err != nil || ack.Stream != name {
				t.Fatalf("round %d, node %d, right after the add: %+v, %v", round, i+2, ack, err)
			}
		}
	}
}

// A queue add waits for every node, and its answer names a node that did
// not confirm (semaq.HdrClusterLagging).
func TestClusterQueueAddNamesLaggingNodes(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3)
	nc, err := nats.Connect(c.Node(0).ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := broker.StopSyncReplies(c.Node(2)); err != nil {
		t.Fatal(err)
	}
	// Any node of the API's queue group may answer; n3 itself does not
	// wait for itself. Ask until another node answers.
	for round := range 8 {
		name := fmt.Sprintf("Q%d", round)
		body, _ := json.Marshal(semaq.QueueConfig{Name: name, Subjects: []string{fmt.Sprintf("q%d.req", round)}})
		m, err := nc.Request(fmt.Sprintf(semaq.APIQueueCreateT, name), body, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var r semaq.ErrorReply
		if json.Unmarshal(m.Data, &r) != nil || r.Error != nil {
			t.Fatalf("queue add: %s", m.Data)
		}
		switch lag := m.Header.Get(semaq.HdrClusterLagging); lag {
		case "n3":
			return
		case "":
		default:
			t.Fatalf("queue add named %q lagging, want n3", lag)
		}
	}
	t.Fatal("no queue add named n3, deaf to sync requests, as lagging")
}
