//go:build unix

package dispatch

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/bench"
	"github.com/semaq/semaq/internal/bench/measure"
)

// shortDispatch is a paced configuration small enough for tests.
func shortDispatch(t *testing.T) Config {
	cfg := DefaultConfig()
	cfg.Duration = 300 * time.Millisecond
	cfg.Drain, cfg.Rounds, cfg.DrainWorkers = 300, 1, 2
	cfg.CriticalRate, cfg.FloodFactor, cfg.TenantRate, cfg.TenantFactor = 20, 10, 20, 5
	cfg.Dir = t.TempDir()
	return cfg
}

// newDispatchRun starts a broker for the paced phases alone.
func newDispatchRun(t *testing.T, ctx context.Context, cfg Config) *dispatchRun {
	t.Helper()
	srv, op, err := startDispatchBroker(ctx, cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	d := &dispatchRun{cfg: cfg, srv: srv, op: op, data: textPayload(cfg.Size)}
	t.Cleanup(d.closeClients)
	return d
}

// pidRecorder collects the children of every phase.
type pidRecorder struct {
	mu   sync.Mutex
	pids []int
}

func (r *pidRecorder) add(pids []int) {
	r.mu.Lock()
	r.pids = append(r.pids, pids...)
	r.mu.Unlock()
}

// assertGone fails for every recorded child still running (or a zombie
// never reaped, which signal 0 still finds).
func (r *pidRecorder) assertGone(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pids) == 0 {
		t.Fatal("no child process was started")
	}
	for _, pid := range r.pids {
		if pid == os.Getpid() {
			t.Fatalf("child pid %d is the test's own", pid)
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("child %d outlived the run (signal 0: %v)", pid, err)
		}
	}
}

// The processes mode runs the load generators and the workers as child
// processes of the bench binary, hands their waits and CPU use back, and
// leaves no child behind.
func TestDispatchProcesses(t *testing.T) {
	cfg := shortDispatch(t)
	cfg.Processes = true
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := newDispatchRun(t, ctx, cfg)
	var rec pidRecorder
	d.onChildren = rec.add
	rep := &bench.DispatchReport{}
	if err := d.priority(ctx, rep); err != nil {
		t.Fatal(err)
	}
	if err := d.tenants(ctx, rep); err != nil {
		t.Fatal(err)
	}
	p, tn := rep.Priority, rep.Tenants
	if p.CriticalCount == 0 || p.Alone.P99 <= 0 || p.Flood.P99 <= 0 || p.AloneE2E.P99 <= 0 || p.FloodE2E.P99 <= 0 {
		t.Fatalf("priority phases measured nothing: %+v", p)
	}
	if tn.Alone.P99 <= 0 || tn.WithA.P99 <= 0 || tn.AloneE2E.P99 <= 0 || tn.WithAE2E.P99 <= 0 {
		t.Fatalf("tenant phases measured nothing: %+v", tn)
	}
	// The end-to-end wait holds the broker's: it starts before the
	// ingress and ends after the dispatch.
	if p.FloodE2E.Max < p.Flood.P50 {
		t.Errorf("end-to-end wait %v below the broker's %v", p.FloodE2E, p.Flood)
	}
	if want := p.Flood.P99 - p.Alone.P99 - p.ServiceUS; p.ExtraUS != measure.Round1(want) || p.ExtraGoalUS != 2000 {
		t.Errorf("X = %v µs (goal %v), want flood − alone − service = %v", p.ExtraUS, p.ExtraGoalUS, want)
	}
	if p.FloodServedPerS <= 0 || p.FloodService.P50 < 2000 || p.FloodAck.P50 <= 0 || p.AloneAck.P50 <= 0 || p.FloodFetch.P50 <= 0 {
		t.Errorf("workers' round trips under the flood not handed back: %v/s, ack %+v, fetch %+v", p.FloodServedPerS, p.FloodAck, p.FloodFetch)
	}
	roles := []string{"broker", "workers", "generator critical", "generator bulk"}
	if len(p.FloodCPU) != len(roles) {
		t.Fatalf("flood phase processes: %+v", p.FloodCPU)
	}
	pids := map[int]bool{}
	for i, pc := range p.FloodCPU {
		if pc.Role != roles[i] || !pc.Measured || pc.WallSeconds <= 0 || pids[pc.PID] {
			t.Errorf("process %d: %+v, want role %q, measured, a pid of its own", i, pc, roles[i])
		}
		pids[pc.PID] = true
	}
	if p.FloodCPU[0].PID != os.Getpid() {
		t.Errorf("the broker is pid %d, not this process", p.FloodCPU[0].PID)
	}
	rec.assertGone(t)
}

// A run whose broker goes away fails at once, without waiting for the
// phase to end, and takes its children with it.
func TestDispatchProcessesBrokerStopped(t *testing.T) {
	cfg := shortDispatch(t)
	cfg.Processes = true
	cfg.Duration = 10 * time.Minute // the children must not serve it out
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := newDispatchRun(t, ctx, cfg)
	var rec pidRecorder
	d.onChildren = func(pids []int) {
		rec.add(pids)
		d.srv.Shutdown(context.Background())
	}
	err := d.priority(ctx, &bench.DispatchReport{})
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the children's failure", err)
	}
	if !strings.Contains(err.Error(), "broker") {
		t.Errorf("err = %v, want it to name the broker's connection", err)
	}
	rec.assertGone(t)
}

// A run cancelled while its children work kills them.
func TestDispatchProcessesCancelled(t *testing.T) {
	cfg := shortDispatch(t)
	cfg.Processes = true
	cfg.Duration = 10 * time.Minute
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := newDispatchRun(t, ctx, cfg)
	rctx, rcancel := context.WithCancel(ctx)
	var rec pidRecorder
	d.onChildren = func(pids []int) {
		rec.add(pids)
		rcancel()
	}
	if err := d.priority(rctx, &bench.DispatchReport{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	rec.assertGone(t)
}

// A child told nonsense says what was wrong with it and exits non-zero.
func TestDispatchChildBadRequest(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"", "reading the request: EOF"},
		{"{not json\n", "bad request"},
		{`{"role":"boss"}` + "\n", `role "boss" is neither workers nor load`},
		{`{"role":"load","url":"nats://127.0.0.1:1","load":{"name":"bulk"}}` + "\n", "load bulk:"},
	}
	for _, tt := range tests {
		var out, errw strings.Builder
		code := ChildMain(context.Background(), strings.NewReader(tt.in), &out, &errw)
		if code != 1 || !strings.Contains(errw.String(), tt.want) || out.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 1 and %q", tt.in, code, out.String(), errw.String(), tt.want)
		}
	}
}

func TestDispatchConfigPlacementNeedsProcesses(t *testing.T) {
	t.Parallel()
	for _, mod := range []func(*Config){
		func(c *Config) { c.Pin = true },
		func(c *Config) { c.Nice = 5 },
	} {
		cfg := DefaultConfig()
		mod(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "processes") {
			t.Errorf("%+v: err = %v, want one naming processes", cfg, err)
		}
	}
	cfg := DefaultConfig()
	cfg.Processes, cfg.Nice = true, 40
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "nice 40") {
		t.Errorf("nice 40: err = %v", err)
	}
}
