package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"strings"
	"text/tabwriter"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/semaq/semaq/internal/broker"
)

// Goals SemaQ's ingress is measured against (docs/benchmarks.md).
const (
	// GoalThroughputRatio is the least ingress throughput, as a fraction of
	// raw JetStream's.
	GoalThroughputRatio = 0.85
	// GoalP50DeltaUS is the most a synchronous publish through the ingress
	// may add to raw JetStream's median, in microseconds.
	GoalP50DeltaUS = 30.0
)

// Report is the outcome of one scenario run. Its JSON form is the --json
// output of `semaq bench`.
type Report struct {
	Scenario string       `json:"scenario"`
	Config   ReportConfig `json:"config"`
	Results  []Result     `json:"results"`
	// Goals is set when both SemaQ and the JetStream baseline were measured.
	Goals *Goals `json:"goals,omitempty"`
}

// ReportConfig records what was run and where.
type ReportConfig struct {
	Targets     []string `json:"targets"`
	Duration    string   `json:"duration"` // per phase per target
	Warmup      string   `json:"warmup"`
	Size        int      `json:"size"`
	Sync        string   `json:"sync"`
	Window      int      `json:"window"`
	Publishers  int      `json:"publishers"`
	Rounds      int      `json:"rounds"`
	TraceParent bool     `json:"traceparent"`
	GoVersion   string   `json:"go_version"`
	Platform    string   `json:"platform"`
	CPUs        int      `json:"cpus"`
	GOMAXPROCS  int      `json:"gomaxprocs"`
	NATSServer  string   `json:"nats_server"`
	SemaQ       string   `json:"semaq"`
}

func reportConfig(c *IngestConfig) ReportConfig {
	return ReportConfig{
		Targets:     c.Targets,
		Duration:    c.Duration.String(),
		Warmup:      c.Warmup.String(),
		Size:        c.Size,
		Sync:        c.Sync,
		Window:      c.Window,
		Publishers:  c.Publishers,
		Rounds:      c.Rounds,
		TraceParent: c.TraceParent,
		GoVersion:   runtime.Version(),
		Platform:    runtime.GOOS + "/" + runtime.GOARCH,
		CPUs:        runtime.NumCPU(),
		GOMAXPROCS:  runtime.GOMAXPROCS(0),
		NATSServer:  server.VERSION,
		SemaQ:       broker.Version,
	}
}

// Result is what one target achieved.
type Result struct {
	Target string `json:"target"`
	// ThroughputMsgsPerS counts acknowledged messages of the throughput
	// phase per second.
	ThroughputMsgsPerS float64 `json:"throughput_msgs_per_s"`
	ThroughputMBPerS   float64 `json:"throughput_mb_per_s"` // payload only, 10^6 bytes
	// ByRound is the throughput of each round, in run order: a spread
	// much wider than between targets means the machine was busy.
	ByRound []float64 `json:"throughput_by_round_msgs_per_s"`
	// Latency is the synchronous publish latency, publish to ack.
	Latency        Latency `json:"latency_us"`
	Msgs           int64   `json:"msgs"` // acknowledged in the throughput phase
	LatencySamples int64   `json:"latency_samples"`
	// Errors counts failed publishes of both measured phases.
	Errors     int64  `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
	// RatioVsJetStream is this target's throughput over raw JetStream's;
	// set on targets other than the baseline when it was measured.
	RatioVsJetStream *float64 `json:"ratio_vs_jetstream,omitempty"`
	// LatencyDeltaUS is this target's latency minus raw JetStream's.
	LatencyDeltaUS *Latency `json:"latency_delta_us_vs_jetstream,omitempty"`
}

// Goals compares SemaQ with the baseline against GoalThroughputRatio and
// GoalP50DeltaUS. Missing a goal is a finding, not an error.
type Goals struct {
	ThroughputRatio    float64 `json:"throughput_ratio"`
	ThroughputRatioMin float64 `json:"throughput_ratio_min"`
	ThroughputMet      bool    `json:"throughput_met"`
	P50DeltaUS         float64 `json:"p50_delta_us"`
	P50DeltaUSMax      float64 `json:"p50_delta_us_max"`
	P50Met             bool    `json:"p50_met"`
}

// Result returns the result of target, or nil.
func (r *Report) Result(target string) *Result {
	for i := range r.Results {
		if r.Results[i].Target == target {
			return &r.Results[i]
		}
	}
	return nil
}

// compare sets the ratios to the baseline and the goals.
func (r *Report) compare() {
	base := r.Result(TargetJetStream)
	if base == nil || base.ThroughputMsgsPerS == 0 {
		return
	}
	for i := range r.Results {
		res := &r.Results[i]
		if res.Target == TargetJetStream {
			continue
		}
		ratio := math.Round(res.ThroughputMsgsPerS/base.ThroughputMsgsPerS*1000) / 1000
		delta := res.Latency.sub(base.Latency)
		res.RatioVsJetStream, res.LatencyDeltaUS = &ratio, &delta
		if res.Target == TargetSemaq {
			r.Goals = &Goals{
				ThroughputRatio:    ratio,
				ThroughputRatioMin: GoalThroughputRatio,
				ThroughputMet:      ratio >= GoalThroughputRatio,
				P50DeltaUS:         delta.P50,
				P50DeltaUSMax:      GoalP50DeltaUS,
				P50Met:             delta.P50 <= GoalP50DeltaUS,
			}
		}
	}
}

// WriteJSON writes r as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes r for people: one line per target, one per comparison
// with the baseline, and the goals.
func (r *Report) WriteTable(w io.Writer) error {
	c := &r.Config
	var b strings.Builder
	envelope := "envelope with traceparent"
	if !c.TraceParent {
		envelope = "envelope without traceparent"
	}
	fmt.Fprintf(&b, "%s: %d-byte messages, %s, sync %s, %s per phase per target in %d round(s), window %d, %d publisher(s)\n",
		r.Scenario, c.Size, envelope, c.Sync, c.Duration, c.Rounds, c.Window, c.Publishers)
	fmt.Fprintf(&b, "%s %s, %d CPUs, nats-server %s, semaq %s\n\n", c.GoVersion, c.Platform, c.CPUs, c.NATSServer, c.SemaQ)
	// Numbers align right; the first column is padded to align left.
	width := len("target")
	for _, res := range r.Results {
		if res.RatioVsJetStream != nil {
			width = max(width, len(res.Target+" vs "+TargetJetStream))
		}
		width = max(width, len(res.Target))
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\tmsgs/s\tMB/s\tp50 µs\tp99 µs\tp99.9 µs\tacked\tsamples\terrors\t\n", width, "target")
	for _, res := range r.Results {
		l := res.Latency
		fmt.Fprintf(tw, "%-*s\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%d\t%d\t\n",
			width, res.Target, res.ThroughputMsgsPerS, res.ThroughputMBPerS, l.P50, l.P99, l.P999, res.Msgs, res.LatencySamples, res.Errors)
	}
	for _, res := range r.Results {
		if res.RatioVsJetStream == nil {
			continue
		}
		d := res.LatencyDeltaUS
		fmt.Fprintf(tw, "%-*s\t%.3f×\t\t%+.1f\t%+.1f\t%+.1f\t\t\t\t\n",
			width, res.Target+" vs "+TargetJetStream, *res.RatioVsJetStream, d.P50, d.P99, d.P999)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if c.Rounds > 1 {
		b.WriteString("\nthroughput by round (msgs/s, run order):")
		for _, res := range r.Results {
			fmt.Fprintf(&b, " %s", res.Target)
			for _, v := range res.ByRound {
				fmt.Fprintf(&b, " %.0f", v)
			}
			b.WriteString(";")
		}
		b.WriteString("\n")
	}
	if g := r.Goals; g != nil {
		fmt.Fprintf(&b, "goals: throughput ≥ %.2f× jetstream: %.3f× %s; p50 ≤ jetstream + %.0f µs: %+.1f µs %s\n",
			g.ThroughputRatioMin, g.ThroughputRatio, metWord(g.ThroughputMet), g.P50DeltaUSMax, g.P50DeltaUS, metWord(g.P50Met))
	}
	for _, res := range r.Results {
		if res.FirstError != "" {
			fmt.Fprintf(&b, "%s: first error: %s\n", res.Target, res.FirstError)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func metWord(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}
