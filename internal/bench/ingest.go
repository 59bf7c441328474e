package bench

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/semaq/semaq/internal/bench/measure"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/semaq"
)

// ScenarioIngest names the ingest scenario in reports.
const ScenarioIngest = "ingest"

// maxConsecutiveErrors ends a latency slice whose every publish fails,
// rather than spinning until the slice's end.
const maxConsecutiveErrors = 1000

// run is the state of one target during a run.
type run struct {
	t    *Target
	pubs []*publisher // pubs[0] also does the latency phase

	acked   int64         // throughput phase
	elapsed time.Duration // throughput phase, drain included
	rounds  []float64     // msgs/s of each throughput slice
	commits commitCounts  // group commits of the throughput phase
	cpu     time.Duration // process CPU of the throughput phase; -1: not measured
	lat     *measure.Histogram

	pacer  *pacer
	paced  []*pacedRun // one per rate
	reader *e2eReader  // with cfg.E2E, during the paced phase
}

// pacedRun is one target at one offered rate, all rounds added up.
type pacedRun struct {
	rate    int
	lat     *measure.Histogram
	counts  pacedCounts
	commits commitCounts
	e2e     *e2eRun       // with cfg.E2E
	cpu     time.Duration // process CPU of the rate's slices; -1: not measured
}

// e2eRun is the end-to-end measure of one target at one rate.
type e2eRun struct {
	h      *e2eHists
	counts e2eCounts
}

// RunIngest runs the ingest scenario and returns its report.
//
// Every target gets an unmeasured warm-up, then the throughput phase
// (asynchronous publishes, at most cfg.Window unacknowledged per publisher,
// only acknowledged messages counted, the wait for the last acks included
// in the time), then the latency phase (one publisher, sequential
// synchronous publishes, each timed), then for each of cfg.Rates the paced
// phase (one publisher offering that rate open loop, each ack timed). Each
// phase is cut into cfg.Rounds slices per target, run in alternating target
// order, so neither target always runs first or on a store the other has
// just warmed.
//
// With cfg.Schema, the payload is checked against the schema before
// anything starts (a mismatch is ErrBadConfig), validating it is timed in
// process for up to a second (Report.Validation), the SemaQ stream is
// created bound to the schema, and at the end its last message must carry
// the schema's id, which only the ingress's validation sets.
//
// RunIngest blocks for about (2 + len(cfg.Rates)) × len(cfg.Targets) ×
// cfg.Duration plus the warm-up; cancelling ctx stops it early with ctx's
// error.
func RunIngest(ctx context.Context, cfg IngestConfig) (_ *Report, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pl, err := preparePayload(&cfg)
	if err != nil {
		return nil, err
	}
	dir := cfg.DataDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "semaq-bench-"); err != nil {
			return nil, fmt.Errorf("bench: data directory: %w", err)
		}
		defer os.RemoveAll(dir)
	} else if err := CheckEmptyDir(dir); err != nil {
		return nil, err
	}
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", args...)
		}
	}

	var validation *Validation
	if pl.compiled != nil {
		d := min(maxValidationTime, cfg.Duration)
		progress("timing %s validation of the %d-byte payload in process (%s)", cfg.Schema.Type, pl.size(), d)
		if validation, err = measureValidation(pl.compiled, pl.body, d); err != nil {
			return nil, fmt.Errorf("bench: timing validation: %w", err)
		}
	}

	progress("starting broker (data %s, sync %s)", dir, cfg.Sync)
	r, err := StartRig(ctx, dir, cfg.Sync, cfg.Schema, broker.WithIngressShards(cfg.IngressShards), broker.WithIngressTransport(cfg.IngressTransport))
	if err != nil {
		return nil, err
	}
	defer r.Close()
	if cfg.Policy != nil {
		progress("adding policy %s on %s", cfg.Policy.Name, semaqSubjects)
		if err := addPolicy(ctx, r, *cfg.Policy); err != nil {
			return nil, err
		}
		if cfg.Schema == nil && slices.Contains(cfg.Targets, TargetSemaqNoSchema) {
			if err := createPlainStream(ctx, r, durabilityOf(cfg.Sync)); err != nil {
				return nil, err
			}
		}
	}
	if cfg.Routes > 0 {
		progress("adding %d route rules per SemaQ target", cfg.Routes)
		if err := addRoutes(ctx, r, cfg.Routes, cfg.Targets); err != nil {
			return nil, err
		}
	}
	data := pl.data(r.schemaID)

	runs := make([]*run, 0, len(cfg.Targets))
	defer func() {
		for _, rn := range runs {
			for _, p := range rn.pubs {
				p.close()
			}
		}
	}()
	if slices.Contains(cfg.Targets, TargetSemaqInterval) || slices.Contains(cfg.Targets, TargetJetStreamInterval) {
		if err := createCeilingStreams(ctx, r); err != nil {
			return nil, err
		}
	}
	if slices.Contains(cfg.Targets, TargetJetStreamRelay) {
		progress("starting the relay of %s (%s)", TargetJetStreamRelay, r.Broker.IngressTransport())
		if err := r.startRelay(ctx); err != nil {
			return nil, err
		}
	}
	setup, err := r.Setup(ctx, cfg.Targets)
	if err != nil {
		return nil, err
	}
	for _, name := range cfg.Targets {
		rn := &run{t: Targets[name], lat: measure.NewHistogram()}
		runs = append(runs, rn)
		for range cfg.Publishers {
			p, err := r.publisher(rn.t, data, cfg.TraceParent, cfg.Window)
			if err != nil {
				return nil, err
			}
			rn.pubs = append(rn.pubs, p)
		}
	}

	if cfg.Warmup > 0 {
		for _, rn := range runs {
			progress("warming up %s (%s)", rn.t.Name, cfg.Warmup)
			if _, _, err := throughputSlice(ctx, rn.pubs, cfg.Warmup/2); err != nil {
				return nil, fmt.Errorf("bench: %s: warm-up: %w", rn.t.Name, err)
			}
			if err := latencySlice(ctx, rn.pubs[0], cfg.Warmup/2, measure.NewHistogram()); err != nil {
				return nil, fmt.Errorf("bench: %s: warm-up: %w", rn.t.Name, err)
			}
		}
	}
	// Failures of the warm-up are not the measurement's.
	failedBefore := make([]int64, len(runs))
	for i, rn := range runs {
		for _, p := range rn.pubs {
			failedBefore[i] += p.failed.Load()
		}
	}

	slice := cfg.Duration / time.Duration(cfg.Rounds)
	for round := range cfg.Rounds {
		for _, rn := range inOrder(runs, round) {
			progress("throughput %s: round %d/%d, %s, window %d, %d publisher(s)", rn.t.Name, round+1, cfg.Rounds, slice, cfg.Window, cfg.Publishers)
			before, err := r.commitCounts(ctx, rn.t)
			if err != nil {
				return nil, err
			}
			cpuBefore, cpuOK := measure.CPUTime()
			acked, elapsed, err := throughputSlice(ctx, rn.pubs, slice)
			if err != nil {
				return nil, fmt.Errorf("bench: %s: throughput: %w", rn.t.Name, err)
			}
			if cpuAfter, ok := measure.CPUTime(); ok && cpuOK && rn.cpu >= 0 {
				rn.cpu += cpuAfter - cpuBefore
			} else {
				rn.cpu = -1
			}
			after, err := r.commitCounts(ctx, rn.t)
			if err != nil {
				return nil, err
			}
			rn.commits.add(after.sub(before))
			rn.acked += acked
			rn.elapsed += elapsed
			rn.rounds = append(rn.rounds, measure.Round1(float64(acked)/elapsed.Seconds()))
		}
	}
	for round := range cfg.Rounds {
		for _, rn := range inOrder(runs, round) {
			progress("latency %s: round %d/%d, %s", rn.t.Name, round+1, cfg.Rounds, slice)
			if err := latencySlice(ctx, rn.pubs[0], slice, rn.lat); err != nil {
				return nil, fmt.Errorf("bench: %s: latency: %w", rn.t.Name, err)
			}
		}
	}

	if err := pacedPhase(ctx, r, runs, &cfg, progress); err != nil {
		return nil, err
	}
	if r.schemaID > 0 && slices.Contains(cfg.Targets, TargetSemaq) {
		if err := r.checkEnforced(ctx); err != nil {
			return nil, err
		}
	}

	rep := &Report{Scenario: ScenarioIngest, Config: reportConfig(&cfg, setup, pl, r.schemaID), Validation: validation}
	for i, rn := range runs {
		res := Result{
			Target:         rn.t.Name,
			Msgs:           rn.acked,
			ByRound:        rn.rounds,
			LatencySamples: rn.lat.Count(),
			Latency:        rn.lat.Summary(),
		}
		for _, p := range rn.pubs {
			res.Errors += p.failed.Load()
			if err := p.err(); err != nil && res.FirstError == "" {
				res.FirstError = err.Error()
			}
		}
		res.Errors -= failedBefore[i]
		if rn.acked == 0 {
			return nil, fmt.Errorf("%w by target %s in the throughput phase (%d errors, first: %s)", ErrNoAcks, rn.t.Name, res.Errors, res.FirstError)
		}
		if res.LatencySamples == 0 {
			return nil, fmt.Errorf("%w by target %s in the latency phase (%d errors, first: %s)", ErrNoAcks, rn.t.Name, res.Errors, res.FirstError)
		}
		secs := rn.elapsed.Seconds()
		res.ThroughputMsgsPerS = measure.Round1(float64(rn.acked) / secs)
		res.ThroughputMBPerS = measure.Round1(float64(rn.acked) * float64(len(data)) / secs / 1e6)
		res.ThroughputAcksPerFsync = rn.commits.perFsync()
		if rn.cpu > 0 {
			res.ThroughputCPUCores = measure.Round1(rn.cpu.Seconds()/secs*10) / 10
			res.ThroughputCPUPerMsgUS = measure.Round1(float64(rn.cpu.Microseconds()) / float64(rn.acked))
		}
		for _, pr := range rn.paced {
			if pr.counts.acked == 0 {
				return nil, fmt.Errorf("%w by target %s in the paced phase at %d msgs/s (%d skipped, %d failed, first: %v)",
					ErrNoAcks, rn.t.Name, pr.rate, pr.counts.skipped, pr.counts.failed, pr.counts.firstErr)
			}
			if pr.e2e != nil && pr.e2e.counts.received == 0 {
				return nil, fmt.Errorf("%w by target %s's consumer at %d msgs/s (%d acknowledged)", ErrNothingReceived, rn.t.Name, pr.rate, pr.counts.acked)
			}
			res.Paced = append(res.Paced, pr.result())
		}
		if res.GroupCommit, err = r.GroupCommit(ctx, rn.t); err != nil {
			return nil, err
		}
		rep.Results = append(rep.Results, res)
	}
	rep.compare()
	return rep, nil
}

// pacedPhase offers every target each rate of cfg.Rates in turn, in
// cfg.Rounds slices per target in alternating order. With cfg.E2E each
// target's consumer times the slice's messages to their receipt, and a
// slice ends once it has received every acknowledged message, or at most
// the drain bound after the acks.
func pacedPhase(ctx context.Context, r *Rig, runs []*run, cfg *IngestConfig, progress func(string, ...any)) error {
	if len(cfg.Rates) == 0 {
		return nil
	}
	epoch := time.Now()
	defer func() {
		for _, rn := range runs {
			if rn.reader != nil {
				rn.reader.close()
				rn.reader = nil
			}
		}
	}()
	for _, rn := range runs {
		pc, err := newPacer(rn.pubs[0], cfg.Window)
		if err != nil {
			return err
		}
		pc.stamp, pc.epoch = cfg.E2E, epoch
		rn.pacer = pc
		if cfg.E2E {
			if rn.reader, err = newE2EReader(ctx, r, rn.t, epoch); err != nil {
				return err
			}
		}
		for _, rate := range cfg.Rates {
			pr := &pacedRun{rate: rate, lat: measure.NewHistogram()}
			if cfg.E2E {
				pr.e2e = &e2eRun{h: newE2EHists()}
			}
			rn.paced = append(rn.paced, pr)
		}
	}
	slice := cfg.Duration / time.Duration(cfg.Rounds)
	for i, rate := range cfg.Rates {
		for round := range cfg.Rounds {
			for _, rn := range inOrder(runs, round) {
				progress("paced %s: %d msgs/s, round %d/%d, %s, at most %d in flight", rn.t.Name, rate, round+1, cfg.Rounds, slice, cfg.Window)
				pr := rn.paced[i]
				before, err := r.commitCounts(ctx, rn.t)
				if err != nil {
					return err
				}
				cpuBefore, cpuOK := measure.CPUTime()
				if rn.reader != nil {
					rn.reader.begin(pr.e2e.h)
				}
				c, err := rn.pacer.run(ctx, rate, slice, pr.lat)
				if err != nil {
					return fmt.Errorf("bench: %s: paced at %d msgs/s: %w", rn.t.Name, rate, err)
				}
				if rn.reader != nil {
					ec, err := rn.reader.end(ctx, c.acked, slice, rn.pacer.drain)
					if err != nil {
						return fmt.Errorf("bench: %s: paced at %d msgs/s: %w", rn.t.Name, rate, err)
					}
					pr.e2e.counts.add(ec)
				}
				if cpuAfter, ok := measure.CPUTime(); ok && cpuOK && pr.cpu >= 0 {
					pr.cpu += cpuAfter - cpuBefore
				} else {
					pr.cpu = -1
				}
				after, err := r.commitCounts(ctx, rn.t)
				if err != nil {
					return err
				}
				pr.counts.add(c)
				pr.commits.add(after.sub(before))
			}
		}
	}
	return nil
}

// result summarises a target at one rate.
func (pr *pacedRun) result() PacedResult {
	c := &pr.counts
	res := PacedResult{
		Rate:         pr.rate,
		Latency:      pr.lat.Summary(),
		Offered:      c.offered,
		Sent:         c.sent,
		Acked:        c.acked,
		Skipped:      c.skipped,
		Late:         c.late,
		Unacked:      c.unacked,
		Errors:       c.failed,
		AcksPerFsync: pr.commits.perFsync(),
		Fsyncs:       pr.commits.batches,
	}
	if c.elapsed > 0 {
		res.AchievedMsgsPerS = measure.Round1(float64(c.acked) / c.elapsed.Seconds())
	}
	if c.firstErr != nil {
		res.FirstError = c.firstErr.Error()
	}
	if pr.cpu > 0 && c.sent > 0 {
		res.CPUPerMsgUS = measure.Round1(float64(pr.cpu.Microseconds()) / float64(c.sent))
	}
	lost := c.skipped + c.unacked + c.failed
	res.Sustained = float64(lost) <= sustainedLoss*float64(c.offered)
	if e := pr.e2e; e != nil {
		res.E2E = e.result(c)
	}
	return res
}

// result summarises the end-to-end measure of a rate whose publishes did
// c.
func (e *e2eRun) result(c *pacedCounts) *E2EResult {
	res := &E2EResult{
		Latency: e.h.lat.Summary(),
		Parts: E2EParts{
			PublishToIngress: e.h.toIngress.Summary(),
			PublishToStore:   e.h.toStore.Summary(),
			StoreToReceipt:   e.h.toReceipt.Summary(),
		},
		Received:    e.counts.received,
		Missing:     max(0, c.sent-e.counts.received),
		Redelivered: e.counts.redelivered,
	}
	if e.counts.elapsed > 0 {
		res.ReceivedMsgsPerS = measure.Round1(float64(e.counts.received) / e.counts.elapsed.Seconds())
	}
	lost := c.skipped + c.failed + res.Missing
	res.Sustained = float64(lost) <= sustainedLoss*float64(c.offered)
	return res
}

// commitCounts are the group-commit counters of an fsync stream.
type commitCounts struct{ batches, acks uint64 }

func (c *commitCounts) add(o commitCounts) { c.batches += o.batches; c.acks += o.acks }

func (c commitCounts) sub(o commitCounts) commitCounts {
	return commitCounts{batches: c.batches - o.batches, acks: c.acks - o.acks}
}

// perFsync is the mean number of acks released by one fsync, or 0.
func (c commitCounts) perFsync() float64 {
	if c.batches == 0 {
		return 0
	}
	return measure.Round1(float64(c.acks) / float64(c.batches))
}

// commitCounts reads the group-commit counters of target t's stream: zero
// unless t is a SemaQ fsync stream.
func (r *Rig) commitCounts(ctx context.Context, t *Target) (commitCounts, error) {
	cs, err := r.GroupCommit(ctx, t)
	if err != nil || cs == nil {
		return commitCounts{}, err
	}
	return commitCounts{batches: cs.Batches, acks: cs.Acks}, nil
}

// GroupCommit returns the group-commit figures of target t's stream, as
// `semaq stream info` shows them; nil unless t is a SemaQ fsync stream.
func (r *Rig) GroupCommit(ctx context.Context, t *Target) (*semaq.CommitStats, error) {
	if t.Stream == "" {
		return nil, nil
	}
	info, err := r.admin.StreamInfo(ctx, t.Stream)
	if err != nil {
		return nil, fmt.Errorf("bench: stream %s: %w", t.Stream, err)
	}
	return info.Commit, nil
}

// CheckEmptyDir accepts a directory that is empty or does not exist yet:
// every run starts from a clean store.
func CheckEmptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("bench: data directory: %w", err)
	case len(entries) > 0:
		return fmt.Errorf("bench: data directory %s is not empty; a run starts from a clean store", dir)
	}
	return nil
}

// inOrder is the order of the targets in a round: as given in even rounds,
// reversed in odd ones.
func inOrder(runs []*run, round int) []*run {
	if round%2 == 0 {
		return runs
	}
	rev := slices.Clone(runs)
	slices.Reverse(rev)
	return rev
}

// throughputSlice publishes asynchronously from every publisher for d and
// returns the messages acknowledged and the time until the last ack.
func throughputSlice(ctx context.Context, pubs []*publisher, d time.Duration) (int64, time.Duration, error) {
	before := make([]int64, len(pubs))
	for i, p := range pubs {
		before[i] = p.acked.Load()
	}
	start := time.Now()
	end := start.Add(d)
	errs := make([]error, len(pubs))
	var wg sync.WaitGroup
	for i, p := range pubs {
		wg.Go(func() { errs[i] = p.publishAsync(ctx, end) })
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, 0, err
	}
	var acked int64
	for i, p := range pubs {
		acked += p.acked.Load() - before[i]
	}
	return acked, elapsed, nil
}

// latencySlice publishes synchronously from p for d, recording each
// acknowledged publish in h.
func latencySlice(ctx context.Context, p *publisher, d time.Duration, h *measure.Histogram) error {
	end := time.Now().Add(d)
	consecutive := 0
	for {
		start := time.Now()
		if !start.Before(end) {
			return nil
		}
		err := p.publishSync(ctx)
		elapsed := time.Since(start)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			if consecutive++; consecutive == maxConsecutiveErrors {
				return fmt.Errorf("%d publishes in a row failed, the last with: %w", consecutive, err)
			}
			continue
		}
		consecutive = 0
		h.Record(elapsed)
	}
}
