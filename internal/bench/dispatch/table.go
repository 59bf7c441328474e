package dispatch

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/semaq/semaq/internal/bench"
)

// WriteTable prints the dispatch report for people.
func WriteTable(w io.Writer, rep *bench.Report) error {
	d := rep.Dispatch
	if d == nil {
		return errors.New("bench: not a dispatch report")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p, t, f, tp := d.Priority, d.Tenants, d.Fairness, d.Throughput
	fmt.Fprintf(tw, "mode\t%s, workers' acks %s\t\n", d.Mode, d.WorkerAcks)
	fmt.Fprintf(tw, "priority isolation\tcritical %d/s alone p99 %.0f µs; with %d/s bulk flood p99 %.0f µs (bulk p99 %.0f µs, %d bulk left queued)\t%.2f×\n",
		p.CriticalRate, p.Alone.P99, p.BulkRate, p.Flood.P99, p.BulkWait.P99, p.BulkBacklog, p.P99Ratio)
	fmt.Fprintf(tw, "critical under flood\tp99 %.0f µs = alone %.0f + service %.0f + X %.0f µs\tX %.2f ms (goal ≤ %.0f ms)\n",
		p.Flood.P99, p.Alone.P99, p.ServiceUS, p.ExtraUS, p.ExtraUS/1e3, p.ExtraGoalUS/1e3)
	fmt.Fprintf(tw, "  end to end\tp99 %.0f µs = alone %.0f + service %.0f + X %.0f µs\tX %.2f ms\n",
		p.FloodE2E.P99, p.AloneE2E.P99, p.ServiceUS, p.ExtraE2EUS, p.ExtraE2EUS/1e3)
	fmt.Fprintf(tw, "  workers under flood\t%.0f requests/s served; service p50 %.0f p99 %.0f µs; between two jobs Job.Ack p50 %.0f p99 %.0f µs (alone p50 %.0f p99 %.0f), Fetch p50 %.0f p99 %.0f µs\t\n",
		p.FloodServedPerS, p.FloodService.P50, p.FloodService.P99, p.FloodAck.P50, p.FloodAck.P99, p.AloneAck.P50, p.AloneAck.P99, p.FloodFetch.P50, p.FloodFetch.P99)
	fmt.Fprintf(tw, "  CPU, flood phase\t%s\t\n", cpuLine(p.FloodCPU))
	fmt.Fprintf(tw, "tenant isolation\tB %d/s alone p99 %.0f µs; with A at %d/s p99 %.0f µs (A p99 %.0f µs)\t%.2f× (goal ≤ %.1f×)\n",
		t.BRate, t.Alone.P99, t.ARate, t.WithA.P99, t.AWait.P99, t.P99Ratio, t.Goal)
	fmt.Fprintf(tw, "  as alone + service + X\tB with A p99 %.0f µs = alone %.0f + service %.0f + X %.0f µs; offered %d/s against a nominal capacity of %.0f/s, %.0f/s served\tX %.2f ms\n",
		t.WithA.P99, t.Alone.P99, t.ServiceUS, t.ExtraUS, t.OfferedPerS, t.CapacityPerS, t.ServedPerS, t.ExtraUS/1e3)
	fmt.Fprintf(tw, "  end to end\tB alone p99 %.0f µs; with A p99 %.0f µs\t%.2f×\n", t.AloneE2E.P99, t.WithAE2E.P99, t.E2ERatio)
	fmt.Fprintf(tw, "  CPU, with A\t%s\t\n", cpuLine(t.WithACPU))
	fmt.Fprintf(tw, "token fairness\t%d requests: A %d tokens (%d each), B %d tokens (%d each); max gap %d of VTC bound %d\t%.2f of bound\n",
		f.Requests, f.TokensA, f.SizeA, f.TokensB, f.SizeB, f.MaxGap, f.Bound, f.GapOfBound)
	fmt.Fprintf(tw, "throughput\tdispatcher %.0f msg/s vs raw JetStream pull %.0f msg/s (%d workers, batch %d, %s acks; rounds %v)\t%.2f× (goal ≥ %.1f×)\n",
		tp.Semaq, tp.Raw, tp.Workers, tp.Batch, tp.Acks, tp.Rounds, tp.Ratio, tp.Goal)
	return tw.Flush()
}

// cpuLine is each process's CPU use over a phase, in cores (CPU seconds
// over wall seconds), with its placement.
func cpuLine(procs []bench.ProcessCPU) string {
	var parts []string
	for _, p := range procs {
		s := p.Role + " n/a"
		if p.Measured {
			s = fmt.Sprintf("%s %.2f", p.Role, p.Utilisation)
		}
		if p.Placement != "" {
			s += " (" + p.Placement + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}
