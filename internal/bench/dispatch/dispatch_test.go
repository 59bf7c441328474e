package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/bench"
	"github.com/semaq/semaq/internal/bench/measure"
)

func TestRunDispatchShort(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Duration = 300 * time.Millisecond
	cfg.Drain, cfg.Rounds, cfg.DrainWorkers = 300, 1, 2
	cfg.CriticalRate, cfg.FloodFactor, cfg.TenantRate, cfg.TenantFactor = 20, 10, 20, 5
	cfg.Dir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	d := rep.Dispatch
	if d.Priority.CriticalCount == 0 || d.Priority.Alone.P99 <= 0 || d.Tenants.Alone.P99 <= 0 || d.Tenants.WithA.P99 <= 0 {
		t.Fatalf("paced phases measured nothing: %+v %+v", d.Priority, d.Tenants)
	}
	// Tenant B beside A in the critical request's form, with what was
	// offered against what the workers could serve.
	tn := d.Tenants
	if want := tn.WithA.P99 - tn.Alone.P99 - tn.ServiceUS; tn.ExtraUS != measure.Round1(want) || tn.ServiceUS != 2000 {
		t.Errorf("tenant X = %v µs (service %v), want with A − alone − service = %v", tn.ExtraUS, tn.ServiceUS, want)
	}
	if tn.OfferedPerS != 20+100 || tn.CapacityPerS != 2000 || tn.ServedPerS <= 0 {
		t.Errorf("tenant phase offered %d/s, capacity %v/s, served %v/s; want 120, 2000 (4 workers × 2 ms), some",
			tn.OfferedPerS, tn.CapacityPerS, tn.ServedPerS)
	}
	// The scheduler's fairness is checked exactly, not measured: two
	// backlogged tenants never drift apart by more than VTC's bound.
	if f := d.Fairness; f.MaxGap > f.Bound || f.TokensA == 0 || f.TokensB == 0 {
		t.Fatalf("fairness: %+v", f)
	}
	if tp := d.Throughput; tp.Semaq <= 0 || tp.Raw <= 0 || tp.Ratio <= 0 {
		t.Fatalf("throughput: %+v", tp)
	}
	// In one process: one CPU figure, the end-to-end wait measured too.
	if d.Mode != bench.DispatchInProcess || len(d.Priority.FloodCPU) != 1 || !d.Priority.FloodCPU[0].Measured || d.Priority.FloodE2E.P99 <= 0 || d.Tenants.WithAE2E.P99 <= 0 {
		t.Fatalf("mode %q, CPU %+v, end to end %+v %+v", d.Mode, d.Priority.FloodCPU, d.Priority.FloodE2E, d.Tenants.WithAE2E)
	}
	if len(rep.Results) != 2 || rep.Results[0].Target != bench.TargetSemaqDispatch {
		t.Fatalf("results: %+v", rep.Results)
	}
}
