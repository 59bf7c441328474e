// Package dispatch is `semaq bench dispatch`: SemaQ's work-queue
// dispatcher measured on an embedded broker, in four phases. Priority
// isolation (critical requests' queue wait alone, then beside a bulk flood)
// and tenant isolation (tenant B alone, then beside a tenant A offering
// many times B's load) are paced phases: load generators publish at fixed
// rates while workers serve one request at a time for a simulated service
// time (isolation.go, load.go). Token fairness backlogs two tenants and
// checks the tokens served against VTC's bound; throughput drains a backlog
// through the dispatcher and through a raw JetStream pull consumer on the
// same broker (drain.go).
//
// The paced phases run in this process or, in the processes mode, as
// child processes: the bench binary run again with the hidden command
// ChildCommand, one process per load and one for the workers, the broker
// staying in the parent (procs.go the parent's side, child.go the
// children's, place_linux.go CPU pinning and nice).
//
// The outcome is a bench.Report whose Dispatch field holds the figures;
// their types live in package bench beside the report, and this package
// imports bench, never the reverse.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/bench"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/operator"
	"github.com/semaq/semaq/semaq"
)

// Goals of the dispatch scenario (docs/benchmarks/dispatch.md).
const (
	// GoalCriticalFloodExtra: critical p99 queue wait under the flood may
	// exceed alone p99 by one service time (workers are not preempted: a
	// request that finds them all busy waits for one to finish) and at most
	// this much more.
	GoalCriticalFloodExtra = 2 * time.Millisecond
	// GoalTenantIsolationRatio: tenant B's p99 wait while A offers 10× B's
	// load, over B alone.
	GoalTenantIsolationRatio = 1.5
	// GoalThroughputRatio: dispatch throughput over a raw JetStream pull
	// consumer's.
	GoalThroughputRatio = 0.7
)

// Config configures `semaq bench dispatch`.
type Config struct {
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
	// WorkerAckNoWait: the paced phases' workers answer with
	// Job.AckNoWait and fetch the next job at once, rather than wait for
	// Job.Ack's confirmation: one round trip less between two jobs.
	WorkerAckNoWait bool
	// Processes runs the paced phases' load generators and workers as
	// child processes (the bench binary again, ChildCommand), the broker
	// staying in this one.
	Processes bool
	// Pin (with Processes, Linux, two CPUs or more) pins the broker to
	// the first CPU this process may use and the children to the others.
	Pin bool
	// Nice (with Processes) is the nice value of the load generators, so
	// the clients offering load yield the CPU to the broker and workers.
	Nice int
	// onChildren, in tests, is given the pids of each processes-mode
	// phase's children once they are ready.
	onChildren func(pids []int)
	Progress   func(format string, args ...any)
}

// DefaultConfig is what `semaq bench dispatch` runs without flags.
func DefaultConfig() Config {
	return Config{
		Duration: 3 * time.Second, Workers: 4, Service: 2 * time.Millisecond,
		CriticalRate: 50, FloodFactor: 100, TenantRate: 200, TenantFactor: 10,
		Drain: 50000, DrainWorkers: 4, DrainBatch: 64, Rounds: 5, Size: 512,
	}
}

// Validate reports the first invalid field.
func (c *Config) Validate() error {
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
	case (c.Pin || c.Nice != 0) && !c.Processes:
		return errors.New("pin and nice need the processes mode (--processes)")
	case c.Nice < -20 || c.Nice > 19:
		return fmt.Errorf("nice %d is outside -20..19", c.Nice)
	}
	return nil
}

// Run runs the dispatch scenario on an embedded broker.
func Run(ctx context.Context, cfg Config) (*bench.Report, error) {
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
	srv, op, err := startDispatchBroker(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	defer srv.Shutdown(context.Background())
	d := &dispatchRun{cfg: cfg, srv: srv, op: op, data: textPayload(cfg.Size), onChildren: cfg.onChildren}
	defer d.closeClients()
	rep := &bench.DispatchReport{Mode: bench.DispatchInProcess, WorkerAcks: "confirmed"}
	if cfg.WorkerAckNoWait {
		rep.WorkerAcks = "nowait"
	}
	if cfg.Processes {
		rep.Mode = bench.DispatchProcesses
	}
	steps := []struct {
		name string
		fn   func(context.Context, *bench.DispatchReport) error
	}{
		{"priority isolation", d.priority},
		{"tenant isolation", d.tenants},
		{"token fairness", d.fairness},
		{"throughput", d.throughput},
	}
	for i, st := range steps {
		if i == 0 && cfg.Pin {
			restore := d.pin()
			defer restore() // on failure; after the paced phases otherwise
		}
		if i == 2 && d.unpin != nil {
			// The throughput and fairness phases run in this process
			// alone: it gets every CPU back.
			d.unpin()
		}
		cfg.Progress("dispatch: %s", st.name)
		if err := st.fn(ctx, rep); err != nil {
			return nil, fmt.Errorf("bench: dispatch %s: %w", st.name, err)
		}
	}
	tp := rep.Throughput
	return &bench.Report{
		Scenario: "dispatch",
		Config: bench.ReportConfig{
			Targets: []string{bench.TargetSemaqDispatch, bench.TargetJetStreamPull}, Duration: cfg.Duration.String(),
			Size: cfg.Size, Sync: broker.SyncInterval, Rounds: cfg.Rounds,
			Setup: []bench.TargetSetup{
				{Target: bench.TargetSemaqDispatch, Server: bench.ServerBroker, Stream: "BENCH_Q", Durability: bench.DurabilityInterval},
				{Target: bench.TargetJetStreamPull, Server: bench.ServerBroker, Stream: "BENCH_RAWQ", Durability: bench.DurabilityInterval},
			},
			GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, CPUs: runtime.NumCPU(),
			GOMAXPROCS: runtime.GOMAXPROCS(0), NATSServer: server.VERSION, SemaQ: broker.Version,
		},
		Results: []bench.Result{
			{Target: bench.TargetSemaqDispatch, ThroughputMsgsPerS: math.Round(tp.Semaq), Msgs: int64(cfg.Drain * cfg.Rounds)},
			{Target: bench.TargetJetStreamPull, ThroughputMsgsPerS: math.Round(tp.Raw), Msgs: int64(cfg.Drain * cfg.Rounds)},
		},
		Dispatch: rep,
	}, nil
}

// startDispatchBroker starts the broker the scenario runs on, with an
// operator login for the raw baseline.
func startDispatchBroker(ctx context.Context, dir string) (*broker.Server, *operator.Operator, error) {
	bc := broker.DefaultConfig()
	bc.DataDir = filepath.Join(dir, "semaq")
	bc.Listen = "127.0.0.1:0"
	bc.HTTP = ""
	bc.Sync = broker.SyncInterval
	bc.LogLevel = "error"
	op, err := operator.New()
	if err != nil {
		return nil, nil, err
	}
	srv, err := broker.New(bc, nil, op.Option())
	if err != nil {
		return nil, nil, err
	}
	if err := srv.Start(ctx); err != nil {
		return nil, nil, err
	}
	return srv, op, nil
}

type dispatchRun struct {
	cfg     Config
	srv     *broker.Server
	op      *operator.Operator // the raw baseline's login on srv
	data    []byte
	mu      sync.Mutex
	clients []*client.Client
	// With cfg.Pin: the children's CPUs, what was applied to this
	// process, and how to give it its CPUs back (nil once done).
	childCPUs       []int
	brokerPlacement string
	unpin           func()
	// onChildren, in tests, learns the pids of a phase's children once
	// they are ready.
	onChildren func(pids []int)
}

// pin pins this process (the broker) to its first allowed CPU and has the
// children pinned to the others, best effort: what was applied, or why
// not, goes into the report. It returns the undoing of its own pinning.
func (d *dispatchRun) pin() func() {
	cpus, err := allowedCPUs()
	switch {
	case err != nil:
		d.brokerPlacement = "not pinned: " + err.Error()
		return func() {}
	case len(cpus) < 2:
		d.brokerPlacement = fmt.Sprintf("not pinned: %d CPU", len(cpus))
		return func() {}
	}
	d.childCPUs = cpus[1:]
	d.brokerPlacement = placementNote(cpus[:1], 0, place(cpus[:1], 0))
	d.unpin = func() {
		_ = place(cpus, 0)
		d.unpin = nil
	}
	return func() {
		if d.unpin != nil {
			d.unpin()
		}
	}
}

func (d *dispatchRun) natsConnect(name string) (*nats.Conn, error) {
	return nats.Connect(d.srv.ClientURL(), nats.Name(name))
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
