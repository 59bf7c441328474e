package benchcli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/bench"
)

// `dispatch --processes` runs its generators and workers as children of
// the program (its hidden child command) and says so, with their CPU use.
func TestBenchDispatchProcesses(t *testing.T) {
	file := filepath.Join(t.TempDir(), "dispatch.json")
	r := runAs(Name, "dispatch", "--processes", "--nice", "3", "--worker-ack-nowait", "--quiet", "--json", file,
		"--duration", "300ms", "--critical-rate", "20", "--flood-factor", "10", "--tenant-rate", "20", "--tenant-factor", "5",
		"--drain", "300", "--drain-workers", "2", "--rounds", "1")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr: %s", r.code, r.stderr)
	}
	for _, want := range []string{"mode", "processes, workers' acks nowait", "critical under flood", "= alone", "+ X", "generator bulk", "nice 3", "generator A"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var rep bench.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if d := rep.Dispatch; d == nil || d.Mode != bench.DispatchProcesses || d.WorkerAcks != "nowait" || len(d.Priority.FloodCPU) != 4 || d.Priority.ExtraGoalUS != 2000 {
		t.Fatalf("report: %s", b)
	}
}

func TestBenchDispatchPlacementNeedsProcesses(t *testing.T) {
	t.Parallel()
	r := runAs(Name, "dispatch", "--pin")
	if r.code != 1 || !strings.Contains(r.stderr, "need the processes mode (--processes)") {
		t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
	}
}
