package scenario

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/semaq/semaq/internal/bench"
	"github.com/semaq/semaq/internal/bench/measure"
	"github.com/semaq/semaq/internal/broker"
)

// Goals of the workload scenarios (docs/benchmarks/scenarios.md).
const (
	// GoalScenarioVsJetStream is the least SemaQ throughput as a fraction
	// of raw JetStream's, wherever the semantic layer is on the path.
	GoalScenarioVsJetStream = 0.8
	// GoalScenarioVsRabbitMQ is the least SemaQ throughput as a multiple
	// of RabbitMQ's.
	GoalScenarioVsRabbitMQ = 3.0
	// GoalScenarioP99VsJetStream is the most SemaQ's p99 may be as a
	// multiple of raw JetStream's at the same offered load.
	GoalScenarioP99VsJetStream = 1.25
)

// ScenarioReport is the outcome of `semaq bench run`: the shape of the
// ingest report (scenario, config, results with the same fields), extended
// with each target's time series, the goals of the scenarios, and the
// findings of the diagnosis.
type ScenarioReport struct {
	Scenario string           `json:"scenario"`
	Config   ScenarioSetup    `json:"config"`
	Results  []ScenarioResult `json:"results"`
	Goals    *ScenarioGoals   `json:"goals,omitempty"`
	Findings []Finding        `json:"findings"`
	// Interrupted says the run was cut short (SIGINT): the results are
	// of the rounds that ended.
	Interrupted string `json:"interrupted,omitempty"`
}

// ScenarioSetup is ReportConfig plus the scenario as run.
type ScenarioSetup struct {
	bench.ReportConfig
	Spec  Scenario `json:"spec"`
	Short bool     `json:"short,omitempty"`
	// RabbitMQ is where the RabbitMQ targets were looked for.
	RabbitMQ string `json:"rabbitmq_url,omitempty"`
}

// ScenarioResult is Result (throughput counts messages through the last
// stage in the measured window; latency is end to end) with what a
// workload adds.
type ScenarioResult struct {
	bench.Result
	// Unreachable says why the target was not measured; nothing else is
	// set then.
	Unreachable string `json:"unreachable,omitempty"`
	// Setup says where the target ran and what its acks mean.
	Setup string `json:"setup,omitempty"`
	// OfferedMsgsPerS is the scenario's rate (0: closed loop);
	// PublishedMsgsPerS the acknowledged stage-0 publishes.
	OfferedMsgsPerS   float64 `json:"offered_msgs_per_s"`
	PublishedMsgsPerS float64 `json:"published_msgs_per_s"`
	// AckLatency is publish → broker ack of the first publish; Handling is
	// delivery → ack at a worker.
	AckLatency measure.Latency `json:"ack_latency_us"`
	Handling   measure.Latency `json:"handling_us"`
	// CDF is the end-to-end latency distribution at fixed percentiles.
	CDF []CDFPoint `json:"latency_cdf_us,omitempty"`
	// Whole run, warm-up and drain included.
	Published    int64            `json:"published"`
	Completed    int64            `json:"completed"`
	Unfinished   int64            `json:"unfinished"` // published, not through the last stage when the drain ended
	Redeliveries int64            `json:"redeliveries"`
	OutOfOrder   int64            `json:"out_of_order"`
	TraceBroken  int64            `json:"trace_broken,omitempty"`
	ErrorsByKind map[string]int64 `json:"errors_by_kind,omitempty"`
	Workers      int              `json:"workers_per_stage"`
	GC           GCStats          `json:"gc"`
	// TokensPerS and CWPS (tokens per second over the context window) for
	// token streams.
	TokensPerS float64 `json:"tokens_per_s,omitempty"`
	CWPS       float64 `json:"cwps,omitempty"`
	// SLOMet is set when the scenario has an SLO.
	SLOMet *bool   `json:"slo_met,omitempty"`
	Series []Point `json:"series"`
	// RatioVsRabbitMQ is this target's throughput over RabbitMQ's with
	// classic queues, RatioVsRabbitMQQuorum over RabbitMQ's with quorum
	// queues; P99RatioVsJetStream its p99 over raw JetStream's.
	RatioVsRabbitMQ       *float64 `json:"ratio_vs_rabbitmq,omitempty"`
	RatioVsRabbitMQQuorum *float64 `json:"ratio_vs_rabbitmq_quorum,omitempty"`
	P99RatioVsJetStream   *float64 `json:"p99_ratio_vs_jetstream,omitempty"`
}

// Point is one interval of a target's run.
type Point struct {
	// Round is the round the point belongs to; T the end of the interval,
	// in seconds of the target's measured time (rounds laid end to end).
	Round         int     `json:"round"`
	T             float64 `json:"t_s"`
	PublishedPerS float64 `json:"published_per_s"`
	CompletedPerS float64 `json:"completed_per_s"`
	// Lag is published (acknowledged to the publisher) but not yet through
	// the last stage, at T; never below zero.
	Lag int64 `json:"lag"`
	// Latency of the messages completed in the interval.
	P50US          float64 `json:"p50_us"`
	P99US          float64 `json:"p99_us"`
	P999US         float64 `json:"p999_us"`
	Redeliveries   int64   `json:"redeliveries,omitempty"`
	Errors         int64   `json:"errors,omitempty"`
	GCPauseUS      float64 `json:"gc_pause_us"`
	HeapAllocBytes int64   `json:"heap_alloc_bytes"`
	// Fsyncs and FsyncMeanUS: group commits of the SemaQ fsync stream in
	// the interval.
	Fsyncs      int64   `json:"fsyncs,omitempty"`
	FsyncMeanUS float64 `json:"fsync_mean_us,omitempty"`
}

// CDFPoint is the latency at a percentile.
type CDFPoint struct {
	Percentile float64 `json:"p"`
	US         float64 `json:"us"`
}

var cdfPercentiles = []float64{0, 1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 97, 98, 99, 99.5, 99.9, 99.95, 99.99, 100}

func cdfOf(h *measure.Histogram) []CDFPoint {
	if h.Count() == 0 {
		return nil
	}
	out := make([]CDFPoint, len(cdfPercentiles))
	for i, p := range cdfPercentiles {
		v := h.ValueAtQuantile(p)
		if p == 0 {
			v = h.Min()
		}
		out[i] = CDFPoint{Percentile: p, US: measure.Micros(v)}
	}
	return out
}

// ScenarioGoals compares SemaQ with the baselines. The RabbitMQ goal is
// judged against the rabbitmq target (classic queues), the baseline it
// was set on; the ratio against rabbitmq-quorum is reported beside it in
// the results, not judged. A ratio is nil when its baseline was not
// measured; a throughput goal is not judged when both
// targets carried the offered load (the load, not the broker, set the
// figure; run with --rate 0 for capacity).
type ScenarioGoals struct {
	VsJetStream       *float64 `json:"throughput_vs_jetstream,omitempty"`
	VsJetStreamMin    float64  `json:"throughput_vs_jetstream_min"`
	VsJetStreamMet    *bool    `json:"throughput_vs_jetstream_met,omitempty"`
	VsRabbitMQ        *float64 `json:"throughput_vs_rabbitmq,omitempty"`
	VsRabbitMQMin     float64  `json:"throughput_vs_rabbitmq_min"`
	VsRabbitMQMet     *bool    `json:"throughput_vs_rabbitmq_met,omitempty"`
	P99VsJetStream    *float64 `json:"p99_vs_jetstream,omitempty"`
	P99VsJetStreamMax float64  `json:"p99_vs_jetstream_max"`
	P99Met            *bool    `json:"p99_met,omitempty"`
	// Notes say why a goal was not judged.
	Notes []string `json:"notes,omitempty"`
}

func newScenarioReport(sc *Scenario, cfg ScenarioConfig) *ScenarioReport {
	sync := broker.SyncInterval
	if sc.Durable {
		sync = broker.SyncAlways
	}
	rep := &ScenarioReport{Scenario: sc.Name, Findings: []Finding{}}
	rep.Config = ScenarioSetup{
		ReportConfig: bench.ReportConfig{
			Targets:     cfg.Targets,
			Duration:    sc.Duration.String(),
			Warmup:      sc.Warmup.String(),
			Size:        sc.Payload.Max,
			Sync:        sync,
			Window:      sc.Window,
			Publishers:  sc.Publishers,
			Rounds:      1,
			TraceParent: sc.Trace,
			GoVersion:   runtime.Version(),
			Platform:    runtime.GOOS + "/" + runtime.GOARCH,
			CPUs:        runtime.NumCPU(),
			GOMAXPROCS:  runtime.GOMAXPROCS(0),
			NATSServer:  server.VERSION,
			SemaQ:       broker.Version,
		},
		Spec:  *sc,
		Short: cfg.Short,
	}
	if contains(cfg.Targets, TargetRabbitMQ) || contains(cfg.Targets, TargetRabbitMQQuorum) {
		rep.Config.RabbitMQ = redactURL(cfg.RabbitMQURL)
	}
	if sc.Rate > 0 {
		rep.Config.Rates = []int{sc.Rate}
	}
	return rep
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// ScenarioResult returns the result of target, or nil.
func (r *ScenarioReport) Result(target string) *ScenarioResult {
	for i := range r.Results {
		if r.Results[i].Target == target {
			return &r.Results[i]
		}
	}
	return nil
}

func (r *ScenarioReport) measured(target string) *ScenarioResult {
	res := r.Result(target)
	if res == nil || res.Unreachable != "" {
		return nil
	}
	return res
}

// finish sets the ratios, the SLO verdicts, the goals and the findings.
func (r *ScenarioReport) finish() {
	sc := &r.Config.Spec
	for i := range r.Results {
		res := &r.Results[i]
		if res.Unreachable != "" {
			continue
		}
		if sc.SLO.P99 > 0 || sc.SLO.P999 > 0 {
			met := (sc.SLO.P99 == 0 || res.Latency.P99 <= measure.Micros(int64(sc.SLO.P99))) &&
				(sc.SLO.P999 == 0 || res.Latency.P999 <= measure.Micros(int64(sc.SLO.P999)))
			res.SLOMet = &met
		}
	}
	js, rmq, rmqq := r.measured(bench.TargetJetStream), r.measured(TargetRabbitMQ), r.measured(TargetRabbitMQQuorum)
	for i := range r.Results {
		res := &r.Results[i]
		if res.Unreachable != "" || res.Target == bench.TargetJetStream {
			continue
		}
		if js != nil && js.ThroughputMsgsPerS > 0 {
			ratio := round3(res.ThroughputMsgsPerS / js.ThroughputMsgsPerS)
			delta := res.Latency.Sub(js.Latency)
			res.RatioVsJetStream, res.LatencyDeltaUS = &ratio, &delta
			if js.Latency.P99 > 0 {
				p := round3(res.Latency.P99 / js.Latency.P99)
				res.P99RatioVsJetStream = &p
			}
		}
		if isRabbitMQ(res.Target) {
			continue // one RabbitMQ target over the other says nothing of SemaQ
		}
		if rmq != nil && rmq.ThroughputMsgsPerS > 0 {
			ratio := round3(res.ThroughputMsgsPerS / rmq.ThroughputMsgsPerS)
			res.RatioVsRabbitMQ = &ratio
		}
		if rmqq != nil && rmqq.ThroughputMsgsPerS > 0 {
			ratio := round3(res.ThroughputMsgsPerS / rmqq.ThroughputMsgsPerS)
			res.RatioVsRabbitMQQuorum = &ratio
		}
	}
	if s := r.measured(bench.TargetSemaq); s != nil && (js != nil || rmq != nil) {
		g := &ScenarioGoals{VsJetStreamMin: GoalScenarioVsJetStream, VsRabbitMQMin: GoalScenarioVsRabbitMQ, P99VsJetStreamMax: GoalScenarioP99VsJetStream}
		judge := func(base *ScenarioResult, ratio *float64, min float64, met **bool) {
			if ratio == nil {
				return
			}
			if sc.Rate > 0 && sustained(s) && sustained(base) {
				g.Notes = append(g.Notes, fmt.Sprintf("throughput vs %s not judged: both carried the offered %d msgs/s (run with --rate 0 to measure capacity)", base.Target, sc.Rate))
				return
			}
			ok := *ratio >= min
			*met = &ok
		}
		if js != nil {
			g.VsJetStream = s.RatioVsJetStream
			judge(js, g.VsJetStream, GoalScenarioVsJetStream, &g.VsJetStreamMet)
			if s.P99RatioVsJetStream != nil {
				g.P99VsJetStream = s.P99RatioVsJetStream
				switch {
				case sc.Rate == 0:
					g.Notes = append(g.Notes, "p99 vs jetstream not judged: in closed loop a latency is the queue each target builds, not the same load")
				case !sustained(s) || !sustained(js):
					g.Notes = append(g.Notes, fmt.Sprintf("p99 vs jetstream not judged: not both carried the offered %d msgs/s, so the latencies are queues", sc.Rate))
				default:
					ok := *g.P99VsJetStream <= GoalScenarioP99VsJetStream
					g.P99Met = &ok
				}
			}
		}
		if rmq != nil {
			g.VsRabbitMQ = s.RatioVsRabbitMQ
			judge(rmq, g.VsRabbitMQ, GoalScenarioVsRabbitMQ, &g.VsRabbitMQMet)
		}
		r.Goals = g
	}
	for i := range r.Results {
		res := &r.Results[i]
		if res.Unreachable != "" {
			continue
		}
		found := Diagnose(sc, res)
		// A missed goal always has a finding: the rules' if any fired on
		// this target, else one that says the cause is unknown.
		if missed := r.missedGoals(res); len(missed) > 0 && len(found) == 0 {
			found = append(found, *r.unexplainedRule(res, missed))
		}
		r.Findings = append(r.Findings, found...)
	}
}

// sustained reports whether a target carried the offered load: at least
// 95% of it came through the last stage.
func sustained(res *ScenarioResult) bool {
	return res.OfferedMsgsPerS == 0 || res.ThroughputMsgsPerS >= 0.95*res.OfferedMsgsPerS
}

// WriteJSON writes r as indented JSON.
func (r *ScenarioReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes r for people: the scenario, one line per target, the
// comparisons, the goals and the findings.
func (r *ScenarioReport) WriteTable(w io.Writer) error {
	c := &r.Config
	sc := &c.Spec
	var b strings.Builder
	load := "closed loop"
	if sc.Rate > 0 {
		load = fmt.Sprintf("%d msgs/s offered", sc.Rate)
	}
	short := ""
	if c.Short {
		short = " (short)"
	}
	fmt.Fprintf(&b, "%s%s: %s; seed %d, %s, %s + %s warm-up, payload %s, %d publisher(s), %d worker(s) per stage, %d stage(s), %d session(s), sync %s\n",
		r.Scenario, short, sc.Pattern, sc.Seed, load, roundDuration(sc.Duration), roundDuration(sc.Warmup), sc.payloadWords(), sc.Publishers, sc.Consumers, sc.Hops, sc.Sessions, c.Sync)
	fmt.Fprintf(&b, "%s %s, %d CPUs, nats-server %s, semaq %s\n", c.GoVersion, c.Platform, c.CPUs, c.NATSServer, c.SemaQ)
	if r.Interrupted != "" {
		fmt.Fprintf(&b, "PARTIAL: %s\n", r.Interrupted)
	}
	for _, res := range r.Results {
		if res.Unreachable != "" {
			fmt.Fprintf(&b, "  %s: %s\n", res.Target, res.Unreachable)
		} else if res.Setup != "" {
			fmt.Fprintf(&b, "  %s\n", res.Setup)
		}
	}
	b.WriteString("\n")
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-20s\tmsgs/s\tMB/s\tp50 µs\tp99 µs\tp99.9 µs\tack p99 µs\tlag\tredeliv\terrors\tSLO\t\n", "target")
	for _, res := range r.Results {
		if res.Unreachable != "" {
			fmt.Fprintf(tw, "%-20s\t–\t–\t–\t–\t–\t–\t–\t–\t–\t–\t\n", res.Target)
			continue
		}
		l := res.Latency
		slo := "–"
		if res.SLOMet != nil {
			slo = bench.MetWord(*res.SLOMet)
		}
		lag := res.Lag()
		ack := "–" // token streams have no per-message ack
		if res.AckLatency.P99 > 0 {
			ack = fmt.Sprintf("%.1f", res.AckLatency.P99)
		}
		fmt.Fprintf(tw, "%-20s\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t%d\t%d\t%d\t%s\t\n",
			res.Target, res.ThroughputMsgsPerS, res.ThroughputMBPerS, l.P50, l.P99, l.P999, ack, lag, res.Redeliveries, res.Errors, slo)
	}
	for _, res := range r.Results {
		if res.RatioVsJetStream != nil && res.Target == bench.TargetSemaq {
			d := res.LatencyDeltaUS
			fmt.Fprintf(tw, "%-20s\t%.3f×\t\t%+.1f\t%+.1f\t%+.1f\t\t\t\t\t\t\n", res.Target+" vs "+bench.TargetJetStream, *res.RatioVsJetStream, d.P50, d.P99, d.P999)
		}
	}
	for _, res := range r.Results {
		if res.RatioVsRabbitMQ != nil {
			fmt.Fprintf(tw, "%-20s\t%.3f×\t\t\t\t\t\t\t\t\t\t\n", res.Target+" vs "+TargetRabbitMQ, *res.RatioVsRabbitMQ)
		}
	}
	for _, res := range r.Results {
		if res.RatioVsRabbitMQQuorum != nil {
			fmt.Fprintf(tw, "%-20s\t%.3f×\t\t\t\t\t\t\t\t\t\t\n", res.Target+" vs "+TargetRabbitMQQuorum, *res.RatioVsRabbitMQQuorum)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, res := range r.Results {
		if res.CWPS > 0 {
			fmt.Fprintf(&b, "%s: %.0f tokens/s, CWPS %.3f (context window %d tokens)\n", res.Target, res.TokensPerS, res.CWPS, sc.Tokens.ContextWindow)
		}
		if sc.Consumers == 1 && res.Unreachable == "" && res.OutOfOrder > 0 {
			fmt.Fprintf(&b, "%s: %d messages out of session order\n", res.Target, res.OutOfOrder)
		}
		if res.Unfinished > 0 {
			fmt.Fprintf(&b, "%s: %d messages published but not through the last stage %s after publishing stopped\n", res.Target, res.Unfinished, scenarioDrainTimeout)
		}
		if res.TraceBroken > 0 {
			fmt.Fprintf(&b, "%s: %d messages lost their trace context on the way\n", res.Target, res.TraceBroken)
		}
		if res.FirstError != "" {
			fmt.Fprintf(&b, "%s: first error: %s\n", res.Target, res.FirstError)
		}
	}
	if g := r.Goals; g != nil {
		b.WriteString("goals:")
		if g.VsJetStream != nil {
			fmt.Fprintf(&b, " throughput ≥ %.2f× jetstream: %.3f× %s;", g.VsJetStreamMin, *g.VsJetStream, judged(g.VsJetStreamMet))
		}
		if g.P99VsJetStream != nil {
			fmt.Fprintf(&b, " p99 ≤ %.2f× jetstream: %.3f× %s;", g.P99VsJetStreamMax, *g.P99VsJetStream, judged(g.P99Met))
		}
		if g.VsRabbitMQ != nil {
			fmt.Fprintf(&b, " throughput ≥ %.0f× rabbitmq: %.3f× %s;", g.VsRabbitMQMin, *g.VsRabbitMQ, judged(g.VsRabbitMQMet))
		}
		b.WriteString("\n")
		for _, n := range g.Notes {
			fmt.Fprintf(&b, "  %s\n", n)
		}
	}
	if len(r.Findings) == 0 {
		b.WriteString("diagnosis: no findings\n")
	}
	for _, f := range r.Findings {
		fmt.Fprintf(&b, "finding [%s] %s: %s\n", f.Target, f.Rule, f.RootCause)
		for _, e := range f.Evidence {
			fmt.Fprintf(&b, "    evidence: %s\n", e)
		}
		fmt.Fprintf(&b, "    suggestion: %s\n", f.Suggestion)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// roundDuration keeps about three significant digits of d for people:
// a tenth of 10s prints 3.33s, not 3.333333333s.
func roundDuration(d time.Duration) time.Duration {
	switch {
	case d >= 100*time.Second:
		return d.Round(time.Second)
	case d >= 10*time.Second:
		return d.Round(100 * time.Millisecond)
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= 100*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= 10*time.Millisecond:
		return d.Round(100 * time.Microsecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}

func judged(met *bool) string {
	if met == nil {
		return "(not judged)"
	}
	return bench.MetWord(*met)
}

// progressBar redraws one line on a terminal while a target runs.
type progressBar struct {
	w     io.Writer
	label string
	total time.Duration
}

func (p *progressBar) update(elapsed time.Duration, done int64) {
	frac := math.Min(1, elapsed.Seconds()/p.total.Seconds())
	const width = 30
	n := int(frac * width)
	fmt.Fprintf(p.w, "\r%-10s [%s%s] %3.0f%% %d msgs", p.label, strings.Repeat("#", n), strings.Repeat(" ", width-n), frac*100, done)
}

func (p *progressBar) finish() { fmt.Fprintln(p.w) }
