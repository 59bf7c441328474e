package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/semaq/semaq/internal/bench"
	"github.com/semaq/semaq/internal/bench/measure"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/semaq"
)

// ScenarioConfig is one `semaq bench run`: a scenario and the targets to
// run it against.
type ScenarioConfig struct {
	Scenario *Scenario
	// Targets to measure, each at most once, from ScenarioTargets.
	Targets []string
	// RabbitMQURL is the AMQP URL of the rabbitmq and rabbitmq-quorum
	// targets.
	RabbitMQURL string
	// Short runs the scenario's short form (tests, smoke runs).
	Short bool
	// Duration, when set, replaces the scenario's measured time.
	Duration time.Duration
	// Rounds cuts each target's measured time into this many slices, run
	// in alternating target order (A B C, C B A, ...), so a busy spell of
	// the machine does not land on one target only. 0 means 1.
	Rounds int
	// DataDir is where the embedded brokers keep their files: empty or
	// new, kept afterwards. Empty: a temporary directory, removed.
	DataDir string
	// Progress receives one line per step; with ProgressBar, a bar
	// redrawn in place while a target runs.
	Progress    io.Writer
	ProgressBar bool
}

// Validate reports the first problem with c.
func (c *ScenarioConfig) Validate() error {
	if c.Scenario == nil {
		return fmt.Errorf("%w: scenario: none given", bench.ErrBadConfig)
	}
	if len(c.Targets) == 0 {
		return fmt.Errorf("%w: targets: none given (want one or more of %s)", bench.ErrBadConfig, strings.Join(ScenarioTargets, ", "))
	}
	for i, t := range c.Targets {
		if !slices.Contains(ScenarioTargets, t) {
			return fmt.Errorf("%w: targets: %q is not a target (want %s)", bench.ErrBadConfig, t, strings.Join(ScenarioTargets, ", "))
		}
		if slices.Contains(c.Targets[:i], t) {
			return fmt.Errorf("%w: targets: %q is given twice", bench.ErrBadConfig, t)
		}
	}
	if c.Duration < 0 || c.Duration > bench.MaxDuration {
		return fmt.Errorf("%w: duration: %s is outside (0, %s]", bench.ErrBadConfig, c.Duration, bench.MaxDuration)
	}
	if c.Rounds < 0 || c.Rounds > bench.MaxRounds {
		return fmt.Errorf("%w: rounds: %d is outside 1..%d", bench.ErrBadConfig, c.Rounds, bench.MaxRounds)
	}
	return c.Scenario.Validate()
}

// scenarioDrainTimeout bounds the wait, after publishing stops, for the
// messages still on their way through the stages.
const scenarioDrainTimeout = 15 * time.Second

// RunScenario runs the scenario against each target in turn, on one
// embedded broker (and, for a durable scenario, the raw JetStream server
// with sync_always), and returns the report with its diagnosis. A target
// that cannot be reached (RabbitMQ not running) gets a result saying so
// and why; the others are measured.
func RunScenario(ctx context.Context, cfg ScenarioConfig) (*ScenarioReport, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sc := *cfg.Scenario
	if cfg.Short {
		sc = sc.shortened()
	}
	if cfg.Duration > 0 {
		sc.Duration = cfg.Duration
		sc.Interval = min(sc.Interval, sc.Duration)
	}
	if cfg.RabbitMQURL == "" {
		cfg.RabbitMQURL = DefaultRabbitMQURL
	}
	progress := func(format string, args ...any) {
		if cfg.Progress != nil {
			fmt.Fprintf(cfg.Progress, format+"\n", args...)
		}
	}
	dir := cfg.DataDir
	var err error
	if dir == "" {
		if dir, err = os.MkdirTemp("", "semaq-bench-"); err != nil {
			return nil, fmt.Errorf("bench: data directory: %w", err)
		}
		defer os.RemoveAll(dir)
	} else if err := bench.CheckEmptyDir(dir); err != nil {
		return nil, err
	}
	sync := broker.SyncInterval
	if sc.Durable {
		sync = broker.SyncAlways
	}
	progress("starting broker (data %s, sync %s)", dir, sync)
	r, err := bench.StartRig(ctx, dir, sync, nil)
	if err != nil {
		return nil, err
	}
	defer r.Close()

	rounds := max(cfg.Rounds, 1)
	if sc.Duration/time.Duration(rounds) < sc.Interval {
		return nil, fmt.Errorf("%w: rounds: %d rounds of %s leave less than the series interval (%s) each", bench.ErrBadConfig, rounds, roundDuration(sc.Duration), roundDuration(sc.Interval))
	}
	rep := newScenarioReport(&sc, cfg)
	rep.Config.Rounds = rounds
	runs := map[string]*measurement{}
	gone := map[string]*ScenarioResult{}
	setups := map[string]string{}
	var interrupted error // the run was cut short: what was measured is reported
rounds:
	for round := range rounds {
		order := slices.Clone(cfg.Targets)
		if round%2 == 1 {
			slices.Reverse(order)
		}
		for _, name := range order {
			if gone[name] != nil {
				continue
			}
			slice := sc
			slice.Duration = sc.Duration / time.Duration(rounds)
			if round > 0 {
				// Fresh connections and consumers each round: a short
				// warm-up, not the first one's.
				slice.Warmup = sc.Warmup / 4
			}
			m, setup, err := runScenarioRound(ctx, r, &slice, name, &cfg, progress, round, rounds)
			if errors.Is(err, ErrUnreachable) {
				why := err.Error()
				if ue := (*unreachableError)(nil); errors.As(err, &ue) {
					why = ue.Error() // without the wrapping of a failure mid-run
				}
				progress("%s: %s", name, why)
				gone[name] = &ScenarioResult{Result: bench.Result{Target: name}, Unreachable: why}
				continue
			}
			if err != nil && ctx.Err() != nil && len(runs) > 0 {
				interrupted = fmt.Errorf("bench: interrupted in round %d of %d, at %s: %w", round+1, rounds, name, ctx.Err())
				rep.Interrupted = fmt.Sprintf("interrupted in round %d of %d: the figures are of the rounds that ended", round+1, rounds)
				break rounds
			}
			if err != nil {
				return nil, err
			}
			setups[name] = setup
			if runs[name] == nil {
				runs[name] = m
			} else {
				runs[name].absorb(m)
			}
		}
	}
	for _, name := range cfg.Targets {
		if res := gone[name]; res != nil {
			rep.Results = append(rep.Results, *res)
			continue
		}
		m := runs[name]
		if m == nil { // interrupted before its first round ended
			rep.Results = append(rep.Results, ScenarioResult{Result: bench.Result{Target: name}, Unreachable: "not measured: the run was interrupted"})
			continue
		}
		m.sc = &sc
		res := m.result()
		res.Setup = setups[name]
		rep.Results = append(rep.Results, *res)
	}
	rep.finish()
	return rep, interrupted
}

// runScenarioRound runs one slice of the scenario against target name.
// An unreachable target returns an error matching ErrUnreachable.
func runScenarioRound(ctx context.Context, r *bench.Rig, sc *Scenario, name string, cfg *ScenarioConfig, progress func(string, ...any), round, rounds int) (*measurement, string, error) {
	sys, err := openSystem(r, name, cfg.RabbitMQURL)
	if err != nil {
		return nil, "", err
	}
	defer sys.close()
	if err := sys.setup(ctx, sc); err != nil {
		return nil, "", err
	}
	progress("%s: %s, round %d/%d, %s warm-up + %s", name, sc.Name, round+1, rounds, roundDuration(sc.Warmup), roundDuration(sc.Duration))
	m := newMeasurement(sc, name, r, sys)
	m.round = round
	var bar *progressBar
	if cfg.ProgressBar && cfg.Progress != nil {
		bar = &progressBar{w: cfg.Progress, label: fmt.Sprintf("%s %d/%d", name, round+1, rounds), total: sc.Warmup + sc.Duration}
	}
	run, setup := m.run, sys.describe
	if sc.Pattern == PatternTokens && name == bench.TargetSemaq {
		run, setup = m.runTokenStreams, func() string { return tokenSetup }
	}
	if err := run(ctx, bar); err != nil {
		return nil, "", fmt.Errorf("bench: %s: %s: %w", sc.Name, name, err)
	}
	m.byRound = []float64{measure.Round1(float64(m.inWindow.Load()) / sc.Duration.Seconds())}
	return m, setup(), nil
}

// measurement is one target running one scenario: the workers, the
// publishers, and everything they count.
type measurement struct {
	sc   *Scenario
	name string
	rig  *bench.Rig
	sys  system

	start, measureStart, measureEnd time.Time

	published   atomic.Int64 // acknowledged publishes into stage 0, whole run
	completed   atomic.Int64 // messages through the last stage (answers received), whole run
	inWindow    atomic.Int64 // completions during the measured window
	pubInWindow atomic.Int64 // stage-0 acks during the measured window
	bytesDone   atomic.Int64 // payload bytes of completions in the window
	redelivered atomic.Int64
	outOfOrder  atomic.Int64
	traceBroken atomic.Int64

	mu       sync.Mutex         // guards the histograms, errors and sessions below
	e2e      *measure.Histogram // origin → completion, messages sent in the window
	interval *measure.Histogram // the same, for the current series point
	ackLat   *measure.Histogram // publish → ack of stage-0 publishes in the window
	handling *measure.Histogram // delivery → ack at a worker
	errKinds map[string]int64
	firstErr string
	lastSeq  map[string]int64 // session → last sequence completed

	series  []Point
	round   int       // of the series points
	byRound []float64 // completions per second of each round
	gc0     gcSample
	gcStats GCStats // of the measured window, set when it ends
	fsync0  *semaq.CommitStats
}

func newMeasurement(sc *Scenario, name string, r *bench.Rig, sys system) *measurement {
	return &measurement{
		sc: sc, name: name, rig: r, sys: sys,
		e2e: measure.NewHistogram(), interval: measure.NewHistogram(), ackLat: measure.NewHistogram(), handling: measure.NewHistogram(),
		errKinds: map[string]int64{}, lastSeq: map[string]int64{},
	}
}

// run starts the workers, publishes for the warm-up and the measured
// window, then waits for what is in flight to come through.
func (m *measurement) run(ctx context.Context, bar *progressBar) error {
	sc := m.sc
	var stops []func()
	defer func() {
		for _, stop := range slices.Backward(stops) {
			stop()
		}
	}()
	// Workers of the last stage first, so nothing waits for a consumer.
	for stage := sc.Hops - 1; stage >= 0; stage-- {
		for w := range sc.Consumers {
			wname := fmt.Sprintf("%s-s%d-w%d", m.name, stage, w)
			var fwd producer
			var rep replier
			var err error
			switch {
			case stage < sc.Hops-1:
				fwd, err = m.sys.producer(ctx, wname+"-fwd", stage+1, sc.Window, func(at time.Time, err error) {
					if err != nil {
						m.fail(err)
					}
				})
			case sc.Pattern == PatternRequestReply:
				rep, err = m.sys.replier(ctx, wname+"-reply")
			}
			if err != nil {
				return err
			}
			if fwd != nil {
				stops = append(stops, fwd.close)
			}
			if rep != nil {
				stops = append(stops, rep.close)
			}
			stop, err := m.sys.consume(ctx, stage, wname, sc.Window, m.worker(ctx, stage, fwd, rep))
			if err != nil {
				return err
			}
			stops = append(stops, stop)
		}
	}
	pubs := make([]producer, sc.Publishers)
	inboxes := make([]string, sc.Publishers)
	for i := range pubs {
		pname := fmt.Sprintf("%s-pub%d", m.name, i)
		p, err := m.sys.producer(ctx, pname, 0, sc.Window, m.acked)
		if err != nil {
			return err
		}
		pubs[i] = p
		stops = append(stops, p.close)
		if sc.Pattern == PatternRequestReply {
			addr, stop, err := m.sys.inbox(ctx, pname+"-inbox", func(in *inMsg) { m.complete(in, time.Now()) })
			if err != nil {
				return err
			}
			inboxes[i] = addr
			stops = append(stops, stop)
		}
	}

	stopClock := m.startClock(ctx, bar)
	defer stopClock(false)

	var wg sync.WaitGroup
	errs := make([]error, len(pubs))
	for i, p := range pubs {
		wg.Go(func() { errs[i] = m.publish(ctx, i, p, inboxes[i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, p := range pubs {
		if err := p.flush(ctx); err != nil {
			return err
		}
	}
	stopClock(true)
	return m.drain(ctx)
}

// startClock fixes the run's timeline (warm-up, then the measured
// window) from now and starts the sampler. The returned func stops the
// sampler: with wait, after its last point (it ends with the window),
// else at once; calls after the first do nothing.
func (m *measurement) startClock(ctx context.Context, bar *progressBar) func(wait bool) {
	m.start = time.Now()
	m.measureStart = m.start.Add(m.sc.Warmup)
	m.measureEnd = m.measureStart.Add(m.sc.Duration)
	m.gc0 = readGC()
	sampled := make(chan struct{})
	sctx, cancel := context.WithCancel(ctx)
	go func() { defer close(sampled); m.sample(sctx, bar) }()
	var once sync.Once
	return func(wait bool) {
		once.Do(func() {
			if !wait {
				cancel()
			}
			<-sampled
			cancel()
			m.gcStats = readGC().since(m.gc0, m.sc.Duration)
			if bar != nil {
				bar.finish()
			}
		})
	}
}

// drain waits, bounded, until everything published has come through the
// last stage, so the latencies of the slowest messages are not missing.
func (m *measurement) drain(ctx context.Context) error {
	deadline := time.Now().Add(scenarioDrainTimeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for m.completed.Load() < m.published.Load() && time.Now().Before(deadline) {
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// acked counts the outcome of a stage-0 publish.
func (m *measurement) acked(at time.Time, err error) {
	if err != nil {
		m.fail(err)
		return
	}
	m.published.Add(1)
	if m.inMeasure(at) {
		m.pubInWindow.Add(1)
		d := time.Since(at)
		m.mu.Lock()
		m.ackLat.Record(d)
		m.mu.Unlock()
	}
}

func (m *measurement) inMeasure(t time.Time) bool {
	return !t.Before(m.measureStart) && t.Before(m.measureEnd)
}

// fail counts a failed publish by kind.
func (m *measurement) fail(err error) {
	kind := errorKind(err)
	m.mu.Lock()
	m.errKinds[kind]++
	if m.firstErr == "" {
		m.firstErr = err.Error()
	}
	m.mu.Unlock()
}

// Kinds of errors a run counts; ErrKindRejected is the broker refusing a
// message because of a limit (admission).
const (
	ErrKindRejected = "rejected"
	ErrKindTimeout  = "timeout"
	ErrKindOther    = "other"
)

// errorKind classifies a publish error: refusals for a limit (size, rate,
// capacity, a full stream or a nack) are admission rejections.
func errorKind(err error) string {
	var api *semaq.APIError
	if errors.As(err, &api) {
		switch api.Code {
		case 413, 429, 503:
			return ErrKindRejected
		}
	}
	if errors.Is(err, errNacked) {
		return ErrKindRejected
	}
	if errors.Is(err, context.DeadlineExceeded) || strings.Contains(strings.ToLower(err.Error()), "timeout") {
		return ErrKindTimeout
	}
	s := strings.ToLower(err.Error())
	for _, w := range []string{"maximum", "limit", "too large", "insufficient resources", "rate", "exceeded"} {
		if strings.Contains(s, w) {
			return ErrKindRejected
		}
	}
	return ErrKindOther
}

// worker handles one delivery at stage: work, then forward, answer or
// complete, then ack.
func (m *measurement) worker(ctx context.Context, stage int, fwd producer, rep replier) func(*inMsg) {
	last := stage == m.sc.Hops-1
	return func(in *inMsg) {
		got := time.Now()
		if in.redelivered {
			m.redelivered.Add(1)
		}
		if m.sc.Work > 0 {
			time.Sleep(m.sc.Work)
		}
		switch {
		case !last:
			out := m.carry(in)
			if tp := in.get(semaq.HdrTraceParent); tp != "" {
				out.set(semaq.HdrTraceParent, childSpan(tp, stage))
			}
			_ = fwd.publish(ctx, out) // failures counted by the producer
		case m.sc.Pattern == PatternRequestReply:
			out := m.carry(in)
			if tp := in.get(semaq.HdrTraceParent); tp != "" {
				out.set(semaq.HdrTraceParent, tp)
			}
			if err := rep.reply(in.get(hdrReply), out); err != nil {
				m.fail(err)
			}
		default:
			m.complete(in, time.Now())
		}
		in.ack()
		m.mu.Lock()
		m.handling.Record(time.Since(got))
		m.mu.Unlock()
	}
}

// carry is the next hop of in: its origin, session and payload.
func (m *measurement) carry(in *inMsg) *outMsg {
	out := &outMsg{data: in.data, hdr: make([]string, 0, 16)}
	for _, k := range []string{hdrSent, hdrSession, hdrSeq, semaq.HdrModel, semaq.HdrTenant, semaq.HdrPriority} {
		if v := in.get(k); v != "" {
			out.set(k, v)
		}
	}
	return out
}

// complete records a message that came out of the last stage.
func (m *measurement) complete(in *inMsg, now time.Time) {
	m.completed.Add(1)
	ns, _ := strconv.ParseInt(in.get(hdrSent), 10, 64)
	origin := time.Unix(0, ns)
	session, seq := in.get(hdrSession), in.get(hdrSeq)
	n, _ := strconv.ParseInt(seq, 10, 64)
	if m.sc.Trace && m.sc.Hops > 1 {
		if !traceIntact(in.get(semaq.HdrTraceParent), m.sc.Seed, session, n) {
			m.traceBroken.Add(1)
		}
	}
	m.mu.Lock()
	if !in.redelivered {
		if n <= m.lastSeq[session] {
			m.outOfOrder.Add(1)
		} else {
			m.lastSeq[session] = n
		}
	}
	m.mu.Unlock()
	m.record(origin, now, len(in.data), 1)
}

// record counts n items (messages, or tokens of one record) of size bytes
// in all that completed at now, sent at origin.
func (m *measurement) record(origin, now time.Time, size, n int) {
	inWin := m.inMeasure(now)
	if inWin {
		m.inWindow.Add(int64(n))
		m.bytesDone.Add(int64(size))
	}
	if !m.inMeasure(origin) {
		return
	}
	d := now.Sub(origin)
	m.mu.Lock()
	for range n {
		m.e2e.Record(d)
		if inWin {
			m.interval.Record(d)
		}
	}
	m.mu.Unlock()
}

// publish is publisher i: it owns the sessions s with s mod publishers =
// i, publishes in their order, and either paces to its share of the rate
// with exponential gaps or, in closed loop, as fast as the window allows.
func (m *measurement) publish(ctx context.Context, i int, p producer, inbox string) error {
	sc := m.sc
	rng := newPublisherRand(sc, i)
	gen := newPayloadGen(sc, i)
	var own []int
	for s := i; s < sc.Sessions; s += sc.Publishers {
		own = append(own, s)
	}
	if len(own) == 0 {
		own = []int{i % sc.Sessions}
	}
	seqs := make(map[int]int64, len(own))
	arr := newArrivals(rng, float64(sc.Rate)/float64(sc.Publishers), m.start)
	defer arr.stop()
	for {
		due, err := arr.next(ctx)
		if err != nil {
			return err
		}
		if !due.Before(m.measureEnd) {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		// Latency runs from the scheduled time when the publisher is behind
		// (so a target that makes it wait is charged for it), else from the
		// send: timer jitter is not the broker's.
		origin := due
		if now := time.Now(); now.Sub(due) <= bench.PacerSlack {
			origin = now
		}
		s := own[rng.IntN(len(own))]
		seqs[s]++
		out := gen.message(rng, s, seqs[s], origin)
		if inbox != "" {
			out.set(hdrReply, inbox)
		}
		if err := p.publish(ctx, out); err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// sample records a series point every interval of the measured window.
func (m *measurement) sample(ctx context.Context, bar *progressBar) {
	tick := time.NewTicker(m.sc.Interval)
	defer tick.Stop()
	var prevPub, prevDone, prevRedel, prevErr int64
	prevGC := readGC()
	var prevFsync *semaq.CommitStats
	if fs, err := m.fsyncStats(ctx); err == nil {
		prevFsync = fs
	}
	started := false
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			if bar != nil {
				bar.update(now.Sub(m.start), m.completed.Load())
			}
			if now.Before(m.measureStart) {
				prevPub, prevDone = m.published.Load(), m.completed.Load()
				prevGC = readGC()
				if fs, err := m.fsyncStats(ctx); err == nil {
					prevFsync = fs
				}
				continue
			}
			if !started {
				started = true
				m.gc0 = prevGC
				m.fsync0 = prevFsync
			}
			pub, done, redel, errs := m.published.Load(), m.completed.Load(), m.redelivered.Load(), m.errCount()
			gc := readGC()
			secs := m.sc.Interval.Seconds()
			m.mu.Lock()
			l := m.interval.Summary()
			m.interval = measure.NewHistogram()
			m.mu.Unlock()
			p := Point{
				Round:          m.round,
				T:              round3(now.Sub(m.measureStart).Seconds()),
				PublishedPerS:  measure.Round1(float64(pub-prevPub) / secs),
				CompletedPerS:  measure.Round1(float64(done-prevDone) / secs),
				Lag:            backlog(pub, done),
				P50US:          l.P50,
				P99US:          l.P99,
				P999US:         l.P999,
				Redeliveries:   redel - prevRedel,
				Errors:         errs - prevErr,
				GCPauseUS:      measure.Round1(gc.pauseSeconds*1e6 - prevGC.pauseSeconds*1e6),
				HeapAllocBytes: gc.allocBytes - prevGC.allocBytes,
			}
			if fs, err := m.fsyncStats(ctx); err == nil && fs != nil && prevFsync != nil {
				p.Fsyncs = fs.CommitLatency.Count - prevFsync.CommitLatency.Count
				if p.Fsyncs > 0 {
					total := fs.CommitLatency.Mean*float64(fs.CommitLatency.Count) - prevFsync.CommitLatency.Mean*float64(prevFsync.CommitLatency.Count)
					p.FsyncMeanUS = measure.Round1(total / float64(p.Fsyncs))
				}
				prevFsync = fs
			}
			m.series = append(m.series, p)
			prevPub, prevDone, prevRedel, prevErr, prevGC = pub, done, redel, errs, gc
			if !now.Before(m.measureEnd.Add(-m.sc.Interval / 2)) {
				return
			}
		}
	}
}

// fsyncStats reads the group-commit figures of the SemaQ stream; nil for
// other targets and for interval streams.
func (m *measurement) fsyncStats(ctx context.Context) (*semaq.CommitStats, error) {
	if m.name != bench.TargetSemaq || !m.sc.Durable {
		return nil, nil
	}
	return m.rig.GroupCommit(ctx, bench.Targets[bench.TargetSemaq])
}

func (m *measurement) errCount() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n int64
	for _, v := range m.errKinds {
		n += v
	}
	return n
}

// result summarises the measurement.
func (m *measurement) result() *ScenarioResult {
	sc := m.sc
	secs := sc.Duration.Seconds()
	m.mu.Lock()
	defer m.mu.Unlock()
	res := &ScenarioResult{
		Result: bench.Result{
			Target:             m.name,
			ThroughputMsgsPerS: measure.Round1(float64(m.inWindow.Load()) / secs),
			ThroughputMBPerS:   measure.Round1(float64(m.bytesDone.Load()) / secs / 1e6),
			ByRound:            m.byRound,
			Latency:            m.e2e.Summary(),
			Msgs:               m.inWindow.Load(),
			LatencySamples:     m.e2e.Count(),
			FirstError:         m.firstErr,
		},
		PublishedMsgsPerS: measure.Round1(float64(m.pubInWindow.Load()) / secs),
		OfferedMsgsPerS:   float64(sc.Rate),
		AckLatency:        m.ackLat.Summary(),
		Handling:          m.handling.Summary(),
		CDF:               cdfOf(m.e2e),
		Published:         m.published.Load(),
		Completed:         m.completed.Load(),
		Unfinished:        max(0, m.published.Load()-m.completed.Load()),
		Redeliveries:      m.redelivered.Load(),
		OutOfOrder:        m.outOfOrder.Load(),
		TraceBroken:       m.traceBroken.Load(),
		ErrorsByKind:      maps(m.errKinds),
		Series:            m.series,
		Workers:           sc.Consumers,
		GC:                m.gcStats,
	}
	for _, v := range m.errKinds {
		res.Errors += v
	}
	res.GC.PauseFraction = math.Round(res.GC.PauseTotalUS/1e6/secs*1e5) / 1e5
	if fs, err := m.fsyncStats(context.Background()); err == nil && fs != nil {
		res.GroupCommit = fs
	}
	if sc.Pattern == PatternTokens && sc.Tokens != nil {
		tps := res.ThroughputMsgsPerS
		res.TokensPerS = tps
		res.CWPS = math.Round(tps/float64(sc.Tokens.ContextWindow)*1000) / 1000
	}
	return res
}

func maps(m map[string]int64) map[string]int64 {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// absorb adds the counts, histograms and series of o, a later round of
// the same target, to m.
func (m *measurement) absorb(o *measurement) {
	offset := 0.0
	if n := len(m.series); n > 0 {
		offset = m.series[n-1].T
	}
	for _, p := range o.series {
		p.T = round3(p.T + offset)
		m.series = append(m.series, p)
	}
	for _, c := range []struct{ dst, src *atomic.Int64 }{
		{&m.published, &o.published}, {&m.completed, &o.completed}, {&m.inWindow, &o.inWindow},
		{&m.pubInWindow, &o.pubInWindow}, {&m.bytesDone, &o.bytesDone}, {&m.redelivered, &o.redelivered},
		{&m.outOfOrder, &o.outOfOrder}, {&m.traceBroken, &o.traceBroken},
	} {
		c.dst.Add(c.src.Load())
	}
	m.e2e.Merge(o.e2e)
	m.ackLat.Merge(o.ackLat)
	m.handling.Merge(o.handling)
	for k, v := range o.errKinds {
		m.errKinds[k] += v
	}
	if m.firstErr == "" {
		m.firstErr = o.firstErr
	}
	m.byRound = append(m.byRound, o.byRound...)
	g, og := &m.gcStats, o.gcStats
	g.Cycles += og.Cycles
	g.PauseTotalUS = measure.Round1(g.PauseTotalUS + og.PauseTotalUS)
	g.MaxPauseUS = max(g.MaxPauseUS, og.MaxPauseUS)
	g.AllocBytes += og.AllocBytes
}

// newPublisherRand is publisher i's source of every random choice.
func newPublisherRand(sc *Scenario, i int) *rand.Rand {
	return rand.New(rand.NewPCG(sc.Seed, uint64(i)+1))
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }
