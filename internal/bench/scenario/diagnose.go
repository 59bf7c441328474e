package scenario

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/semaq/semaq/internal/bench"
	"github.com/semaq/semaq/internal/bench/measure"
)

// Finding is one conclusion of the diagnosis: what most likely limited
// the run, what the run measured that says so, and what to change.
type Finding struct {
	// Rule names the rule that fired (Rule* constants).
	Rule      string   `json:"rule"`
	Target    string   `json:"target"`
	RootCause string   `json:"root_cause"`
	Evidence  []string `json:"evidence"`
	// Suggestion is the change to try first.
	Suggestion string `json:"suggestion"`
}

// Diagnosis rules.
const (
	RuleWorkers    = "too-few-workers"
	RuleFsync      = "fsync-spikes"
	RuleAckWait    = "ack-wait-too-short"
	RuleGC         = "gc-pressure"
	RuleAdmission  = "admission-rejections"
	RuleSaturation = "ingest-saturated"
)

// rule looks at one target's result and returns a finding, or nil. Rules
// are pure: everything they use is in the scenario and the result, so a
// test can induce each condition by building a result.
type rule func(sc *Scenario, res *ScenarioResult) *Finding

var rules = []rule{lagRule, fsyncRule, ackWaitRule, gcRule, admissionRule, saturationRule}

// Diagnose runs every rule over res.
func Diagnose(sc *Scenario, res *ScenarioResult) []Finding {
	var out []Finding
	for _, r := range rules {
		if f := r(sc, res); f != nil {
			f.Target = res.Target
			out = append(out, *f)
		}
	}
	return out
}

// Thresholds of the rules.
const (
	// lagMinGrowth: the lag must grow by at least this share of the
	// arrival rate per second, and end at least lagMinEnd behind.
	lagMinGrowth = 0.02
	lagMinEnd    = 100
	// workerIdleBusy: workers busy less than this share of the time while
	// the lag grows are starved by delivery, not short of hands.
	workerIdleBusy = 0.5
	// A spike interval has a p99.9 at least spikeFactor times the run's
	// median p99.9 and at least spikeFloor.
	spikeFactor = 3.0
	spikeFloor  = time.Millisecond
	// An fsync is slow in an interval when its mean is at least
	// slowFsyncFactor times the median interval's.
	slowFsyncFactor = 2.0
	// gcPauseShare of the window stopped for GC, or gcCyclesPerS, is
	// pressure.
	gcPauseShare = 0.01
	gcCyclesPerS = 10.0
	// gcMinCycles: fewer cycles than this are too few to blame.
	gcMinCycles = 3
	// Published below saturationShare of the offered rate is saturation.
	saturationShare = 0.9
)

// lagRule: the backlog grows through the run, so the workers cannot keep
// up with arrivals. The workers needed follow from the rate each worker
// achieved.
func lagRule(sc *Scenario, res *ScenarioResult) *Finding {
	s := res.Series
	if len(s) < 3 {
		return nil
	}
	slope := lagSlope(s)
	arrival := meanOf(s, func(p Point) float64 { return p.PublishedPerS })
	done := meanOf(s, func(p Point) float64 { return p.CompletedPerS })
	last := s[len(s)-1].Lag
	if arrival <= 0 || slope < lagMinGrowth*arrival || last < lagMinEnd || done <= 0 {
		return nil
	}
	workers := max(res.Workers, 1)
	perWorker := done / float64(workers)
	need := int(math.Ceil(arrival / perWorker))
	if need <= workers {
		need = workers + 1
	}
	ev := []string{
		fmt.Sprintf("consumer lag grew from %d to %d messages over %.1f s (%+.0f msgs/s)", s[0].Lag, last, s[len(s)-1].T-s[0].T+intervalOf(s), slope),
		fmt.Sprintf("arrivals %.0f msgs/s, completions %.0f msgs/s with %d worker(s) per stage: %.0f msgs/s per worker", arrival, done, workers, perWorker),
	}
	f := &Finding{
		Rule:       RuleWorkers,
		RootCause:  fmt.Sprintf("too few workers: %d worker(s) per stage complete %.0f msgs/s against %.0f arriving", workers, done, arrival),
		Evidence:   ev,
		Suggestion: fmt.Sprintf("run at least %d workers per stage (consumers: %d), more for headroom; or cut the work per message", need, need),
	}
	if res.Handling.Mean > 0 {
		// The share of its time a worker spends in its handler: low means
		// deliveries, not work, are what it waits for.
		busy := perWorker * res.Handling.Mean / 1e6
		f.Evidence = append(f.Evidence, fmt.Sprintf("a worker holds a message %.0f µs on average (p99 %.0f µs): busy %.0f%% of the time", res.Handling.Mean, res.Handling.P99, 100*busy))
		if busy < workerIdleBusy {
			f.RootCause = fmt.Sprintf("too few consumers for the delivery path: %d worker(s) per stage complete %.0f msgs/s against %.0f arriving, each busy only %.0f%% of the time, so delivery to them (pulls, acks, forwarding), not their work, is the limit", workers, done, arrival, 100*busy)
			f.Suggestion = fmt.Sprintf("spread the stage over at least %d consumers (consumers: %d) so deliveries run in parallel, or lower the offered load", need, need)
		}
	}
	return f
}

// lagSlope is the growth of the lag in messages per second: the
// least-squares slope within each round (the lag drains between rounds),
// averaged over the rounds with enough points, weighted by their points.
func lagSlope(s []Point) float64 {
	var sum, weight float64
	for start := 0; start < len(s); {
		end := start + 1
		for end < len(s) && s[end].Round == s[start].Round {
			end++
		}
		if n := end - start; n >= 3 {
			sum += float64(n) * fitSlope(s[start:end])
			weight += float64(n)
		}
		start = end
	}
	if weight == 0 {
		return 0
	}
	return sum / weight
}

// fitSlope is the least-squares slope of the lag over time.
func fitSlope(s []Point) float64 {
	n := float64(len(s))
	var sx, sy, sxx, sxy float64
	for _, p := range s {
		x, y := p.T, float64(p.Lag)
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / den
}

func intervalOf(s []Point) float64 {
	if len(s) < 2 {
		return 0
	}
	return s[1].T - s[0].T
}

func meanOf(s []Point, f func(Point) float64) float64 {
	if len(s) == 0 {
		return 0
	}
	var t float64
	for _, p := range s {
		t += f(p)
	}
	return t / float64(len(s))
}

// fsyncRule: the tail spikes fall in the intervals where fsyncs were slow,
// so the latency is the disk's: a storage mode question.
func fsyncRule(sc *Scenario, res *ScenarioResult) *Finding {
	var p999, fsyncs []float64
	for _, p := range res.Series {
		if p.P999US > 0 {
			p999 = append(p999, p.P999US)
		}
		if p.Fsyncs > 0 {
			fsyncs = append(fsyncs, p.FsyncMeanUS)
		}
	}
	if len(p999) < 3 || len(fsyncs) == 0 {
		return nil
	}
	medLat, medFsync := measure.Median(p999), measure.Median(fsyncs)
	floor := measure.Micros(int64(spikeFloor))
	var spikes, aligned int
	var worst Point
	for _, p := range res.Series {
		if p.P999US < spikeFactor*medLat || p.P999US < floor {
			continue
		}
		spikes++
		slow := p.Fsyncs > 0 && (p.FsyncMeanUS >= slowFsyncFactor*medFsync || p.FsyncMeanUS >= p.P999US/4)
		if slow {
			aligned++
			if p.P999US > worst.P999US {
				worst = p
			}
		}
	}
	if spikes == 0 || aligned*2 < spikes {
		return nil
	}
	return &Finding{
		Rule:      RuleFsync,
		RootCause: "storage: the p99.9 spikes line up with slow fsyncs, so the tail is the disk's flush time",
		Evidence: []string{
			fmt.Sprintf("p99.9 spiked (≥ %.0f× the median interval's %.0f µs) in %d of %d intervals; %d of them had slow fsyncs", spikeFactor, medLat, spikes, len(res.Series), aligned),
			fmt.Sprintf("worst at t=%.1f s: p99.9 %.0f µs with fsyncs averaging %.0f µs there, against a median %.0f µs", worst.T, worst.P999US, worst.FsyncMeanUS, medFsync),
		},
		Suggestion: "if an ack need not mean on disk, give the stream durability interval (fsync on a timer); otherwise keep fsync and move the store to a disk with steadier flush latency, or accept the tail in the SLO",
	}
}

// ackWaitRule: messages came back although no worker failed, so the ack
// wait expired while workers still held them.
func ackWaitRule(sc *Scenario, res *ScenarioResult) *Finding {
	if res.Redeliveries == 0 {
		return nil
	}
	held := time.Duration(res.Handling.Max * float64(time.Microsecond))
	want := max(2*held, 2*sc.AckWait).Round(time.Second)
	if want < time.Second {
		want = time.Second
	}
	ev := []string{
		fmt.Sprintf("%d deliveries were redeliveries (%.2f%% of %d completed)", res.Redeliveries, 100*float64(res.Redeliveries)/math.Max(1, float64(res.Completed)), res.Completed),
		fmt.Sprintf("ack wait %s; workers held messages up to %.0f µs (p99 %.0f µs) before acking", roundDuration(sc.AckWait), res.Handling.Max, res.Handling.P99),
	}
	if res.Lag() > 0 {
		ev = append(ev, fmt.Sprintf("a backlog of %d messages waited in the prefetch of the workers, where the ack wait also runs", res.Lag()))
	}
	return &Finding{
		Rule:       RuleAckWait,
		RootCause:  "ack wait too short: the broker redelivered messages that workers were still processing or held in prefetch",
		Evidence:   ev,
		Suggestion: fmt.Sprintf("raise ack_wait to at least %s (twice the longest hold), lower the prefetch, or have workers signal progress (InProgress) on long jobs", want),
	}
}

// backlog is what was published and not yet through the last stage.
// published counts publisher acks, and a message can complete before its
// publisher has the ack (a classic RabbitMQ queue may confirm a message
// only once its consumer acked it), so completions can run ahead of acks:
// that is no backlog, not a negative one.
func backlog(published, completed int64) int64 {
	return max(published-completed, 0)
}

// Lag is the backlog at the end of the measured window.
func (res *ScenarioResult) Lag() int64 {
	if n := len(res.Series); n > 0 {
		return res.Series[n-1].Lag
	}
	return 0
}

// gcRule: the collector ran often or stopped the world for a noticeable
// share of the run, which shows in the tail; big payloads copied on every
// hop are the usual cause.
func gcRule(sc *Scenario, res *ScenarioResult) *Finding {
	window := sc.Duration.Seconds()
	if window <= 0 {
		return nil
	}
	cyclesPerS := float64(res.GC.Cycles) / window
	if res.GC.Cycles < gcMinCycles || res.GC.PauseFraction < gcPauseShare && cyclesPerS < gcCyclesPerS {
		return nil
	}
	ev := []string{
		fmt.Sprintf("%d GC cycles in %.1f s (%.1f/s), %.0f µs stopped (%.2f%% of the run)", res.GC.Cycles, window, cyclesPerS, res.GC.PauseTotalUS, 100*res.GC.PauseFraction),
	}
	if res.Msgs > 0 && res.GC.AllocBytes > 0 {
		perMsg := float64(res.GC.AllocBytes) / float64(res.Msgs)
		ev = append(ev, fmt.Sprintf("%.0f bytes allocated per message completed, payloads %s", perMsg, sc.payloadWords()))
	}
	if res.Latency.P999 > 0 {
		ev = append(ev, fmt.Sprintf("end-to-end p99.9 %.0f µs against p50 %.0f µs", res.Latency.P999, res.Latency.P50))
	}
	return &Finding{
		Rule:       RuleGC,
		RootCause:  "GC pressure: allocation per message keeps the collector busy, in proportion to payload size",
		Evidence:   ev,
		Suggestion: "send large payloads by reference (object store) or in smaller chunks, reuse buffers (pooling) in publishers and workers, or give the process more heap headroom (GOGC, GOMEMLIMIT)",
	}
}

// admissionRule: the broker refused messages for a limit.
func admissionRule(sc *Scenario, res *ScenarioResult) *Finding {
	n := res.ErrorsByKind[ErrKindRejected]
	if n == 0 {
		return nil
	}
	ev := []string{fmt.Sprintf("%d requests (publishes, subscriptions) refused by the broker for a limit, against %d messages published", n, res.Published)}
	if res.FirstError != "" {
		ev = append(ev, "first error: "+res.FirstError)
	}
	return &Finding{
		Rule:       RuleAdmission,
		RootCause:  "admission rejections: the offered load hit a limit (message size, stream capacity, consumers or rate)",
		Evidence:   ev,
		Suggestion: "raise the limit the first error names (stream max_msgs/max_bytes or max consumers, the tenant's rate, the message size limit), or back off: a smaller window, fewer concurrent readers",
	}
}

// saturationRule: publishers could not even get the offered rate
// acknowledged: the target's write path is the ceiling.
func saturationRule(sc *Scenario, res *ScenarioResult) *Finding {
	if sc.Rate <= 0 || res.PublishedMsgsPerS <= 0 || res.PublishedMsgsPerS >= saturationShare*float64(sc.Rate) {
		return nil
	}
	inflight := sc.Publishers * sc.Window
	return &Finding{
		Rule:      RuleSaturation,
		RootCause: fmt.Sprintf("ingest saturated: the target acknowledged %.0f of the %d msgs/s offered", res.PublishedMsgsPerS, sc.Rate),
		Evidence: []string{
			fmt.Sprintf("publish → ack p50 %.0f µs, p99 %.0f µs with up to %d messages in flight (%d publisher(s) × window %d)", res.AckLatency.P50, res.AckLatency.P99, inflight, sc.Publishers, sc.Window),
			fmt.Sprintf("end-to-end p99 %.0f µs includes the wait for a free window slot", res.Latency.P99),
		},
		Suggestion: strings.TrimSpace(fmt.Sprintf("add publishers or widen the window if the ack latency is low; if it is high the broker's write path is at its ceiling: spread the load over more streams or nodes, or lower the offered rate below %.0f msgs/s", res.PublishedMsgsPerS)),
	}
}

// payloadWords says how big the scenario's messages are.
func (sc *Scenario) payloadWords() string {
	if sc.Tokens != nil {
		return fmt.Sprintf("%d-byte tokens", sc.Tokens.Bytes)
	}
	if sc.Payload.Min == sc.Payload.Max {
		return fmt.Sprintf("%d bytes", sc.Payload.Max)
	}
	return fmt.Sprintf("%d–%d bytes", sc.Payload.Min, sc.Payload.Max)
}

// RuleUnknown is the finding of a missed goal no rule explains: the report
// never says a goal was missed and "no findings" in one breath.
const RuleUnknown = "cause-unknown"

// missedGoals names the goals res missed: its SLO, and for SemaQ the
// comparisons with the baselines.
func (r *ScenarioReport) missedGoals(res *ScenarioResult) []string {
	sc := &r.Config.Spec
	var out []string
	if res.SLOMet != nil && !*res.SLOMet {
		out = append(out, "SLO "+sloWords(sc.SLO)+fmt.Sprintf(" (measured p99 %s, p99.9 %s)", usLabel(res.Latency.P99), usLabel(res.Latency.P999)))
	}
	g := r.Goals
	if g == nil || res.Target != bench.TargetSemaq {
		return out
	}
	if g.VsJetStreamMet != nil && !*g.VsJetStreamMet {
		out = append(out, fmt.Sprintf("throughput ≥ %.2f× jetstream (measured %.3f×)", g.VsJetStreamMin, *g.VsJetStream))
	}
	if g.P99Met != nil && !*g.P99Met {
		out = append(out, fmt.Sprintf("p99 ≤ %.2f× jetstream (measured %.3f×)", g.P99VsJetStreamMax, *g.P99VsJetStream))
	}
	if g.VsRabbitMQMet != nil && !*g.VsRabbitMQMet {
		out = append(out, fmt.Sprintf("throughput ≥ %.0f× rabbitmq (measured %.3f×)", g.VsRabbitMQMin, *g.VsRabbitMQ))
	}
	return out
}

func sloWords(s SLO) string {
	var parts []string
	if s.P99 > 0 {
		parts = append(parts, "p99 ≤ "+roundDuration(s.P99).String())
	}
	if s.P999 > 0 {
		parts = append(parts, "p99.9 ≤ "+roundDuration(s.P999).String())
	}
	return strings.Join(parts, ", ")
}

// unexplainedRule is the finding for a target that missed goals while no
// rule fired on it: it names the goals, lists what the rules ruled out and
// how the baseline fared at the same load, and says how to narrow it down.
func (r *ScenarioReport) unexplainedRule(res *ScenarioResult, missed []string) *Finding {
	ev := slices.Clone(missed)
	if res.Target != bench.TargetJetStream && res.SLOMet != nil && !*res.SLOMet {
		if js := r.measured(bench.TargetJetStream); js != nil && js.SLOMet != nil {
			if *js.SLOMet {
				ev = append(ev, fmt.Sprintf("jetstream met the SLO at the same load (p99 %s): the difference is on %s's path", usLabel(js.Latency.P99), res.Target))
			} else {
				ev = append(ev, fmt.Sprintf("jetstream missed the SLO too at the same load (p99 %s): the load or the machine sets the tail, not only %s", usLabel(js.Latency.P99), res.Target))
			}
		}
	}
	if n := len(res.Series); n > 0 {
		var p99 []float64
		worst := res.Series[0]
		for _, p := range res.Series {
			if p.P99US > 0 {
				p99 = append(p99, p.P99US)
			}
			if p.P99US > worst.P99US {
				worst = p
			}
		}
		if len(p99) > 0 {
			ev = append(ev, fmt.Sprintf("p99 per interval: median %s, worst %s at t=%.1f s", usLabel(measure.Median(p99)), usLabel(worst.P99US), worst.T))
		}
	}
	ev = append(ev, fmt.Sprintf("ruled out: lag ended at %d (no growing backlog), %d redeliveries, %d admission rejections, GC %.2f%% of the run, %.0f msgs/s acknowledged of %s",
		res.Lag(), res.Redeliveries, res.ErrorsByKind[ErrKindRejected], 100*res.GC.PauseFraction, res.PublishedMsgsPerS, offeredWords(res.OfferedMsgsPerS)))
	return &Finding{
		Rule:       RuleUnknown,
		Target:     res.Target,
		RootCause:  "cause unknown: missed " + strings.Join(goalNames(missed), "; ") + ", and no diagnosis rule found why",
		Evidence:   ev,
		Suggestion: "rerun with more --rounds on a quieter machine (compare the load average) to see whether the miss repeats; with --html, the p99 heatmap shows whether it is one bad interval (a pause outside the broker) or every interval (the path itself)",
	}
}

// goalNames drops the measurements from missedGoals' entries.
func goalNames(missed []string) []string {
	out := make([]string, len(missed))
	for i, m := range missed {
		out[i], _, _ = strings.Cut(m, " (measured")
	}
	return out
}

func offeredWords(rate float64) string {
	if rate <= 0 {
		return "a closed loop"
	}
	return fmt.Sprintf("%.0f offered", rate)
}
