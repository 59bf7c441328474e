package benchcli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A tiny sessions run measures both targets in every round and reports
// them in the table and in the JSON file.
func TestBenchSessions(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sessions.json")
	r := runBench("sessions", "--json", file, "--duration", "300ms", "--warmup", "50ms", "--rounds", "3", "--sessions", "4", "--clients", "2")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr: %s", r.code, r.stderr)
	}
	for _, want := range []string{"sessions: patch (200-byte merge patch) + get, 4 session(s) × 2 client(s)", "jetstream-kv: bucket", "file storage, R1",
		"semaq / jetstream-kv", "ratio by round (p50 / p99):", "goal: p50 ratio <= 1.5×"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "sessions jetstream-kv: round 2/3") {
		t.Errorf("no progress on stderr:\n%s", r.stderr)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	type figures struct {
		P50     float64 `json:"p50_us"`
		P90     float64 `json:"p90_us"`
		P99     float64 `json:"p99_us"`
		OpsPerS float64 `json:"ops_per_s"`
		Pairs   int64   `json:"pairs"`
	}
	var rep struct {
		Scenario string `json:"scenario"`
		Store    struct {
			Storage  string `json:"storage"`
			Replicas int    `json:"replicas"`
		} `json:"kv_store"`
		Results []struct {
			Target  string    `json:"target"`
			Pairs   int64     `json:"pairs"`
			Median  figures   `json:"median"`
			ByRound []figures `json:"by_round"`
		} `json:"results"`
		Ratio struct {
			P50     float64 `json:"p50"`
			P99     float64 `json:"p99"`
			ByRound []struct {
				P50 float64 `json:"p50"`
				P99 float64 `json:"p99"`
			} `json:"by_round"`
		} `json:"ratio"`
		Goal struct {
			P50Ratio float64 `json:"p50_ratio_at_most"`
		} `json:"goal"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("--json file: %v\n%s", err, b)
	}
	if rep.Scenario != "sessions" || len(rep.Results) != 2 || rep.Results[0].Target != "semaq" || rep.Results[1].Target != "jetstream-kv" {
		t.Fatalf("--json file: scenario %q, results %+v", rep.Scenario, rep.Results)
	}
	if rep.Store.Storage != "file" || rep.Store.Replicas != 1 {
		t.Errorf("kv_store %+v, want file storage, R1", rep.Store)
	}
	for _, res := range rep.Results {
		if len(res.ByRound) != 3 {
			t.Errorf("%s: %d rounds, want 3", res.Target, len(res.ByRound))
		}
		var sum int64
		for _, f := range append(res.ByRound, res.Median) {
			// Two clients, each at least one pair a round.
			if f.Pairs < 2 || f.OpsPerS <= 0 || f.P50 <= 0 || f.P90 < f.P50 || f.P99 < f.P90 {
				t.Errorf("%s: figures %+v", res.Target, f)
			}
		}
		for _, f := range res.ByRound {
			sum += f.Pairs
		}
		if res.Pairs != sum {
			t.Errorf("%s: %d pairs in all, %d by round", res.Target, res.Pairs, sum)
		}
	}
	if rep.Ratio.P50 <= 0 || rep.Ratio.P99 <= 0 || len(rep.Ratio.ByRound) != 3 || rep.Goal.P50Ratio != 1.5 {
		t.Errorf("ratio %+v, goal %+v", rep.Ratio, rep.Goal)
	}
	checkReportMode(t, file)
}

func TestBenchSessionsErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sessions", "0"}, "semaq: --sessions 0 is outside 1..10000\n"},
		{[]string{"--size", "8"}, "semaq: --size 8 is outside 32..65536 bytes\n"},
		{[]string{"--json", filepath.Join(t.TempDir(), "no", "such", "dir.json")}, "semaq: --json "},
	} {
		r := runBench(append([]string{"sessions"}, tc.args...)...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want it to start %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	if r := runAs(Name, "--help"); !strings.Contains(r.stdout, "\n  sessions ") {
		t.Errorf("--help does not list sessions:\n%s", r.stdout)
	}
}
