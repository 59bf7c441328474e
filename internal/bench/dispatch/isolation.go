package dispatch

import (
	"context"
	"os"
	"strconv"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/bench"
	"github.com/semaq/semaq/internal/bench/measure"
	"github.com/semaq/semaq/semaq"
)

// The paced phases: priority isolation (critical requests alone, then
// beside a bulk flood) and tenant isolation (B alone, then beside A).

// phaseResult is what a paced phase measured.
type phaseResult struct {
	waits   *waits
	procs   []bench.ProcessCPU
	backlog int // requests still queued when the phase ended
}

// phase runs workers and paced loads on a fresh queue for cfg.Duration, in
// this process or in child processes.
func (d *dispatchRun) phase(ctx context.Context, name, key string, loads []loadSpec) (*phaseResult, error) {
	admin, err := d.queue(ctx, name)
	if err != nil {
		return nil, err
	}
	spec := phaseSpec{Queue: name, Subject: "bench." + name + ".req", Key: key, Workers: d.cfg.Workers,
		Service: d.cfg.Service, Duration: d.cfg.Duration, Size: d.cfg.Size, Loads: loads, AckNoWait: d.cfg.WorkerAckNoWait}
	run := d.inProcPhase
	if d.cfg.Processes {
		run = d.procPhase
	}
	res, err := run(ctx, spec)
	if err != nil {
		return nil, err
	}
	qi, err := admin.QueueInfo(ctx, name)
	if err != nil {
		return nil, err
	}
	res.backlog = qi.Status.Queued
	_ = admin.DeleteQueue(ctx, name)
	return res, nil
}

// inProcPhase runs the phase's workers and loads as goroutines of this
// process, beside the broker.
func (d *dispatchRun) inProcPhase(ctx context.Context, spec phaseSpec) (*phaseResult, error) {
	workers := make([]*client.Client, spec.Workers)
	for i := range workers {
		c, err := d.connect(ctx, "bench-worker-"+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		workers[i] = c
	}
	nc, err := d.natsConnect("bench-publisher")
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	res := &phaseResult{waits: newWaits()}
	pctx, cancel := context.WithTimeout(ctx, spec.Duration)
	defer cancel()
	cpu0, measured := measure.CPUTime()
	t0 := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		serve(pctx, workers, spec, res.waits)
	}()
	_, err = generate(pctx, nc, spec.Subject, d.data, spec.Loads)
	cancel()
	<-done // the workers stop with pctx
	if err != nil {
		return nil, err
	}
	cpu1, ok := measure.CPUTime()
	res.procs = []bench.ProcessCPU{processCPUOf("bench (broker, generator, workers)", os.Getpid(), cpu1-cpu0, time.Since(t0), ok && measured, "")}
	return res, nil
}

func (d *dispatchRun) priority(ctx context.Context, rep *bench.DispatchReport) error {
	c := d.cfg
	crit := loadSpec{Name: "critical", Rate: c.CriticalRate, Priority: semaq.PriorityCritical.String(), Tokens: 100}
	alone, err := d.phase(ctx, "PRIO_ALONE", semaq.HdrPriority, []loadSpec{crit})
	if err != nil {
		return err
	}
	aloneW, _, aloneE2E := alone.waits.summary(crit.Priority)
	bulk := loadSpec{Name: "bulk", Rate: c.CriticalRate * c.FloodFactor, Priority: semaq.PriorityBulk.String(), Tokens: 100}
	flood, err := d.phase(ctx, "PRIO_FLOOD", semaq.HdrPriority, []loadSpec{crit, bulk})
	if err != nil {
		return err
	}
	floodW, n, floodE2E := flood.waits.summary(crit.Priority)
	bw, nb, _ := flood.waits.summary(bulk.Priority)
	service := micros(c.Service)
	rep.Priority = bench.PriorityIsolation{
		CriticalRate: c.CriticalRate, BulkRate: bulk.Rate, Alone: aloneW, Flood: floodW, BulkWait: bw,
		BulkBacklog: flood.backlog, P99Ratio: measure.Ratio(floodW.P99, aloneW.P99), CriticalCount: n,
		ServiceUS: service, ExtraUS: measure.Round1(floodW.P99 - aloneW.P99 - service), ExtraGoalUS: micros(GoalCriticalFloodExtra),
		AloneE2E: aloneE2E, FloodE2E: floodE2E, ExtraE2EUS: measure.Round1(floodE2E.P99 - aloneE2E.P99 - service),
		FloodServedPerS: measure.Round1(float64(n+nb) / c.Duration.Seconds()),
		FloodService:    flood.waits.turnSummary(turnService), AloneAck: alone.waits.turnSummary(turnAck),
		FloodAck: flood.waits.turnSummary(turnAck), FloodFetch: flood.waits.turnSummary(turnFetch),
		AloneCPU: alone.procs, FloodCPU: flood.procs,
	}
	return nil
}

func (d *dispatchRun) tenants(ctx context.Context, rep *bench.DispatchReport) error {
	c := d.cfg
	b := loadSpec{Name: "B", Rate: c.TenantRate, Tenant: "B", Tokens: 100}
	alone, err := d.phase(ctx, "TENANT_ALONE", semaq.HdrTenant, []loadSpec{b})
	if err != nil {
		return err
	}
	aloneW, _, aloneE2E := alone.waits.summary("B")
	a := loadSpec{Name: "A", Rate: c.TenantRate * c.TenantFactor, Tenant: "A", Tokens: 100}
	shared, err := d.phase(ctx, "TENANT_SHARED", semaq.HdrTenant, []loadSpec{b, a})
	if err != nil {
		return err
	}
	withA, nb, withAE2E := shared.waits.summary("B")
	aw, na, _ := shared.waits.summary("A")
	service := micros(c.Service)
	var capacity float64
	if c.Service > 0 {
		capacity = measure.Round1(float64(c.Workers) / c.Service.Seconds())
	}
	rep.Tenants = bench.TenantIsolation{BRate: b.Rate, ARate: a.Rate, Alone: aloneW, WithA: withA, AWait: aw,
		P99Ratio: measure.Ratio(withA.P99, aloneW.P99), Goal: GoalTenantIsolationRatio,
		ServiceUS: service, ExtraUS: measure.Round1(withA.P99 - aloneW.P99 - service),
		OfferedPerS: a.Rate + b.Rate, CapacityPerS: capacity, ServedPerS: measure.Round1(float64(na+nb) / c.Duration.Seconds()),
		AloneE2E: aloneE2E, WithAE2E: withAE2E, E2ERatio: measure.Ratio(withAE2E.P99, aloneE2E.P99),
		AloneCPU: alone.procs, WithACPU: shared.procs}
	return nil
}

func micros(d time.Duration) float64 { return measure.Micros(int64(d)) }
