package dispatch

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/dispatch/sched"
	"github.com/semaq/semaq/internal/jstest"
	"github.com/semaq/semaq/semaq"
)

// The dispatcher alone, on a bare embedded NATS server with JetStream: no
// node, no HTTP. Everything it reaches of the node is a fake in Deps.

// fakeNode records what a dispatcher asks of the node.
type fakeNode struct {
	mu         sync.Mutex
	bound      map[string]string // request id -> lease
	ended      map[string]*semaq.TokenError
	dead       []semaq.DeadLetter
	deadData   []string
	dispatched int
	cancelled  int
	deadCount  map[string]int // reason -> count
}

func (f *fakeNode) Dispatched(*sched.Job, time.Time) { f.mu.Lock(); f.dispatched++; f.mu.Unlock() }
func (f *fakeNode) Expired(*sched.Job)               {}
func (f *fakeNode) Cancelled(*sched.Job)             { f.mu.Lock(); f.cancelled++; f.mu.Unlock() }
func (f *fakeNode) DeadLettered(queue, reason string) {
	f.mu.Lock()
	f.deadCount[queue+" "+reason]++
	f.mu.Unlock()
}

func (f *fakeNode) deps(ns *server.Server) Deps {
	dial := func(opts ...nats.Option) (*nats.Conn, error) { return nats.Connect(ns.ClientURL(), opts...) }
	return Deps{
		Internal: dial,
		Egress:   dial,
		Interest: func(subject string, _ nats.Header) bool { return ns.GlobalAccount().SubscriptionInterest(subject) },
		Match:    func(pattern, subject string) bool { return pattern == subject || pattern == ">" },
		StoreDeadLetter: func(_ context.Context, dl *semaq.DeadLetter, _ nats.Header, data []byte) error {
			f.mu.Lock()
			f.dead = append(f.dead, *dl)
			f.deadData = append(f.deadData, string(data))
			f.mu.Unlock()
			return nil
		},
		BindJob:  func(id, _, lease string, _ api.AnswerChain) { f.mu.Lock(); f.bound[id] = lease; f.mu.Unlock() },
		EndJob:   func(id, _ string, te *semaq.TokenError) { f.mu.Lock(); f.ended[id] = te; f.mu.Unlock() },
		Observer: f,
	}
}

func TestDispatcherThroughDeps(t *testing.T) {
	ns := jstest.Server(t)
	nc, js := jstest.Connect(t, ns)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "Q", Subjects: []string{"q.>"},
		Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		m := nats.NewMsg("q.x")
		m.Header.Set(semaq.HdrMsgID, fmt.Sprintf("r%d", i))
		m.Header.Set(semaq.HdrCancelSum, semaq.CancelSum(fmt.Sprintf("cancel-token-of-r%d", i))) // as the ingress stamps it
		m.Data = fmt.Appendf(nil, "payload %d", i)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	f := &fakeNode{bound: map[string]string{}, ended: map[string]*semaq.TokenError{}, deadCount: map[string]int{}}
	d, err := Start(ctx, semaq.QueueConfig{Name: "Q", Subjects: []string{"q.>"}}, f.deps(ns))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = d.Close(context.Background())
		}
	})

	// Cancel r3 while queued: removed, its token stream ended.
	body, _ := json.Marshal(semaq.CancelRequest{ID: "r3", Token: "cancel-token-of-r3", EndStream: &semaq.TokenError{Code: "cancelled"}})
	waitIndexed(t, d, 3)
	rep, err := nc.Request(fmt.Sprintf(semaq.APIQueueCancelT, "Q"), body, 5*time.Second)
	if err != nil || !strings.Contains(string(rep.Data), `"removed"`) {
		t.Fatalf("cancel: %v %s", err, rep.Data)
	}

	// Fetch the other two: each is bound to its lease.
	rep, err = nc.Request(fmt.Sprintf(semaq.APIQueueFetchT, "Q"), []byte(`{"worker":"w1","max":4}`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st := rep.Header.Get(semaq.HdrQueueStatus); st != "204" {
		t.Fatalf("fetch: status %s %s", st, rep.Header.Get(semaq.HdrQueueDescription))
	}
	jobs, err := semaq.ParseJobFrame(rep.Data)
	if err != nil || len(jobs) != 2 {
		t.Fatalf("fetch: %d jobs, %v", len(jobs), err)
	}
	// Ack the first, terminate the second: dead-lettered with its payload.
	for i, verb := range []string{semaq.JobAck, semaq.JobTerm + " bad input"} {
		rep, err := nc.Request(jobs[i].Reply, []byte(verb), 5*time.Second)
		if err != nil || string(rep.Data) != `{"ok":true}` {
			t.Fatalf("%s: %v %s", verb, err, rep.Data)
		}
	}

	if err := d.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
	closed = true
	if !d.nc.IsClosed() || !d.out.IsClosed() {
		t.Fatal("close returned with a connection open")
	}
	select {
	case <-d.done:
	default:
		t.Fatal("close returned before the loop ended")
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.bound) != 2 || f.bound["r1"] == "" || f.bound["r2"] == "" || f.bound["r1"] == f.bound["r2"] {
		t.Errorf("leases bound: %v", f.bound)
	}
	if te := f.ended["r3"]; te == nil || te.Code != "cancelled" || len(f.ended) != 1 {
		t.Errorf("token streams ended: %v", f.ended)
	}
	if len(f.dead) != 1 || f.dead[0].Stream != "Q" || f.dead[0].Consumer != "dispatch" ||
		f.dead[0].Reason != semaq.DLQReasonTerminated+": bad input" || f.deadData[0] != "payload 2" {
		t.Errorf("dead letters: %+v %q", f.dead, f.deadData)
	}
	if f.dispatched != 2 || f.cancelled != 1 || f.deadCount["Q "+semaq.DLQReasonTerminated+": bad input"] != 1 {
		t.Errorf("observed: dispatched %d, cancelled %d, dead %v", f.dispatched, f.cancelled, f.deadCount)
	}
	if err := d.Close(ctx); err != nil {
		t.Errorf("second close: %v", err)
	}
}

// waitIndexed waits until d indexes n requests.
func waitIndexed(t *testing.T, d *Dispatcher, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := 0
		d.Each(func(*sched.Job) { got++ })
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("indexed %d requests, want %d", got, n)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not synchronising on time
	}
}

func TestStartRefusesMissingDeps(t *testing.T) {
	full := (&fakeNode{}).deps(nil)
	for _, tc := range []struct {
		name string
		edit func(*Deps)
	}{
		{"Internal", func(d *Deps) { d.Internal = nil }},
		{"Egress", func(d *Deps) { d.Egress = nil }},
		{"Match", func(d *Deps) { d.Match = nil }},
		{"StoreDeadLetter", func(d *Deps) { d.StoreDeadLetter = nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			deps := full
			tc.edit(&deps)
			_, err := Start(context.Background(), semaq.QueueConfig{Name: "Q"}, deps)
			if err == nil || !strings.Contains(err.Error(), "Deps."+tc.name) {
				t.Fatalf("Start without %s: %v", tc.name, err)
			}
		})
	}
}
