package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runBench runs `semaq bench args...`; bench starts its own broker, so
// there is no --server.
func runBench(args ...string) result {
	var stdout, stderr bytes.Buffer
	code := Main(append([]string{"bench"}, args...), strings.NewReader(""), &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// tinyBench are flags for a short run.
var tinyBench = []string{"--duration", "300ms", "--warmup", "100ms", "--size", "256", "--window", "64"}

func TestBenchIngest(t *testing.T) {
	file := filepath.Join(t.TempDir(), "ingest.json")
	r := runBench(append([]string{"ingest", "--json", file}, tinyBench...)...)
	if r.code != 0 {
		t.Fatalf("exit %d, stderr: %s", r.code, r.stderr)
	}
	for _, want := range []string{"ingest: 256-byte messages, envelope with traceparent, sync interval", "semaq vs jetstream", "goals:"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "throughput semaq: round 1/4") {
		t.Errorf("no progress on stderr:\n%s", r.stderr)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Scenario string `json:"scenario"`
		Results  []struct {
			Target     string                           `json:"target"`
			Throughput float64                          `json:"throughput_msgs_per_s"`
			Latency    struct{ P50, P99, P999 float64 } `json:"latency_us"`
			Ratio      *float64                         `json:"ratio_vs_jetstream"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("--json file: %v\n%s", err, b)
	}
	if rep.Scenario != "ingest" || len(rep.Results) != 2 {
		t.Fatalf("--json file: scenario %q, %d results\n%s", rep.Scenario, len(rep.Results), b)
	}
	for _, res := range rep.Results {
		if res.Throughput <= 0 || res.Latency.P50 <= 0 || res.Latency.P999 < res.Latency.P50 {
			t.Errorf("%s: throughput %.1f, latency %+v", res.Target, res.Throughput, res.Latency)
		}
		if (res.Target == "semaq") != (res.Ratio != nil) {
			t.Errorf("%s: ratio_vs_jetstream %v", res.Target, res.Ratio)
		}
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(file), ".ingest.json.tmp*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestBenchIngestJSONStdout(t *testing.T) {
	r := runBench(append([]string{"ingest", "--json", "-", "--quiet", "--targets", "jetstream", "--traceparent=false"}, tinyBench...)...)
	if r.code != 0 {
		t.Fatalf("exit %d, stderr: %s", r.code, r.stderr)
	}
	if r.stderr != "" {
		t.Errorf("--quiet printed on stderr: %s", r.stderr)
	}
	var rep struct {
		Results []struct {
			Target string `json:"target"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("stdout is not the JSON report: %v\n%s", err, r.stdout)
	}
	if len(rep.Results) != 1 || rep.Results[0].Target != "jetstream" {
		t.Errorf("results %+v, want jetstream only", rep.Results)
	}
}

// Bad flags fail before anything runs, with one line naming the problem.
func TestBenchIngestErrors(t *testing.T) {
	t.Parallel()
	missingDir := filepath.Join(t.TempDir(), "no", "such", "dir", "r.json")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown target", []string{"ingest", "--targets", "semaq,rabbitmq"}, `targets: "rabbitmq" is not a target (want semaq, jetstream)`},
		{"empty targets", []string{"ingest", "--targets", ""}, "targets: none given"},
		{"duplicate target", []string{"ingest", "--targets", "semaq, semaq"}, `"semaq" is given twice`},
		{"bad sync", []string{"ingest", "--sync", "never"}, `sync: "never" is not a sync mode`},
		{"zero duration", []string{"ingest", "--duration", "0s"}, "duration: 0s"},
		{"bad duration", []string{"ingest", "--duration", "soon"}, `invalid argument "soon" for "--duration"`},
		{"huge size", []string{"ingest", "--size", "9999999"}, "size: 9999999 bytes"},
		{"zero window", []string{"ingest", "--window", "0"}, "window: 0"},
		{"json dir", []string{"ingest", "--json", missingDir}, "--json " + missingDir},
		{"unknown scenario", []string{"rag"}, `unknown scenario "rag" for "semaq bench" (scenarios: ingest)`},
		{"extra argument", []string{"ingest", "now"}, `unknown command "now" for "semaq bench ingest"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runBench(tt.args...)
			if r.code == 0 {
				t.Fatalf("exit 0, want failure; stdout: %s", r.stdout)
			}
			if !strings.Contains(r.stderr, tt.want) {
				t.Fatalf("stderr %q does not contain %q", r.stderr, tt.want)
			}
			if lines := strings.Split(strings.TrimRight(r.stderr, "\n"), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], "semaq: ") {
				t.Fatalf("stderr is not one \"semaq: \" line: %q", r.stderr)
			}
		})
	}
}
