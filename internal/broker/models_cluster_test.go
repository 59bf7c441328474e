package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// The model lifecycle on one three-node cluster (docs/models.md): each
// subtest has a model and a queue of its own.
func TestClusterModels(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	mc := &modelCluster{t: t, ctx: ctx}
	for _, s := range c.Nodes() {
		mc.clients = append(mc.clients, brokertest.Connect(t, s))
	}
	t.Run("switch", mc.testSwitch)
	t.Run("canary", mc.testCanary)
	t.Run("rollback", mc.testRollback)
	t.Run("drain", mc.testDrain)
	t.Run("gate", mc.testGate)
}

type modelCluster struct {
	t       *testing.T
	ctx     context.Context
	clients []*client.Client
}

// eventually waits for cond, polling, failing t after timeout.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s: %v", timeout, what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// served is one request a worker took: what the ingress bound it to.
type served struct {
	key      string // the payload: publisher and number
	version  string // AI-Model-Version
	rev      uint64 // AI-Model-Revision
	worker   string // the version the worker announced
	session  string
	unbound  bool
	servedAt time.Time
}

// ledger is what the workers served, by payload.
type ledger struct {
	mu   sync.Mutex
	jobs map[string]served
	bad  []string
}

func (l *ledger) add(s served) {
	if s.key == "warm" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s.worker != s.version {
		l.bad = append(l.bad, fmt.Sprintf("request %s bound to %q served by a worker of %s", s.key, s.version, s.worker))
	}
	l.jobs[s.key] = s
}

func (l *ledger) snapshot() (map[string]served, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]served, len(l.jobs))
	for k, v := range l.jobs {
		out[k] = v
	}
	return out, append([]string(nil), l.bad...)
}

// setup makes queue MQ_<model> on ai.infer.<model>, registers the
// versions with figures that pass the gate, and makes the first active.
func (mc *modelCluster) setup(t *testing.T, model string, versions ...string) {
	ctx, admin := mc.ctx, mc.clients[0]
	if _, err := admin.AddQueue(ctx, semaq.QueueConfig{Name: "MQ_" + model, Subjects: []string{"ai.infer." + model}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	for _, v := range versions {
		if _, err := admin.ModelRegister(ctx, semaq.ModelRegisterRequest{ModelRef: semaq.ModelRef{Model: model, Version: v}}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.ModelReport(ctx, semaq.ModelReportRequest{ModelRef: semaq.ModelRef{Model: model, Version: v},
			ModelFigures: semaq.ModelFigures{P95Ms: 400, MemoryMB: 16000, ColdStartMs: 200}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.ModelPromote(ctx, semaq.ModelPromoteRequest{ModelRef: semaq.ModelRef{Model: model, Version: versions[0]}}); err != nil {
		t.Fatal(err)
	}
	for i, cl := range mc.clients {
		eventually(t, 30*time.Second, fmt.Sprintf("node %d to serve MQ_%s", i, model), func() error {
			// A request for no model: workers take it, the ledger skips it.
			_, err := cl.Publish(ctx, "ai.infer."+model, []byte("warm"))
			return err
		})
	}
}

// worker serves model's queue as a worker of version until ctx ends,
// through node i, holding each job for hold.
func (mc *modelCluster) worker(ctx context.Context, wg *sync.WaitGroup, i int, model, version string, hold time.Duration, l *ledger) {
	wg.Go(func() {
		labels := map[string]string{"model": model, "version": version}
		for ctx.Err() == nil {
			jobs, err := mc.clients[i].Fetch(ctx, "MQ_"+model, client.FetchMax(32), client.FetchWait(200*time.Millisecond), client.FetchLabels(labels))
			if err != nil {
				continue
			}
			var acks sync.WaitGroup
			for _, j := range jobs {
				rev, _ := strconv.ParseUint(j.Header.Get(semaq.HdrModelRevision), 10, 64)
				time.Sleep(hold)
				l.add(served{key: string(j.Data), version: j.Header.Get(semaq.HdrModelVersion), rev: rev, worker: version,
					session: j.Header.Get(semaq.HdrSession), unbound: rev == 0, servedAt: time.Now()})
				acks.Go(func() { _ = j.Ack(mc.ctx) })
			}
			acks.Wait()
		}
	})
}

// load publishes on model's subject through every node until stop is
// closed, each request marked with whether mark was set before it was
// sent; it returns the keys accepted.
func (mc *modelCluster) load(model string, stop <-chan struct{}, mark *atomic.Bool, errs chan<- error) func() map[string]bool {
	var mu sync.Mutex
	sent := map[string]bool{}
	var wg sync.WaitGroup
	for i, cl := range mc.clients {
		wg.Go(func() {
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				after := mark.Load()
				key := fmt.Sprintf("n%d-%d-%v", i, k, after)
				if _, err := cl.Publish(mc.ctx, "ai.infer."+model, []byte(key), client.WithModel(model), client.WithSession(key)); err != nil {
					errs <- fmt.Errorf("publish %s: %w", key, err)
					return
				}
				mu.Lock()
				sent[key] = after
				mu.Unlock()
			}
		})
	}
	return func() map[string]bool { wg.Wait(); return sent }
}

// waitServed waits until every key of sent was served.
func waitServed(t *testing.T, l *ledger, sent map[string]bool) map[string]served {
	t.Helper()
	var got map[string]served
	eventually(t, 60*time.Second, "every accepted request served", func() error {
		var bad []string
		got, bad = l.snapshot()
		if len(bad) > 0 {
			t.Fatal(strings.Join(bad, "\n"))
		}
		for k := range sent {
			if _, ok := got[k]; !ok {
				return fmt.Errorf("request %s not served (%d of %d)", k, len(got), len(sent))
			}
		}
		return nil
	})
	return got
}

// Under load through all three nodes, a promote switches every request
// bound at or past the switch's revision to the new version and none
// before; every request published after the promote returned is on the
// new version; a session depending on the old version is degraded.
func (mc *modelCluster) testSwitch(t *testing.T) {
	ctx, admin := mc.ctx, mc.clients[0]
	mc.setup(t, "msw", "v1", "v2")
	dep := map[string]string{"model:msw": "v1"}
	if _, err := admin.PutSession(ctx, semaq.SessionPutRequest{SessionRef: semaq.SessionRef{ID: "chat-1"}, Data: json.RawMessage(`{}`),
		Settings: &semaq.SessionSettings{Depends: dep}}); err != nil {
		t.Fatal(err)
	}
	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	l := &ledger{jobs: map[string]served{}}
	mc.worker(wctx, &wg, 1, "msw", "v1", 0, l)
	mc.worker(wctx, &wg, 2, "msw", "v2", 0, l)
	defer func() { stopWorkers(); wg.Wait() }()

	stop, errs := make(chan struct{}), make(chan error, 8)
	var switched atomic.Bool
	sent := mc.load("msw", stop, &switched, errs)
	eventually(t, 30*time.Second, "requests served on v1", func() error {
		if got, _ := l.snapshot(); len(got) < 30 {
			return fmt.Errorf("%d served", len(got))
		}
		return nil
	})
	info, err := mc.clients[1].ModelPromote(ctx, semaq.ModelPromoteRequest{ModelRef: semaq.ModelRef{Model: "msw", Version: "v2"}})
	if err != nil {
		t.Fatal(err)
	}
	switched.Store(true)
	eventually(t, 30*time.Second, "requests published after the switch served", func() error {
		n := 0
		got, _ := l.snapshot()
		for k := range got {
			if strings.HasSuffix(k, "-true") {
				n++
			}
		}
		if n < 30 {
			return fmt.Errorf("%d served", n)
		}
		return nil
	})
	close(stop)
	all := sent()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := waitServed(t, l, all)
	var before, after int
	for k, s := range got {
		if s.unbound {
			t.Fatalf("request %s was not bound to a version", k)
		}
		if (s.rev >= info.Revision) != (s.version == "v2") {
			t.Fatalf("request %s bound at revision %d to %s; the switch to v2 is revision %d", k, s.rev, s.version, info.Revision)
		}
		if all[k] && s.version != "v2" {
			t.Fatalf("request %s published after the promote returned is on %s", k, s.version)
		}
		if s.version == "v1" {
			before++
		} else {
			after++
		}
	}
	if before == 0 || after == 0 {
		t.Fatalf("%d requests on v1, %d on v2: the load did not span the switch", before, after)
	}
	t.Logf("%d requests on v1, %d on v2; switch at revision %d", before, after, info.Revision)
	eventually(t, 30*time.Second, "the session depending on msw v1 degraded", func() error {
		s, err := mc.clients[2].GetSession(ctx, semaq.SessionRef{ID: "chat-1"}, 0)
		if err == nil && (s.State != semaq.SessionDegraded || !strings.Contains(s.Reason, "model:msw moved from v1 to v2")) {
			err = fmt.Errorf("%s (%s)", s.State, s.Reason)
		}
		return err
	})
}

// A 10 % canary over 2,000 sessions published through the three nodes
// lands within 10 % ± 2 points, each on a worker of its version, and a
// session published again keeps its version.
func (mc *modelCluster) testCanary(t *testing.T) {
	ctx := mc.ctx
	mc.setup(t, "mcn", "v1", "v2")
	if _, err := mc.clients[2].ModelPromote(ctx, semaq.ModelPromoteRequest{ModelRef: semaq.ModelRef{Model: "mcn", Version: "v2"}, CanaryPercent: 10}); err != nil {
		t.Fatal(err)
	}
	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	l := &ledger{jobs: map[string]served{}}
	mc.worker(wctx, &wg, 0, "mcn", "v1", 0, l)
	mc.worker(wctx, &wg, 1, "mcn", "v2", 0, l)
	defer func() { stopWorkers(); wg.Wait() }()
	for range 2 { // more fetchers: the answers, not the publishes, take the time
		mc.worker(wctx, &wg, 2, "mcn", "v1", 0, l)
		mc.worker(wctx, &wg, 2, "mcn", "v2", 0, l)
	}
	const sessions, again = 2000, 100
	sent := map[string]bool{}
	for i, cl := range mc.clients {
		// One batch per node: each message takes the pipeline, and its
		// binding, as a publish would.
		var msgs []*nats.Msg
		for k := i; k < sessions+again; k += len(mc.clients) {
			sess := fmt.Sprintf("s-%d", k%sessions)
			key := fmt.Sprintf("%s#%d", sess, k/sessions)
			m := nats.NewMsg("ai.infer.mcn")
			m.Data = []byte(key)
			m.Header.Set(semaq.HdrModel, "mcn")
			m.Header.Set(semaq.HdrSession, sess)
			msgs = append(msgs, m)
			sent[key] = true
		}
		ack, err := cl.PublishBatch(ctx, msgs)
		if err == nil {
			err = ack.Err()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	got := waitServed(t, l, sent)
	canary := 0
	for k, s := range got {
		sess, n, _ := strings.Cut(k, "#")
		if n == "0" && s.version == "v2" {
			canary++
		}
		if n == "1" && got[sess+"#0"].version != s.version {
			t.Fatalf("session %s went to %s, then to %s", sess, got[sess+"#0"].version, s.version)
		}
	}
	if share := 100 * float64(canary) / sessions; math.Abs(share-10) > 2 {
		t.Fatalf("canary share %.2f%% of %d sessions, want 10%% ± 2", share, sessions)
	}
}

// A rollback in the middle of the load loses no request: every accepted
// request is served, and those published after the rollback returned are
// on the version rolled back to.
func (mc *modelCluster) testRollback(t *testing.T) {
	ctx := mc.ctx
	mc.setup(t, "mrb", "v1", "v2")
	if _, err := mc.clients[0].ModelPromote(ctx, semaq.ModelPromoteRequest{ModelRef: semaq.ModelRef{Model: "mrb", Version: "v2"}}); err != nil {
		t.Fatal(err)
	}
	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	l := &ledger{jobs: map[string]served{}}
	mc.worker(wctx, &wg, 2, "mrb", "v1", 0, l)
	mc.worker(wctx, &wg, 0, "mrb", "v2", time.Millisecond, l)
	defer func() { stopWorkers(); wg.Wait() }()
	stop, errs := make(chan struct{}), make(chan error, 8)
	var rolled atomic.Bool
	sent := mc.load("mrb", stop, &rolled, errs)
	eventually(t, 30*time.Second, "requests served on v2", func() error {
		if got, _ := l.snapshot(); len(got) < 30 {
			return fmt.Errorf("%d served", len(got))
		}
		return nil
	})
	info, err := mc.clients[1].ModelRollback(ctx, "mrb")
	if err != nil {
		t.Fatal(err)
	}
	rolled.Store(true)
	if info.Active != "v1" || info.Version("v2").State != semaq.ModelStateDraining {
		t.Fatalf("after rollback: active %s, v2 %s", info.Active, info.Version("v2").State)
	}
	eventually(t, 30*time.Second, "requests after the rollback served", func() error {
		n := 0
		got, _ := l.snapshot()
		for k := range got {
			if strings.HasSuffix(k, "-true") {
				n++
			}
		}
		if n < 30 {
			return fmt.Errorf("%d served", n)
		}
		return nil
	})
	close(stop)
	all := sent()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := waitServed(t, l, all)
	for k, s := range got {
		if all[k] && s.version != "v1" {
			t.Fatalf("request %s published after the rollback is on %s", k, s.version)
		}
	}
	t.Logf("%d requests accepted and served across the rollback", len(all))
}

// A drain stops admission to the old version and completes only once its
// requests in flight are all answered.
func (mc *modelCluster) testDrain(t *testing.T) {
	ctx, admin := mc.ctx, mc.clients[0]
	mc.setup(t, "mdr", "v1", "v2")
	const queued = 20
	for k := range queued {
		if _, err := mc.clients[k%3].Publish(ctx, "ai.infer.mdr", []byte(fmt.Sprint("old-", k)), client.WithModel("mdr")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := admin.ModelPromote(ctx, semaq.ModelPromoteRequest{ModelRef: semaq.ModelRef{Model: "mdr", Version: "v2"}}); err != nil {
		t.Fatal(err)
	}
	_, err := mc.clients[1].Publish(ctx, "ai.infer.mdr", []byte("pinned"), client.WithModel("mdr"), client.WithModelVersion("v1"))
	if !errors.Is(err, semaq.ErrModelDraining) {
		t.Fatalf("a request pinned to the draining v1: %v", err)
	}
	// Nothing serves v1 yet: the drain reports its requests in flight.
	var r *semaq.ModelDrainResponse
	eventually(t, 30*time.Second, "the drain to count v1's requests", func() error {
		var err error
		once, stop := context.WithCancel(ctx)
		defer stop()
		r, err = mc.clients[2].ModelDrain(once, "mdr", "v1", 0, func(semaq.ModelDrainResponse) { stop() })
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		if r.Done || r.InFlight != queued {
			return fmt.Errorf("drain answered %+v, want %d in flight", r, queued)
		}
		return nil
	})
	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	l := &ledger{jobs: map[string]served{}}
	mc.worker(wctx, &wg, 1, "mdr", "v1", 20*time.Millisecond, l)
	defer func() { stopWorkers(); wg.Wait() }()
	r, err = admin.ModelDrain(ctx, "mdr", "v1", 50*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := l.snapshot()
	if !r.Done || r.State != semaq.ModelStateRetired || len(got) != queued {
		t.Fatalf("drain returned %+v with %d of v1's %d requests answered", r, len(got), queued)
	}
	var events []string
	info, err := admin.ModelGet(ctx, "mdr")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range info.History {
		events = append(events, h.Event+":"+h.Version)
	}
	if want := "ModelDrainStarted:v1 ModelDeployed:v2 ModelRetired:v1"; !strings.HasSuffix(strings.Join(events, " "), want) {
		t.Fatalf("history %v does not end with %s", events, want)
	}
}

// The gate refuses a version whose figures are outside it, naming them;
// --force promotes it and the audit record says so.
func (mc *modelCluster) testGate(t *testing.T) {
	ctx, admin := mc.ctx, mc.clients[0]
	mc.setup(t, "mgt", "v1", "v2")
	if _, err := admin.ModelReport(ctx, semaq.ModelReportRequest{ModelRef: semaq.ModelRef{Model: "mgt", Version: "v2"},
		ModelFigures: semaq.ModelFigures{P95Ms: 500, MemoryMB: 19000, ColdStartMs: 350}}); err != nil {
		t.Fatal(err)
	}
	_, err := mc.clients[1].ModelPromote(ctx, semaq.ModelPromoteRequest{ModelRef: semaq.ModelRef{Model: "mgt", Version: "v2"}})
	if !errors.Is(err, semaq.ErrModelGate) {
		t.Fatalf("promote past a failing gate: %v", err)
	}
	for _, figure := range []string{"p95 drift +25.0% (500ms against 400ms)", "memory growth +18.8%", "cold start 350ms is not under 300ms"} {
		if !strings.Contains(err.Error(), figure) {
			t.Errorf("the refusal %q does not give %q", err, figure)
		}
	}
	if info, _ := admin.ModelGet(ctx, "mgt"); info.Active != "v1" {
		t.Fatalf("after the refusal the active version is %s", info.Active)
	}
	info, err := mc.clients[2].ModelPromote(ctx, semaq.ModelPromoteRequest{ModelRef: semaq.ModelRef{Model: "mgt", Version: "v2"}, Force: true})
	if err != nil || info.Active != "v2" {
		t.Fatalf("forced promote: %v", err)
	}
	recs, err := admin.Audit(ctx, semaq.AuditListRequest{Op: semaq.AuditOpModelPromote})
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for _, r := range recs.Records {
		if strings.HasPrefix(r.Target, "mgt ") {
			outcomes = append(outcomes, r.Target+"="+r.Outcome)
		}
	}
	if want := "mgt v1=ok mgt v2=refused mgt v2 forced=ok"; strings.Join(outcomes, " ") != want {
		t.Fatalf("audit records %q, want %q", outcomes, want)
	}
}
