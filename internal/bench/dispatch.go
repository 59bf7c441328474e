package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/operator"
	"github.com/semaq/semaq/semaq"
)

// Goals of the dispatch scenario (docs/benchmarks/dispatch.md).
const (
	// GoalCriticalFloodRatio: critical p99 queue wait under a 100× bulk
	// flood, over critical alone.
	GoalCriticalFloodRatio = 1.2
	// GoalTenantIsolationRatio: tenant B's p99 wait while A offers 10× B's
	// load, over B alone.
	GoalTenantIsolationRatio = 1.5
	// GoalDispatchThroughputRatio: dispatch throughput over a raw
	// JetStream pull consumer's.
	GoalDispatchThroughputRatio = 0.7
)

// DispatchConfig configures `semaq bench dispatch`.
type DispatchConfig struct {
	// Duration of each paced phase.
	Duration time.Duration
	// Workers fetching in the paced phases, each serving one request at a
	// time for Service.
	Workers int
	Service time.Duration
	// CriticalRate is the critical load (requests/s); the flood offers
	// FloodFactor times as many bulk requests.
	CriticalRate int
	FloodFactor  int
	// TenantRate is tenant B's load; A offers TenantFactor times as much.
	TenantRate   int
	TenantFactor int
	// Drain is how many requests the throughput phase drains per target
	// per round, with DrainWorkers workers fetching DrainBatch at a time.
	Drain        int
	DrainWorkers int
	DrainBatch   int
	Rounds       int
	// AckNoWait drains with unconfirmed acks (Job.AckNoWait against a
	// JetStream Ack) instead of confirmed ones (Job.Ack against AckSync).
	AckNoWait bool
	Size      int
	Dir       string
	Progress  func(format string, args ...any)
}

// DefaultDispatchConfig is what `semaq bench dispatch` runs without flags.
func DefaultDispatchConfig() DispatchConfig {
	return DispatchConfig{
		Duration: 3 * time.Second, Workers: 4, Service: 2 * time.Millisecond,
		CriticalRate: 50, FloodFactor: 100, TenantRate: 200, TenantFactor: 10,
		Drain: 50000, DrainWorkers: 4, DrainBatch: 64, Rounds: 5, Size: 512,
	}
}

// Validate reports the first invalid field.
func (c *DispatchConfig) Validate() error {
	switch {
	case c.Duration < 100*time.Millisecond:
		return fmt.Errorf("duration %s is under 100ms", c.Duration)
	case c.Workers < 1 || c.DrainWorkers < 1:
		return errors.New("workers must be at least 1")
	case c.Service < 0:
		return fmt.Errorf("service time %s is negative", c.Service)
	case c.CriticalRate < 1 || c.TenantRate < 1 || c.FloodFactor < 1 || c.TenantFactor < 1:
		return errors.New("rates and factors must be at least 1")
	case c.Drain < 1 || c.DrainBatch < 1 || c.DrainBatch > semaq.MaxFetchBatch || c.Rounds < 1:
		return fmt.Errorf("drain %d, batch %d (1..%d) and rounds %d must be positive", c.Drain, c.DrainBatch, semaq.MaxFetchBatch, c.Rounds)
	case c.Size < 1:
		return fmt.Errorf("size %d is not positive", c.Size)
	}
	return nil
}

// DispatchReport holds the dispatch scenario's own figures.
type DispatchReport struct {
	Priority   PriorityIsolation  `json:"priority"`
	Tenants    TenantIsolation    `json:"tenants"`
	Fairness   TokenFairness      `json:"fairness"`
	Throughput DispatchThroughput `json:"throughput"`
}

// PriorityIsolation compares critical requests' queue wait alone and under
// a bulk flood.
type PriorityIsolation struct {
	CriticalRate  int     `json:"critical_rate"`
	BulkRate      int     `json:"bulk_rate"`
	Alone         Latency `json:"critical_alone_wait_us"`
	Flood         Latency `json:"critical_flood_wait_us"`
	BulkWait      Latency `json:"bulk_flood_wait_us"`
	BulkBacklog   int     `json:"bulk_backlog_at_end"`
	P99Ratio      float64 `json:"p99_ratio"`
	Goal          float64 `json:"goal"`
	CriticalCount int64   `json:"critical_served"`
}

// TenantIsolation compares tenant B's wait alone and beside a tenant A
// offering TenantFactor times B's load.
type TenantIsolation struct {
	BRate    int     `json:"b_rate"`
	ARate    int     `json:"a_rate"`
	Alone    Latency `json:"b_alone_wait_us"`
	WithA    Latency `json:"b_with_a_wait_us"`
	AWait    Latency `json:"a_wait_us"`
	P99Ratio float64 `json:"p99_ratio"`
	Goal     float64 `json:"goal"`
}

// TokenFairness is the tokens served to two backlogged tenants with
// different request sizes.
type TokenFairness struct {
	Requests   int     `json:"requests_served"`
	TokensA    int64   `json:"tokens_a"`
	TokensB    int64   `json:"tokens_b"`
	SizeA      int64   `json:"request_tokens_a"`
	SizeB      int64   `json:"request_tokens_b"`
	MaxGap     int64   `json:"max_gap_tokens"`
	Bound      int64   `json:"vtc_bound_tokens"` // 2 × the largest request
	GapOfBound float64 `json:"max_gap_of_bound"`
}

// DispatchThroughput is the drain rate of a backlog: SemaQ's dispatcher
// against a raw JetStream pull consumer on the same broker.
type DispatchThroughput struct {
	Semaq   float64   `json:"semaq_msgs_per_s"`
	Raw     float64   `json:"jetstream_msgs_per_s"`
	Ratio   float64   `json:"ratio"`
	Goal    float64   `json:"goal"`
	Rounds  []float64 `json:"ratio_by_round"`
	Workers int       `json:"workers"`
	Batch   int       `json:"batch"`
	// Acks is "confirmed" (Job.Ack vs AckSync) or "nowait" (Job.AckNoWait
	// vs Ack).
	Acks string `json:"acks"`
}

// Targets of the dispatch scenario's throughput phase.
const (
	TargetSemaqDispatch = "semaq-dispatch"
	TargetJetStreamPull = "jetstream-pull"
)

// RunDispatch runs the dispatch scenario on an embedded broker.
func RunDispatch(ctx context.Context, cfg DispatchConfig) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if cfg.Progress == nil {
		cfg.Progress = func(string, ...any) {}
	}
	dir := cfg.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "semaq-bench-dispatch-")
		if err != nil {
			return nil, fmt.Errorf("bench: %w", err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	bc := broker.DefaultConfig()
	bc.DataDir = filepath.Join(dir, "semaq")
	bc.Listen = "127.0.0.1:0"
	bc.HTTP = ""
	bc.Sync = broker.SyncInterval
	bc.LogLevel = "error"
	op, err := operator.New()
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	srv, err := broker.New(bc, nil, op.Option())
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	if err := srv.Start(ctx); err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer srv.Shutdown(context.Background())
	d := &dispatchRun{cfg: cfg, srv: srv, op: op, data: textPayload(cfg.Size)}
	defer d.closeClients()
	rep := &DispatchReport{}
	steps := []struct {
		name string
		fn   func(context.Context, *DispatchReport) error
	}{
		{"priority isolation", d.priority},
		{"tenant isolation", d.tenants},
		{"token fairness", d.fairness},
		{"throughput", d.throughput},
	}
	for _, st := range steps {
		cfg.Progress("dispatch: %s", st.name)
		if err := st.fn(ctx, rep); err != nil {
			return nil, fmt.Errorf("bench: dispatch %s: %w", st.name, err)
		}
	}
	tp := rep.Throughput
	return &Report{
		Scenario: "dispatch",
		Config: ReportConfig{
			Targets: []string{TargetSemaqDispatch, TargetJetStreamPull}, Duration: cfg.Duration.String(),
			Size: cfg.Size, Sync: broker.SyncInterval, Rounds: cfg.Rounds,
			Setup: []TargetSetup{
				{Target: TargetSemaqDispatch, Server: ServerBroker, Stream: "BENCH_Q", Durability: DurabilityInterval},
				{Target: TargetJetStreamPull, Server: ServerBroker, Stream: "BENCH_RAWQ", Durability: DurabilityInterval},
			},
			GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU(),
			GOMAXPROCS: runtime.GOMAXPROCS(0), NATSServer: server.VERSION, SemaQ: broker.Version,
		},
		Results: []Result{
			{Target: TargetSemaqDispatch, ThroughputMsgsPerS: math.Round(tp.Semaq), Msgs: int64(cfg.Drain * cfg.Rounds)},
			{Target: TargetJetStreamPull, ThroughputMsgsPerS: math.Round(tp.Raw), Msgs: int64(cfg.Drain * cfg.Rounds)},
		},
		Dispatch: rep,
	}, nil
}

type dispatchRun struct {
	cfg     DispatchConfig
	srv     *broker.Server
	op      *operator.Operator // the raw baseline's login on srv
	data    []byte
	mu      sync.Mutex
	clients []*client.Client
}

func (d *dispatchRun) connect(ctx context.Context, name string) (*client.Client, error) {
	c, err := client.Connect(ctx, d.srv.ClientURL(), client.WithName(name))
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.clients = append(d.clients, c)
	d.mu.Unlock()
	return c, nil
}

func (d *dispatchRun) closeClients() {
	for _, c := range d.clients {
		c.Close()
	}
}

// queue (re)creates a queue for one phase.
func (d *dispatchRun) queue(ctx context.Context, name string) (*client.Client, error) {
	admin, err := d.connect(ctx, "bench-admin")
	if err != nil {
		return nil, err
	}
	_ = admin.DeleteQueue(ctx, name)
	_, err = admin.AddQueue(ctx, semaq.QueueConfig{Name: name, Subjects: []string{"bench." + name + ".>"}, MaxMessages: 10_000_000, AckWait: time.Minute, AffinityWait: -1})
	return admin, err
}

// load is one paced publisher of a phase.
type load struct {
	rate int
	opts []client.PublishOption
}

// pace publishes each load at its rate until ctx ends, asynchronously
// through the ingress, and returns how many were refused or failed.
func (d *dispatchRun) pace(ctx context.Context, subject string, loads []load) (int64, error) {
	nc, err := nats.Connect(d.srv.ClientURL(), nats.Name("bench-publisher"))
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return 0, err
	}
	var failed atomic.Int64
	var wg sync.WaitGroup
	for _, l := range loads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			const tick = 5 * time.Millisecond
			t := time.NewTicker(tick)
			defer t.Stop()
			start := time.Now()
			sent := 0
			for {
				select {
				case <-ctx.Done():
					return
				case now := <-t.C:
					due := int(now.Sub(start).Seconds() * float64(l.rate))
					for ; sent < due; sent++ {
						m := nats.NewMsg(subject)
						m.Data = d.data
						for _, o := range l.opts {
							_ = o(m.Header)
						}
						if _, err := js.PublishMsgAsync(m); err != nil {
							failed.Add(1)
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(10 * time.Second):
	}
	return failed.Load(), nil
}

// workers run n workers on queue for the phase: each fetches one request,
// serves it for cfg.Service, acks it, and records its queue wait under the
// value of header key.
type waits struct {
	mu sync.Mutex
	by map[string]*Histogram
}

func (w *waits) record(key string, d time.Duration) {
	w.mu.Lock()
	h := w.by[key]
	if h == nil {
		h = NewHistogram()
		w.by[key] = h
	}
	h.Record(d)
	w.mu.Unlock()
}

func (w *waits) summary(key string) (Latency, int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h := w.by[key]; h != nil {
		return h.Summary(), h.Count()
	}
	return Latency{}, 0
}

func (d *dispatchRun) workers(ctx context.Context, queue, key string, n int, w *waits) (*sync.WaitGroup, error) {
	var wg sync.WaitGroup
	for i := range n {
		c, err := d.connect(ctx, "bench-worker-"+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				jobs, err := c.Fetch(ctx, queue, client.FetchWait(200*time.Millisecond))
				if err != nil {
					continue
				}
				for _, j := range jobs {
					w.record(j.Header.Get(key), j.Waited)
					if d.cfg.Service > 0 {
						time.Sleep(d.cfg.Service) // the simulated inference
					}
					actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					_ = j.Ack(actx, client.AckOutputTokens(j.Tokens))
					cancel()
				}
			}
		}()
	}
	return &wg, nil
}

// phase runs workers and paced loads on a fresh queue for cfg.Duration.
func (d *dispatchRun) phase(ctx context.Context, name, key string, loads []load) (*waits, *semaq.QueueInfo, error) {
	admin, err := d.queue(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	w := &waits{by: map[string]*Histogram{}}
	pctx, cancel := context.WithTimeout(ctx, d.cfg.Duration)
	defer cancel()
	wg, err := d.workers(pctx, name, key, d.cfg.Workers, w)
	if err != nil {
		return nil, nil, err
	}
	if _, err := d.pace(pctx, "bench."+name+".req", loads); err != nil {
		return nil, nil, err
	}
	wg.Wait()
	qi, err := admin.QueueInfo(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	_ = admin.DeleteQueue(ctx, name)
	return w, qi, nil
}

func (d *dispatchRun) priority(ctx context.Context, rep *DispatchReport) error {
	c := d.cfg
	crit := load{rate: c.CriticalRate, opts: []client.PublishOption{client.WithPriority(semaq.PriorityCritical), client.WithPromptTokens(100)}}
	w, _, err := d.phase(ctx, "PRIO_ALONE", semaq.HdrPriority, []load{crit})
	if err != nil {
		return err
	}
	alone, _ := w.summary("0")
	bulk := load{rate: c.CriticalRate * c.FloodFactor, opts: []client.PublishOption{client.WithPriority(semaq.PriorityBulk), client.WithPromptTokens(100)}}
	w, qi, err := d.phase(ctx, "PRIO_FLOOD", semaq.HdrPriority, []load{crit, bulk})
	if err != nil {
		return err
	}
	flood, n := w.summary("0")
	bw, _ := w.summary("8")
	rep.Priority = PriorityIsolation{
		CriticalRate: c.CriticalRate, BulkRate: bulk.rate, Alone: alone, Flood: flood, BulkWait: bw,
		BulkBacklog: qi.Status.Queued, P99Ratio: ratio(flood.P99, alone.P99), Goal: GoalCriticalFloodRatio, CriticalCount: n,
	}
	return nil
}

func (d *dispatchRun) tenants(ctx context.Context, rep *DispatchReport) error {
	c := d.cfg
	b := load{rate: c.TenantRate, opts: []client.PublishOption{client.WithTenant("B"), client.WithPromptTokens(100)}}
	w, _, err := d.phase(ctx, "TENANT_ALONE", semaq.HdrTenant, []load{b})
	if err != nil {
		return err
	}
	alone, _ := w.summary("B")
	a := load{rate: c.TenantRate * c.TenantFactor, opts: []client.PublishOption{client.WithTenant("A"), client.WithPromptTokens(100)}}
	w, _, err = d.phase(ctx, "TENANT_SHARED", semaq.HdrTenant, []load{b, a})
	if err != nil {
		return err
	}
	withA, _ := w.summary("B")
	aw, _ := w.summary("A")
	rep.Tenants = TenantIsolation{BRate: b.rate, ARate: a.rate, Alone: alone, WithA: withA, AWait: aw,
		P99Ratio: ratio(withA.P99, alone.P99), Goal: GoalTenantIsolationRatio}
	return nil
}

// fairness backlogs two tenants, A with small requests and B with large
// ones, and serves a fixed number of requests, tracking the largest gap in
// tokens served between them.
func (d *dispatchRun) fairness(ctx context.Context, rep *DispatchReport) error {
	const name, n = "FAIR", 400
	const sizeA, sizeB = 100, 1000
	admin, err := d.queue(ctx, name)
	if err != nil {
		return err
	}
	for i := range n {
		if _, err := admin.Publish(ctx, "bench.FAIR.req", d.data, client.WithTenant("A"), client.WithPromptTokens(sizeA)); err != nil {
			return err
		}
		if i%4 == 0 {
			if _, err := admin.Publish(ctx, "bench.FAIR.req", d.data, client.WithTenant("B"), client.WithPromptTokens(sizeB)); err != nil {
				return err
			}
		}
	}
	total := n + n/4
	for deadline := time.Now().Add(30 * time.Second); ; {
		qi, err := admin.QueueInfo(ctx, name)
		if err != nil {
			return err
		}
		if qi.Status.Queued == total {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("queue holds %d of %d requests", qi.Status.Queued, total)
		}
		time.Sleep(10 * time.Millisecond) // waiting for the dispatcher to index the backlog
	}
	served := map[string]int64{}
	var maxGap int64
	count := 0
	for count < total/2 {
		jobs, err := admin.Fetch(ctx, name)
		if err != nil {
			return err
		}
		for _, j := range jobs {
			served[j.Header.Get(semaq.HdrTenant)] += j.Tokens
			if err := j.Ack(ctx); err != nil {
				return err
			}
			count++
			gap := served["A"] - served["B"]
			maxGap = max(maxGap, gap, -gap)
		}
	}
	_ = admin.DeleteQueue(ctx, name)
	bound := int64(2 * sizeB)
	rep.Fairness = TokenFairness{Requests: count, TokensA: served["A"], TokensB: served["B"], SizeA: sizeA, SizeB: sizeB,
		MaxGap: maxGap, Bound: bound, GapOfBound: round2(float64(maxGap) / float64(bound))}
	return nil
}

// throughput drains a backlog of cfg.Drain requests with DrainWorkers
// workers: through the dispatcher (Fetch, Ack confirmed) and from a raw
// JetStream workqueue stream with a pull consumer (Fetch, AckSync), in
// alternating order over cfg.Rounds rounds.
func (d *dispatchRun) throughput(ctx context.Context, rep *DispatchReport) error {
	c := d.cfg
	nc, err := d.op.Connect(d.srv.ClientURL(), nats.Name("bench-raw"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// A first round that is not counted: both paths get their
	// connections, consumers and caches warm, as they are in service.
	if _, err := d.drainSemaq(ctx); err != nil {
		return err
	}
	if _, err := d.drainRaw(ctx, js); err != nil {
		return err
	}
	var semaqRates, rawRates, ratios []float64
	for round := range c.Rounds {
		order := []bool{true, false}
		if round%2 == 1 {
			order = []bool{false, true}
		}
		var rs, rr float64
		for _, semaqFirst := range order {
			if semaqFirst {
				if rs, err = d.drainSemaq(ctx); err != nil {
					return err
				}
			} else {
				if rr, err = d.drainRaw(ctx, js); err != nil {
					return err
				}
			}
		}
		semaqRates, rawRates = append(semaqRates, rs), append(rawRates, rr)
		ratios = append(ratios, round2(rs/rr))
	}
	s, r := Median(semaqRates), Median(rawRates)
	// The ratio is the median of the rounds' ratios: each round runs both
	// targets back to back, so it is the comparison least moved by a busy
	// machine.
	rep.Throughput = DispatchThroughput{Semaq: math.Round(s), Raw: math.Round(r), Ratio: round2(Median(ratios)), Goal: GoalDispatchThroughputRatio,
		Rounds: ratios, Workers: c.DrainWorkers, Batch: c.DrainBatch, Acks: "confirmed"}
	if c.AckNoWait {
		rep.Throughput.Acks = "nowait"
	}
	return nil
}

func (d *dispatchRun) backlog(ctx context.Context, subject string, nc *nats.Conn) error {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return err
	}
	for i := 0; i < d.cfg.Drain; i++ {
		m := nats.NewMsg(subject)
		m.Data = d.data
		m.Header.Set(semaq.HdrPromptTokens, "100")
		for {
			_, err := js.PublishMsgAsync(m)
			if err == nil {
				break
			}
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
				return err
			}
			// The window is full and not draining fast enough: let it
			// empty, then go on.
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *dispatchRun) drainSemaq(ctx context.Context) (float64, error) {
	const name = "BENCH_Q"
	admin, err := d.queue(ctx, name)
	if err != nil {
		return 0, err
	}
	pub, err := nats.Connect(d.srv.ClientURL())
	if err != nil {
		return 0, err
	}
	defer pub.Close()
	if err := d.backlog(ctx, "bench."+name+".req", pub); err != nil {
		return 0, err
	}
	for deadline := time.Now().Add(60 * time.Second); ; {
		qi, err := admin.QueueInfo(ctx, name)
		if err != nil {
			return 0, err
		}
		if qi.Status.Queued == d.cfg.Drain {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("queue holds %d of %d", qi.Status.Queued, d.cfg.Drain)
		}
		time.Sleep(10 * time.Millisecond) // waiting for the dispatcher to index the backlog
	}
	steps := make([]func(*atomic.Int64) error, d.cfg.DrainWorkers)
	for i := range steps {
		c, err := d.connect(ctx, "bench-drain-"+strconv.Itoa(i))
		if err != nil {
			return 0, err
		}
		steps[i] = func(done *atomic.Int64) error {
			jobs, err := c.Fetch(ctx, name, client.FetchMax(d.cfg.DrainBatch))
			if err != nil {
				return err
			}
			for _, j := range jobs {
				ack := func() error { return j.Ack(ctx) }
				if d.cfg.AckNoWait {
					ack = func() error { return j.AckNoWait() }
				}
				if err := ack(); err != nil {
					return err
				}
				done.Add(1)
			}
			return nil
		}
	}
	rate, err := d.drainRate(steps)
	_ = admin.DeleteQueue(ctx, name)
	return rate, err
}

func (d *dispatchRun) drainRaw(ctx context.Context, js jetstream.JetStream) (float64, error) {
	const name = "BENCH_RAWQ"
	_ = js.DeleteStream(ctx, name)
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"benchraw.q.>"}, Retention: jetstream.WorkQueuePolicy})
	if err != nil {
		return 0, err
	}
	nc, err := d.op.Connect(d.srv.ClientURL())
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	if err := d.backlog(ctx, "benchraw.q.req", nc); err != nil {
		return 0, err
	}
	_, err = st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: -1})
	if err != nil {
		return 0, err
	}
	steps := make([]func(*atomic.Int64) error, d.cfg.DrainWorkers)
	for i := range steps {
		wc, err := d.op.Connect(d.srv.ClientURL())
		if err != nil {
			return 0, err
		}
		defer wc.Close()
		wjs, _ := jetstream.New(wc)
		cons, err := wjs.Consumer(ctx, name, "workers")
		if err != nil {
			return 0, err
		}
		steps[i] = func(done *atomic.Int64) error {
			batch, err := cons.FetchNoWait(d.cfg.DrainBatch)
			if err != nil {
				return err
			}
			for m := range batch.Messages() {
				ack := func() error { return m.DoubleAck(ctx) }
				if d.cfg.AckNoWait {
					ack = m.Ack
				}
				if err := ack(); err != nil {
					return err
				}
				done.Add(1)
			}
			return nil
		}
	}
	rate, err := d.drainRate(steps)
	_ = js.DeleteStream(ctx, name)
	return rate, err
}

// drainRate runs each worker's step until cfg.Drain requests are done, all
// workers started at once, and returns requests per second.
func (d *dispatchRun) drainRate(steps []func(done *atomic.Int64) error) (float64, error) {
	var (
		done atomic.Int64
		wg   sync.WaitGroup
	)
	errs := make(chan error, len(steps))
	start := time.Now()
	for _, step := range steps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done.Load() < int64(d.cfg.Drain) {
				if err := step(&done); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	select {
	case err := <-errs:
		return 0, err
	default:
	}
	return float64(d.cfg.Drain) / el.Seconds(), nil
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return round2(a / b)
}

func round2(f float64) float64 { return math.Round(f*100) / 100 }

func textPayload(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'a' + byte(i%26)
	}
	return b
}

// WriteDispatchTable prints the dispatch report for people.
func WriteDispatchTable(w io.Writer, rep *Report) error {
	d := rep.Dispatch
	if d == nil {
		return errors.New("bench: not a dispatch report")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p, t, f, tp := d.Priority, d.Tenants, d.Fairness, d.Throughput
	fmt.Fprintf(tw, "priority isolation\tcritical %d/s alone p99 %.0f µs; with %d/s bulk flood p99 %.0f µs (bulk p99 %.0f µs, %d bulk left queued)\t%.2f× (goal ≤ %.1f×)\n",
		p.CriticalRate, p.Alone.P99, p.BulkRate, p.Flood.P99, p.BulkWait.P99, p.BulkBacklog, p.P99Ratio, p.Goal)
	fmt.Fprintf(tw, "tenant isolation\tB %d/s alone p99 %.0f µs; with A at %d/s p99 %.0f µs (A p99 %.0f µs)\t%.2f× (goal ≤ %.1f×)\n",
		t.BRate, t.Alone.P99, t.ARate, t.WithA.P99, t.AWait.P99, t.P99Ratio, t.Goal)
	fmt.Fprintf(tw, "token fairness\t%d requests: A %d tokens (%d each), B %d tokens (%d each); max gap %d of VTC bound %d\t%.2f of bound\n",
		f.Requests, f.TokensA, f.SizeA, f.TokensB, f.SizeB, f.MaxGap, f.Bound, f.GapOfBound)
	fmt.Fprintf(tw, "throughput\tdispatcher %.0f msg/s vs raw JetStream pull %.0f msg/s (%d workers, batch %d, %s acks; rounds %v)\t%.2f× (goal ≥ %.1f×)\n",
		tp.Semaq, tp.Raw, tp.Workers, tp.Batch, tp.Acks, tp.Rounds, tp.Ratio, tp.Goal)
	return tw.Flush()
}
