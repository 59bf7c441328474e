package bench

import (
	"fmt"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/semaq/semaq/internal/bench/measure"
)

// The end-to-end goal (docs/benchmarks/ingress.md, goal P3): at
// GoalE2ERate offered, SemaQ's publish-to-receipt p99 is at most
// GoalE2EP99Ratio times raw JetStream's, in the same run.
const (
	GoalE2ERate     = 10000
	GoalE2EP99Ratio = 1.2
)

// E2EResult is one target at one offered rate, from each message's publish
// call to its receipt by a consumer of the stream (e2e.go).
type E2EResult struct {
	// Latency is publish to receipt of each first delivery.
	Latency measure.Latency `json:"latency_us"`
	// Received counts first deliveries of the rate's messages within the
	// drain bound after their slice; ReceivedMsgsPerS is them over the time
	// from each slice's start to its last receipt (at least the slice).
	Received         int64   `json:"received"`
	ReceivedMsgsPerS float64 `json:"received_msgs_per_s"`
	// Missing were sent but not received by the end of their slice's
	// drain.
	Missing int64 `json:"missing"`
	// Parts splits Latency where the message's stamps allow.
	Parts E2EParts `json:"parts_us"`
	// Redelivered deliveries (an ack lost or late) are not timed.
	Redelivered int64 `json:"redelivered,omitempty"`
	// Sustained: at most 1% of the offered messages were skipped, failed
	// or missing. If not, the latencies are queueing-dominated.
	Sustained bool `json:"sustained"`
	// P99RatioVsJetStream is this target's p99 over raw JetStream's, and
	// LatencyDeltaUS the difference per quantile; set only when both
	// sustained the rate end to end.
	P99RatioVsJetStream *float64         `json:"p99_ratio_vs_jetstream,omitempty"`
	LatencyDeltaUS      *measure.Latency `json:"latency_delta_us_vs_jetstream,omitempty"`
}

// E2EParts is where a target's end-to-end time went, per quantile (each
// part's own distribution: parts of one quantile do not add up to the
// whole's). The store time is JetStream's timestamp of the stored message;
// the ingress time its AI-Received stamp, zero on targets without the
// ingress.
type E2EParts struct {
	PublishToIngress measure.Latency `json:"publish_to_ingress"`
	PublishToStore   measure.Latency `json:"publish_to_store"`
	StoreToReceipt   measure.Latency `json:"store_to_receipt"`
}

// E2EGoal is goal P3 as this run measured it.
type E2EGoal struct {
	Rate        int     `json:"rate"` // offered, msgs/s
	P99RatioMax float64 `json:"p99_ratio_max"`
	// P99Ratio and Met are set when both targets sustained Rate end to
	// end; otherwise NotMeasured says which did not.
	P99Ratio    *float64 `json:"p99_ratio,omitempty"`
	Met         *bool    `json:"met,omitempty"`
	NotMeasured string   `json:"not_measured,omitempty"`
}

// compare sets e's comparison with the baseline's b at the same rate.
func (e *E2EResult) compare(b *E2EResult) {
	if e == nil || b == nil || !e.Sustained || !b.Sustained || b.Latency.P99 <= 0 {
		return
	}
	ratio := math.Round(e.Latency.P99/b.Latency.P99*1000) / 1000
	d := e.Latency.Sub(b.Latency)
	e.P99RatioVsJetStream, e.LatencyDeltaUS = &ratio, &d
}

// e2eGoal is goal P3 for res against the baseline base, or nil when the run
// did not measure end to end at GoalE2ERate.
func e2eGoal(res, base *Result) *E2EGoal {
	p, b := res.paced(GoalE2ERate), base.paced(GoalE2ERate)
	if p == nil || b == nil || p.E2E == nil || b.E2E == nil {
		return nil
	}
	g := &E2EGoal{Rate: GoalE2ERate, P99RatioMax: GoalE2EP99Ratio}
	if r := p.E2E.P99RatioVsJetStream; r != nil {
		met := *r <= GoalE2EP99Ratio
		g.P99Ratio, g.Met = r, &met
		return g
	}
	var short []string
	for _, t := range []struct {
		name string
		e    *E2EResult
	}{{res.Target, p.E2E}, {base.Target, b.E2E}} {
		if !t.e.Sustained {
			short = append(short, t.name)
		}
	}
	g.NotMeasured = strings.Join(short, " and ") + " did not sustain the rate end to end"
	return g
}

// line is the goal's line of the table.
func (g *E2EGoal) line() string {
	head := fmt.Sprintf("goals: end-to-end p99 at %d msgs/s ≤ %.1f× jetstream: ", g.Rate, g.P99RatioMax)
	if g.P99Ratio == nil {
		return head + "not measurable: " + g.NotMeasured + "\n"
	}
	return head + fmt.Sprintf("%.3f× %s\n", *g.P99Ratio, MetWord(*g.Met))
}

// writeE2E writes the end-to-end measure: per rate, one line per target and
// SemaQ's p99 ratio and added latency, then what each rate that was not
// sustained end to end means.
func (r *Report) writeE2E(b *strings.Builder, width int) error {
	c := &r.Config
	if !c.E2E || len(c.Rates) == 0 {
		return nil
	}
	fmt.Fprintf(b, "\nend to end: publish → receipt by a pull consumer of the stream (as client.Subscribe: pulls of %d, explicit acks), the paced messages above\n", e2ePrefetch)
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\toffered\tsent\treceived\tmsgs/s\tp50 µs\tp99 µs\tp99.9 µs\tmissing\t\n", width, "target")
	var notes []string
	for _, rate := range c.Rates {
		for _, res := range r.Results {
			p := res.paced(rate)
			if p == nil || p.E2E == nil {
				continue
			}
			e := p.E2E
			fmt.Fprintf(tw, "%-*s\t%d\t%d\t%d\t%.0f\t%.1f\t%.1f\t%.1f\t%d\t\n",
				width, res.Target, p.Rate, p.Sent, e.Received, e.ReceivedMsgsPerS, e.Latency.P50, e.Latency.P99, e.Latency.P999, e.Missing)
			if !e.Sustained {
				notes = append(notes, fmt.Sprintf("%s did not sustain %d msgs/s end to end (received %d of %d offered at %.0f msgs/s; %d skipped at publish, %d missing): its latencies at this rate are queueing-dominated",
					res.Target, p.Rate, e.Received, p.Offered, e.ReceivedMsgsPerS, p.Skipped, e.Missing))
			}
			if e.Redelivered > 0 {
				notes = append(notes, fmt.Sprintf("%s at %d msgs/s: %d redeliveries, not timed", res.Target, p.Rate, e.Redelivered))
			}
		}
		for _, res := range r.Results {
			p := res.paced(rate)
			if p == nil || p.E2E == nil || res.RatioVsJetStream == nil {
				continue
			}
			label := res.Target + " vs " + TargetJetStream
			if e := p.E2E; e.P99RatioVsJetStream != nil {
				d := e.LatencyDeltaUS
				fmt.Fprintf(tw, "%-*s\t%d\t\tp99 ratio\t%.3f×\t%+.1f\t%+.1f\t%+.1f\t\t\n", width, label, p.Rate, *e.P99RatioVsJetStream, d.P50, d.P99, d.P999)
			} else {
				fmt.Fprintf(tw, "%-*s\t%d\t\tp99 ratio\t–\t–\t–\t–\t\t\n", width, label, p.Rate)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintf(b, "  %s\n", n)
	}
	return r.writeE2EParts(b, width)
}

// writeE2EParts writes where each target's end-to-end time went.
func (r *Report) writeE2EParts(b *strings.Builder, width int) error {
	b.WriteString("\nwhere the end-to-end time went, p50 / p99 µs of each part (from the stream's store time and the ingress's AI-Received stamp)\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\toffered\tpublish→ingress\tpublish→store\tstore→receipt\tpublish→receipt\t\n", width, "target")
	pair := func(l measure.Latency) string {
		if l == (measure.Latency{}) {
			return "–"
		}
		return fmt.Sprintf("%.0f / %.0f", l.P50, l.P99)
	}
	for _, rate := range r.Config.Rates {
		for _, res := range r.Results {
			p := res.paced(rate)
			if p == nil || p.E2E == nil {
				continue
			}
			e := p.E2E
			fmt.Fprintf(tw, "%-*s\t%d\t%s\t%s\t%s\t%s\t\n", width, res.Target, p.Rate,
				pair(e.Parts.PublishToIngress), pair(e.Parts.PublishToStore), pair(e.Parts.StoreToReceipt), pair(e.Latency))
		}
	}
	return tw.Flush()
}
