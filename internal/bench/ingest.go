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
)

// ScenarioIngest names the ingest scenario in reports.
const ScenarioIngest = "ingest"

// maxConsecutiveErrors ends a latency slice whose every publish fails,
// rather than spinning until the slice's end.
const maxConsecutiveErrors = 1000

// run is the state of one target during a run.
type run struct {
	t    *target
	pubs []*publisher // pubs[0] also does the latency phase

	acked   int64         // throughput phase
	elapsed time.Duration // throughput phase, drain included
	rounds  []float64     // msgs/s of each throughput slice
	lat     *histogram
}

// RunIngest runs the ingest scenario and returns its report.
//
// Every target gets an unmeasured warm-up, then the throughput phase
// (asynchronous publishes, at most cfg.Window unacknowledged per publisher,
// only acknowledged messages counted, the wait for the last acks included
// in the time), then the latency phase (one publisher, sequential
// synchronous publishes, each timed). Each phase is cut into cfg.Rounds
// slices per target, run in alternating target order, so neither target
// always runs first or on a store the other has just warmed.
//
// RunIngest blocks for about 2 × len(cfg.Targets) × (cfg.Duration +
// cfg.Warmup/2); cancelling ctx stops it early with ctx's error.
func RunIngest(ctx context.Context, cfg IngestConfig) (_ *Report, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dir := cfg.DataDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "semaq-bench-"); err != nil {
			return nil, fmt.Errorf("bench: data directory: %w", err)
		}
		defer os.RemoveAll(dir)
	} else if err := checkEmptyDir(dir); err != nil {
		return nil, err
	}
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", args...)
		}
	}

	progress("starting broker (data %s, sync %s)", dir, cfg.Sync)
	r, err := startRig(ctx, dir, cfg.Sync)
	if err != nil {
		return nil, err
	}
	defer r.close()

	runs := make([]*run, 0, len(cfg.Targets))
	defer func() {
		for _, rn := range runs {
			for _, p := range rn.pubs {
				p.close()
			}
		}
	}()
	for _, name := range cfg.Targets {
		rn := &run{t: targets[name], lat: newHistogram()}
		runs = append(runs, rn)
		for range cfg.Publishers {
			p, err := r.publisher(rn.t, cfg.Size, cfg.TraceParent, cfg.Window)
			if err != nil {
				return nil, err
			}
			rn.pubs = append(rn.pubs, p)
		}
	}

	if cfg.Warmup > 0 {
		for _, rn := range runs {
			progress("warming up %s (%s)", rn.t.name, cfg.Warmup)
			if _, _, err := throughputSlice(ctx, rn.pubs, cfg.Warmup/2); err != nil {
				return nil, fmt.Errorf("bench: %s: warm-up: %w", rn.t.name, err)
			}
			if err := latencySlice(ctx, rn.pubs[0], cfg.Warmup/2, newHistogram()); err != nil {
				return nil, fmt.Errorf("bench: %s: warm-up: %w", rn.t.name, err)
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
			progress("throughput %s: round %d/%d, %s, window %d, %d publisher(s)", rn.t.name, round+1, cfg.Rounds, slice, cfg.Window, cfg.Publishers)
			acked, elapsed, err := throughputSlice(ctx, rn.pubs, slice)
			if err != nil {
				return nil, fmt.Errorf("bench: %s: throughput: %w", rn.t.name, err)
			}
			rn.acked += acked
			rn.elapsed += elapsed
			rn.rounds = append(rn.rounds, round1(float64(acked)/elapsed.Seconds()))
		}
	}
	for round := range cfg.Rounds {
		for _, rn := range inOrder(runs, round) {
			progress("latency %s: round %d/%d, %s", rn.t.name, round+1, cfg.Rounds, slice)
			if err := latencySlice(ctx, rn.pubs[0], slice, rn.lat); err != nil {
				return nil, fmt.Errorf("bench: %s: latency: %w", rn.t.name, err)
			}
		}
	}

	rep := &Report{Scenario: ScenarioIngest, Config: reportConfig(&cfg)}
	for i, rn := range runs {
		res := Result{
			Target:         rn.t.name,
			Msgs:           rn.acked,
			ByRound:        rn.rounds,
			LatencySamples: rn.lat.count(),
			Latency:        rn.lat.summary(),
		}
		for _, p := range rn.pubs {
			res.Errors += p.failed.Load()
			if err := p.err(); err != nil && res.FirstError == "" {
				res.FirstError = err.Error()
			}
		}
		res.Errors -= failedBefore[i]
		if rn.acked == 0 {
			return nil, fmt.Errorf("%w by target %s in the throughput phase (%d errors, first: %s)", ErrNoAcks, rn.t.name, res.Errors, res.FirstError)
		}
		if res.LatencySamples == 0 {
			return nil, fmt.Errorf("%w by target %s in the latency phase (%d errors, first: %s)", ErrNoAcks, rn.t.name, res.Errors, res.FirstError)
		}
		secs := rn.elapsed.Seconds()
		res.ThroughputMsgsPerS = round1(float64(rn.acked) / secs)
		res.ThroughputMBPerS = round1(float64(rn.acked) * float64(cfg.Size) / secs / 1e6)
		rep.Results = append(rep.Results, res)
	}
	rep.compare()
	return rep, nil
}

// checkEmptyDir accepts a directory that is empty or does not exist yet:
// every run starts from a clean store.
func checkEmptyDir(dir string) error {
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
func latencySlice(ctx context.Context, p *publisher, d time.Duration, h *histogram) error {
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
		h.record(elapsed)
	}
}
