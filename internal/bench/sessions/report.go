package sessions

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/semaq/semaq/internal/bench/measure"
)

// Report is the outcome of `semaq bench sessions`; its JSON form is the
// --json output.
type Report struct {
	Scenario string `json:"scenario"`
	Config   Config `json:"config"`
	Env      Env    `json:"env"`
	// Store is how the KV baseline's bucket is stored.
	Store Store `json:"kv_store"`
	// Results has one entry per target: semaq, then jetstream-kv.
	Results []Result `json:"results"`
	Ratio   Ratio    `json:"ratio"`
	Goal    Goal     `json:"goal"`
}

// Env records where the run happened.
type Env struct {
	GoVersion  string `json:"go"`
	Platform   string `json:"platform"`
	CPUs       int    `json:"cpus"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	NATSServer string `json:"nats_server"`
	SemaQ      string `json:"semaq"`
}

// Store is the KV baseline's bucket and how it is stored.
type Store struct {
	Bucket   string `json:"bucket"`
	Storage  string `json:"storage"`
	Replicas int    `json:"replicas"`
}

// Figures are one target's latency of a pair (a patch and a read) in
// microseconds and its pairs per second, over one round or the medians
// over the rounds.
type Figures struct {
	P50     float64 `json:"p50_us"`
	P90     float64 `json:"p90_us"`
	P99     float64 `json:"p99_us"`
	OpsPerS float64 `json:"ops_per_s"`
	Pairs   int64   `json:"pairs"`
}

// Result is one target's measurement.
type Result struct {
	Target string `json:"target"`
	// Pairs measured over every round.
	Pairs int64 `json:"pairs"`
	// Median is each figure's median over ByRound.
	Median  Figures   `json:"median"`
	ByRound []Figures `json:"by_round"`
	// AllRounds is the distribution of every round's pairs together.
	AllRounds measure.Latency `json:"all_rounds_us"`
}

// Ratio is semaq's latency over jetstream-kv's: per round, from the same
// round's figures, and the median of those.
type Ratio struct {
	P50     float64      `json:"p50"`
	P99     float64      `json:"p99"`
	ByRound []RoundRatio `json:"by_round"`
}

// RoundRatio is one round's ratio.
type RoundRatio struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
}

// Goal says whether the median p50 ratio met GoalP50Ratio.
type Goal struct {
	P50Ratio float64 `json:"p50_ratio_at_most"`
	Met      bool    `json:"met"`
}

// medianOf is each figure's median over rounds.
func medianOf(rounds []Figures) Figures {
	col := func(f func(Figures) float64) float64 {
		v := make([]float64, len(rounds))
		for i, r := range rounds {
			v[i] = f(r)
		}
		return measure.Median(v)
	}
	return Figures{
		P50:     col(func(f Figures) float64 { return f.P50 }),
		P90:     col(func(f Figures) float64 { return f.P90 }),
		P99:     col(func(f Figures) float64 { return f.P99 }),
		OpsPerS: col(func(f Figures) float64 { return f.OpsPerS }),
		Pairs:   int64(col(func(f Figures) float64 { return float64(f.Pairs) })),
	}
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report for people.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	c := r.Config
	fmt.Fprintf(tw, "sessions: patch (%d-byte merge patch) + get, %d session(s) × %d client(s), %d round(s) of %s (%s, %d CPUs, nats-server %s)\n",
		c.Size, c.Sessions, c.Clients, c.Rounds, c.Duration/time.Duration(c.Rounds), r.Env.Platform, r.Env.CPUs, r.Env.NATSServer)
	fmt.Fprintf(tw, "%s: bucket %s, %s storage, R%d\n", TargetKV, r.Store.Bucket, r.Store.Storage, r.Store.Replicas)
	fmt.Fprintf(tw, "target (median of rounds)\tp50 µs\tp90 µs\tp99 µs\tops/s\tpairs\n")
	for _, res := range r.Results {
		m := res.Median
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.1f\t%.0f\t%d\n", res.Target, m.P50, m.P90, m.P99, m.OpsPerS, res.Pairs)
	}
	fmt.Fprintf(tw, "semaq / %s\t%.2f×\t\t%.2f×\t\t\n", TargetKV, r.Ratio.P50, r.Ratio.P99)
	if err := tw.Flush(); err != nil {
		return err
	}
	// Rounds go on one line of their own: as cells they would widen the
	// table's columns.
	fmt.Fprintf(w, "ratio by round (p50 / p99):")
	for _, rr := range r.Ratio.ByRound {
		fmt.Fprintf(w, " %.2f/%.2f", rr.P50, rr.P99)
	}
	met := "MISSED"
	if r.Goal.Met {
		met = "met"
	}
	_, err := fmt.Fprintf(w, "\ngoal: p50 ratio <= %.1f×: %s\n", r.Goal.P50Ratio, met)
	return err
}
