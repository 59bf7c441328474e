package benchcli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBenchRun(t *testing.T) {
	dir := t.TempDir()
	jsonFile, htmlFile := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.html")
	r := runBench("run", "rl-feedback", "--short", "--targets", "semaq,jetstream,rabbitmq,rabbitmq-quorum",
		"--rabbitmq-url", "amqp://guest:guest@127.0.0.1:1/", "--json", jsonFile, "--html", htmlFile)
	if r.code != 0 {
		t.Fatalf("exit %d, stderr: %s", r.code, r.stderr)
	}
	for _, want := range []string{"rl-feedback (short): queue; seed 20260104", "semaq vs jetstream", "  rabbitmq: unreachable: ", "  rabbitmq-quorum: unreachable: ", "goals:"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "jetstream: rl-feedback") {
		t.Errorf("no progress on stderr:\n%s", r.stderr)
	}
	b, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Scenario string `json:"scenario"`
		Results  []struct {
			Target      string  `json:"target"`
			Throughput  float64 `json:"throughput_msgs_per_s"`
			Unreachable string  `json:"unreachable"`
			Series      []any   `json:"series"`
		} `json:"results"`
		Findings []any `json:"findings"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("--json: %v", err)
	}
	if rep.Scenario != "rl-feedback" || len(rep.Results) != 4 || rep.Findings == nil {
		t.Fatalf("--json: scenario %q, %d results, findings %v", rep.Scenario, len(rep.Results), rep.Findings)
	}
	for _, res := range rep.Results[:2] {
		if res.Throughput <= 0 || len(res.Series) == 0 {
			t.Errorf("%s: %.0f msgs/s, %d series points", res.Target, res.Throughput, len(res.Series))
		}
	}
	for i, target := range []string{"rabbitmq", "rabbitmq-quorum"} {
		res := rep.Results[2+i]
		if res.Target != target || !strings.HasPrefix(res.Unreachable, "unreachable: ") {
			t.Errorf("result %d: %s unreachable %q, want %s unreachable", 2+i, res.Target, res.Unreachable, target)
		}
	}
	checkReportMode(t, jsonFile)
	checkReportMode(t, htmlFile)
	page, err := os.ReadFile(htmlFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "<svg") || !strings.Contains(string(page), "rl-feedback") {
		t.Errorf("--html page has no charts")
	}
}

// RabbitMQ is absent on most machines: by default it is not a target, and
// the run says how to add it.
func TestBenchRunDefaultTargets(t *testing.T) {
	jsonFile := filepath.Join(t.TempDir(), "r.json")
	r := runBench("run", "rl-feedback", "--short", "--json", jsonFile)
	if r.code != 0 {
		t.Fatalf("exit %d, stderr: %s", r.code, r.stderr)
	}
	if strings.Contains(r.stdout, "rabbitmq") {
		t.Errorf("table mentions rabbitmq, which was not asked for:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "rabbitmq: not measured; add it with --targets semaq,jetstream,rabbitmq (classic queues) or rabbitmq-quorum (quorum queues") {
		t.Errorf("stderr does not say how to add rabbitmq:\n%s", r.stderr)
	}
	b, err := os.ReadFile(jsonFile)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Results []struct {
			Target string `json:"target"`
		} `json:"results"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, res := range rep.Results {
		got = append(got, res.Target)
	}
	if strings.Join(got, ",") != "semaq,jetstream" {
		t.Errorf("targets %v, want semaq,jetstream", got)
	}
	checkReportMode(t, jsonFile)
}

// checkReportMode: reports are readable by all, as other tools write them
// (not os.CreateTemp's 0600).
func checkReportMode(t *testing.T, path string) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Errorf("%s: mode %v, want 0644", path, st.Mode().Perm())
	}
}

func TestBenchRunErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run"}, "give one scenario: agent, finetune, rag, rl-feedback, tokens"},
		{[]string{"run", "nope"}, `"nope" is not a scenario`},
		{[]string{"run", "rag", "--targets", "kafka"}, `"kafka" is not a target`},
		{[]string{"run", "rag", "--targets", "semaq,rabbitmq_quorum"}, `"rabbitmq_quorum" is not a target (want semaq, jetstream, rabbitmq, rabbitmq-quorum)`},
		{[]string{"run", "rag", "--targets", "rabbitmq-quorum, rabbitmq-quorum"}, `"rabbitmq-quorum" is given twice`},
		{[]string{"run", "rag", "--consumers", "0"}, "consumers: 0 is outside"},
		{[]string{"run", "rag", "--rate", "-5"}, "rate: -5"},
		{[]string{"run", filepath.Join(t.TempDir(), "missing.yaml")}, "missing.yaml"},
		{[]string{"run", "rag", "--json", filepath.Join(t.TempDir(), "no", "such", "dir", "r.json")}, "--json"},
	} {
		r := runBench(tc.args...)
		if r.code == 0 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("bench %s: exit %d, stderr %q, want an error naming %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}
}

// An interrupted run (SIGINT before it measured anything) says so once and
// exits 130, as semaq's own commands do.
func TestRunInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, Name, []string{"run", "rl-feedback", "--short", "--quiet", "--data", t.TempDir()}, nil, &stdout, &stderr)
	if code != exitInterrupted || stderr.String() != "semaq-bench: interrupted\n" {
		t.Fatalf("exit %d, stderr %q; want 130 and one line saying so", code, stderr.String())
	}
}
