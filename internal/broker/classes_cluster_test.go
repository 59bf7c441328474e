package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// concurrency counts the jobs workers hold at once, from their side: a job
// counts from the moment its fetch returns it until just before its ack
// is sent.
type concurrency struct {
	mu        sync.Mutex
	cur, peak int
	done      map[string]int // served, by request id
	errs      []error
}

func (c *concurrency) enter() {
	c.mu.Lock()
	c.cur++
	c.peak = max(c.peak, c.cur)
	c.mu.Unlock()
}

func (c *concurrency) leave(id string) {
	c.mu.Lock()
	c.cur--
	c.done[id]++
	c.mu.Unlock()
}

func (c *concurrency) fail(err error) {
	c.mu.Lock()
	c.errs = append(c.errs, err)
	c.mu.Unlock()
}

func (c *concurrency) snapshot() (peak, done int, errs []error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peak, len(c.done), append([]error(nil), c.errs...)
}

// A class's cap holds across a cluster: six workers on three nodes serve
// two queues led by different nodes, one whose every request is in the
// class (whatever AI-Class a tenant names) and one whose requests name
// it; at no instant do the workers hold more than the cap, the work uses
// all of it, and the bound holds while one queue's node goes down and
// another dispatches the queue (the workers connected there reconnect to
// the others and answer under their leases). A worker without the class's
// hardware gets none of it; only admins change classes, and nobody else
// can touch the slots.
func TestClusterClassCap(t *testing.T) {
	t.Parallel()
	a := startAuthCluster(t)
	c := a.c
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	const capN, perQueue = 3, 15
	hbm := map[string]string{"hardware.gpu.memory": "hbm2"}
	if _, err := a.admin.AddClass(ctx, semaq.QueueClass{Name: "hbm2-inference", Require: hbm, MaxConcurrency: capN}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := a.admin.AddClass(ctx, semaq.QueueClass{Name: "free"}, false); err != nil {
		t.Fatal(err)
	}
	// In force on every node when the add returns.
	for i := 1; i < c.N(); i++ {
		list, err := brokertest.ConnectKey(t, c.Node(i), a.keys["admin"]).Classes(ctx)
		if err != nil || len(list) != 2 || list[0].Name != "free" || list[1].MaxConcurrency != capN {
			t.Fatalf("n%d lists %+v (%v) right after the adds on n1", i+1, list, err)
		}
	}
	a.add(semaq.UserAddRequest{Name: "acme-pub", Tenant: "acme", Role: semaq.RolePublisher, Subjects: []string{"hbm.>"}},
		semaq.UserAddRequest{Name: "gpu", Role: semaq.RoleWorker, Queues: []string{"HBM_*"}})

	// Only admins change classes; nobody writes the slots but the broker.
	for _, who := range []string{"acme-pub", "gpu"} {
		nc, errs := authConnErrs(t, a, who)
		body, _ := json.Marshal(semaq.ClassAddRequest{QueueClass: semaq.QueueClass{Name: "hbm2-inference", MaxConcurrency: 1000}, Replace: true})
		for _, subj := range []string{semaq.APIClassAdd, semaq.APIClassDelete} {
			if _, err := nc.Request(subj, body, 300*time.Millisecond); err == nil {
				t.Fatalf("%s asked %s and was answered", who, subj)
			}
			wantViolation(t, who, errs, subj)
		}
		purge := &nats.Msg{Subject: "$KV." + reserved.ClassSlotBucket + ".hbm2-inference.0", Header: nats.Header{"KV-Operation": {"PURGE"}}}
		if err := nc.PublishMsg(purge); err != nil {
			t.Fatal(err)
		}
		wantViolation(t, who, errs, purge.Subject)
	}

	for _, q := range []semaq.QueueConfig{
		{Name: "HBM_1", Subjects: []string{"hbm.one.>"}, Class: "hbm2-inference"},
		{Name: "HBM_2", Subjects: []string{"hbm.two.>"}},
	} {
		q.Replicas, q.AckWait = 3, 30*time.Second
		if _, err := a.admin.AddQueue(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	js := clusterJS(t, c.Node(0))
	op, err := brokertest.DialOperator(c.Node(0))
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	// Different nodes dispatch the two queues.
	c.Eventually(30*time.Second, "the queues to be led by different nodes", func() error {
		if queueLeader(t, c, js, "HBM_1") != queueLeader(t, c, js, "HBM_2") {
			return nil
		}
		_, err := op.Request("$JS.API.STREAM.LEADER.STEPDOWN.HBM_2", nil, 5*time.Second)
		return fmt.Errorf("same leader (stepdown asked: %v)", err)
	})

	pub := brokertest.ConnectKey(t, c.Node(1), a.keys["acme-pub"])
	for i := range perQueue {
		// A tenant naming another class does not leave the queue's.
		var opts []client.PublishOption
		if i%2 == 0 {
			opts = append(opts, client.WithHeader(semaq.HdrClass, "free"))
		}
		publishEventually(ctx, t, c, pub, "hbm.one.x", "one-"+strconv.Itoa(i), opts...)
		publishEventually(ctx, t, c, pub, "hbm.two.x", "two-"+strconv.Itoa(i), client.WithHeader(semaq.HdrClass, "hbm2-inference"))
	}

	cnt := &concurrency{done: map[string]int{}}
	wctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range 6 {
		cl := connectFirst(t, c, w%3, a.keys["gpu"])
		wg.Go(func() { classWorker(wctx, cl, "w"+strconv.Itoa(w), hbm, cnt) })
	}
	// A worker without the hardware is never served the class's work.
	plain := connectFirst(t, c, 2, a.keys["gpu"])
	var plainGot []string
	wg.Go(func() {
		for i := 0; wctx.Err() == nil; i++ {
			jobs, err := plain.Fetch(wctx, []string{"HBM_1", "HBM_2"}[i%2], client.FetchWorker("plain"),
				client.FetchLabels(map[string]string{"gpu": "t4"}), client.FetchWait(200*time.Millisecond))
			if err != nil {
				backoff(wctx)
			}
			for _, j := range jobs {
				plainGot = append(plainGot, j.ID)
				_ = j.Ack(wctx)
			}
		}
	})
	defer func() { stop(); wg.Wait() }()

	// A third of the way, the node dispatching HBM_1 goes.
	c.Eventually(60*time.Second, "a third of the requests to be served", func() error {
		if _, done, _ := cnt.snapshot(); done < 2*perQueue/3 {
			return fmt.Errorf("%d served", done)
		}
		return nil
	})
	gone := queueLeader(t, c, js, "HBM_1")
	c.Stop(gone)
	up := (gone + 1) % c.N()
	admin := brokertest.ConnectKey(t, c.Node(up), a.keys["admin"])
	c.Eventually(90*time.Second, "every request to be served", func() error {
		if _, done, _ := cnt.snapshot(); done < 2*perQueue {
			return fmt.Errorf("%d of %d served", done, 2*perQueue)
		}
		return nil
	})
	stop()
	wg.Wait()
	peak, _, errs := cnt.snapshot()
	for _, err := range errs {
		t.Error(err)
	}
	if peak > capN {
		t.Fatalf("workers held %d requests of the class at once; the cap is %d", peak, capN)
	}
	if peak < capN {
		t.Fatalf("workers held at most %d requests of the class at once; the work should use the cap, %d", peak, capN)
	}
	if len(plainGot) > 0 {
		t.Fatalf("a worker without hardware.gpu.memory=hbm2 got %v", plainGot)
	}
	for id, n := range cnt.done {
		if n != 1 {
			t.Errorf("%s served %d times", id, n)
		}
	}
	// Every slot is given back, and every node left says so.
	for i := range c.N() {
		if c.Node(i) == nil {
			continue
		}
		cl := brokertest.ConnectKey(t, c.Node(i), a.keys["admin"])
		c.Eventually(20*time.Second, fmt.Sprintf("n%d to see the class's slots free", i+1), func() error {
			list, err := cl.Classes(ctx)
			if err != nil {
				return err
			}
			for _, ci := range list {
				if ci.Name == "hbm2-inference" && (ci.Held != 0 || ci.MaxConcurrency != capN) {
					return fmt.Errorf("%+v", ci)
				}
			}
			return nil
		})
	}
	qi, err := admin.QueueInfo(ctx, "HBM_1")
	if err != nil || len(qi.Status.Classes) != 1 || qi.Status.Classes[0].Max != capN {
		t.Fatalf("HBM_1 status classes %+v (%v), want hbm2-inference capped at %d", qi.Status.Classes, err, capN)
	}
}

// classWorker serves the two queues in turn with labels, holding each job
// a while, counting what it holds in cnt.
func classWorker(ctx context.Context, cl *client.Client, id string, labels map[string]string, cnt *concurrency) {
	for i := 0; ctx.Err() == nil; i++ {
		jobs, err := cl.Fetch(ctx, []string{"HBM_1", "HBM_2"}[i%2], client.FetchWorker(id), client.FetchLabels(labels),
			client.FetchMax(2), client.FetchWait(200*time.Millisecond))
		if err != nil {
			backoff(ctx) // a queue failing over, a node gone: fetch again
			continue
		}
		for range jobs {
			cnt.enter()
		}
		select {
		case <-ctx.Done():
		case <-time.After(150 * time.Millisecond): // the work
		}
		for _, j := range jobs {
			cnt.leave(j.ID)
			for {
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err := j.Ack(actx)
				cancel()
				if err == nil || ctx.Err() != nil {
					break
				}
				if errors.Is(err, semaq.ErrLeaseLost) {
					cnt.fail(fmt.Errorf("%s: ack of %s: %v", id, j.ID, err))
					break
				}
				backoff(ctx)
			}
		}
	}
}

// backoff waits a little before a worker asks again.
func backoff(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(50 * time.Millisecond):
	}
}

// connectFirst is an SDK client with key that connects to node first and
// reconnects to the others when it goes.
func connectFirst(t *testing.T, c *brokertest.Cluster, first int, key string) *client.Client {
	t.Helper()
	urls := []string{c.Node(first).ClientURL()}
	for i, s := range c.Nodes() {
		if i != first {
			urls = append(urls, s.ClientURL())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.Connect(ctx, strings.Join(urls, ","), client.WithKey(key),
		client.WithNATSOptions(nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// authConnErrs is a plain NATS connection of user name to n1 whose
// permission violations arrive on errs.
func authConnErrs(t *testing.T, a *authCluster, name string) (*nats.Conn, <-chan error) {
	t.Helper()
	errs := make(chan error, 64)
	nc, err := nats.Connect(a.c.Node(0).ClientURL(), nats.UserInfo(name, a.keys[name]), nats.CustomInboxPrefix(semaq.UserInboxPrefix+name),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		}))
	if err != nil {
		t.Fatalf("connect as %s: %v", name, err)
	}
	t.Cleanup(nc.Close)
	return nc, errs
}

// publishEventually publishes id on subject, asking again while the
// cluster's nodes learn of the queue.
func publishEventually(ctx context.Context, t *testing.T, c *brokertest.Cluster, cl *client.Client, subject, id string, opts ...client.PublishOption) {
	t.Helper()
	c.Eventually(30*time.Second, "publish "+id, func() error {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := cl.Publish(pctx, subject, []byte(`{}`), append(opts, client.WithMsgID(id))...)
		return err
	})
}
