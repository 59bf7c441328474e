package benchcli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// result is what one run of the command line produced.
type result struct {
	code           int
	stdout, stderr string
}

// runBench runs `semaq bench args...` (semaq-bench as `semaq bench` runs
// it); bench starts its own broker, so there is no --server.
func runBench(args ...string) result {
	return runAs(SubcommandName, args...)
}

// runAs runs the program called name with args.
func runAs(name string, args ...string) result {
	var stdout, stderr bytes.Buffer
	code := Main(name, args, strings.NewReader(""), &stdout, &stderr)
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
	checkReportMode(t, file)
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(file), ".ingest.json.tmp*")); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if strings.Contains(r.stdout, "paced:") {
		t.Errorf("interval mode ran the paced phase without --rates:\n%s", r.stdout)
	}
}

// --sync always measures group commit against a sync_always server, with
// the paced phase at the default rates.
func TestBenchIngestDurable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "durable.json")
	r := runBench(append([]string{"ingest", "--sync", "always", "--rounds", "2", "--json", file}, tinyBench...)...)
	if r.code != 0 {
		t.Fatalf("exit %d, stderr: %s", r.code, r.stderr)
	}
	for _, want := range []string{
		"sync always",
		"jetstream on its own nats-server (JetStream sync_always true)",
		"semaq on the broker's nats-server (JetStream sync_always false), stream BENCH_SEMAQ, durability fsync",
		"paced:", "goals: durable throughput ≥ 10× jetstream sync_always",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "paced semaq: 10000 msgs/s, round 2/2") {
		t.Errorf("no paced progress on stderr:\n%s", r.stderr)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Config struct {
			Rates []int `json:"rates"`
		} `json:"config"`
		Results []struct {
			Target string `json:"target"`
			Paced  []struct {
				Rate     int     `json:"rate"`
				Achieved float64 `json:"achieved_msgs_per_s"`
			} `json:"paced"`
		} `json:"results"`
		Goals struct {
			Min float64 `json:"durable_throughput_ratio_min"`
			Met *bool   `json:"durable_throughput_met"`
		} `json:"goals"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("--json file: %v\n%s", err, b)
	}
	if len(rep.Config.Rates) != 2 || rep.Config.Rates[0] != 1000 || rep.Config.Rates[1] != 10000 {
		t.Errorf("rates %v, want the default 1000,10000", rep.Config.Rates)
	}
	if rep.Goals.Min != 10 || rep.Goals.Met == nil {
		t.Errorf("goals lack the durable goal:\n%s", b)
	}
	for _, res := range rep.Results {
		if len(res.Paced) != 2 || res.Paced[0].Rate != 1000 || res.Paced[1].Achieved <= 0 {
			t.Errorf("%s: paced %+v", res.Target, res.Paced)
		}
	}
}

// --e2e times the paced messages to their receipt by a consumer, at the
// default rates when --rates is not given, and the report carries the
// end-to-end goal.
func TestBenchIngestE2E(t *testing.T) {
	file := filepath.Join(t.TempDir(), "e2e.json")
	r := runBench(append([]string{"ingest", "--e2e", "--rounds", "2", "--json", file}, tinyBench...)...)
	if r.code != 0 {
		t.Fatalf("exit %d, stderr: %s", r.code, r.stderr)
	}
	for _, want := range []string{"paced:", "end to end: publish → receipt by a pull consumer", "goals: end-to-end p99 at 10000 msgs/s ≤ 1.2× jetstream: "} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Config struct {
			Rates []int `json:"rates"`
			E2E   bool  `json:"e2e"`
		} `json:"config"`
		Results []struct {
			Target string `json:"target"`
			Paced  []struct {
				Rate int `json:"rate"`
				E2E  *struct {
					Received int64 `json:"received"`
				} `json:"e2e"`
			} `json:"paced"`
		} `json:"results"`
		Goals struct {
			E2E *struct {
				Rate int     `json:"rate"`
				Max  float64 `json:"p99_ratio_max"`
			} `json:"e2e"`
		} `json:"goals"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("--json file: %v\n%s", err, b)
	}
	if !rep.Config.E2E || !slices.Equal(rep.Config.Rates, []int{1000, 10000}) {
		t.Errorf("config e2e %v, rates %v; want e2e at the default 1000,10000", rep.Config.E2E, rep.Config.Rates)
	}
	if g := rep.Goals.E2E; g == nil || g.Rate != 10000 || g.Max != 1.2 {
		t.Errorf("goals lack the end-to-end goal:\n%s", b)
	}
	for _, res := range rep.Results {
		for _, p := range res.Paced {
			if p.E2E == nil || p.E2E.Received <= 0 {
				t.Errorf("%s at %d msgs/s: end to end %+v", res.Target, p.Rate, p.E2E)
			}
		}
	}
}

func TestBenchParseRates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in, sync string
		given    bool
		want     []int
	}{
		{"", "always", false, []int{1000, 10000}},
		{"", "interval", false, nil},
		{"none", "always", true, nil},
		{"500, 2000", "interval", true, []int{500, 2000}},
	}
	for _, tt := range tests {
		got, err := parseRates(tt.in, tt.sync, tt.given)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("parseRates(%q, %s, %v) = %v, %v; want %v", tt.in, tt.sync, tt.given, got, err, tt.want)
		}
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
		{"unknown target", []string{"ingest", "--targets", "semaq,rabbitmq"}, `targets: "rabbitmq" is not a target (want semaq, semaq-noschema, jetstream, jetstream-relay, semaq-interval, jetstream-interval)`},
		{"empty targets", []string{"ingest", "--targets", ""}, "targets: none given"},
		{"duplicate target", []string{"ingest", "--targets", "semaq, semaq"}, `"semaq" is given twice`},
		{"bad sync", []string{"ingest", "--sync", "never"}, `sync: "never" is not a sync mode`},
		{"zero duration", []string{"ingest", "--duration", "0s"}, "duration: 0s"},
		{"bad duration", []string{"ingest", "--duration", "soon"}, `invalid argument "soon" for "--duration"`},
		{"huge size", []string{"ingest", "--size", "9999999"}, "size: 9999999 bytes"},
		{"zero window", []string{"ingest", "--window", "0"}, "window: 0"},
		{"bad rate", []string{"ingest", "--rates", "1000,fast"}, `rates: "fast" is not a number of msgs/s`},
		{"zero rate", []string{"ingest", "--sync", "always", "--rates", "0"}, "rates: 0 msgs/s is outside 1..1000000"},
		{"too many routes", []string{"ingest", "--routes", "101"}, "routes: 101 is outside 0..100"},
		{"e2e without rates", []string{"ingest", "--e2e", "--rates", "none"}, "e2e: the end-to-end latency is measured in the paced phase; give one or more rates"},
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

// The ready-made pair in bench/schemas.
var (
	benchSchema = filepath.Join("..", "..", "bench", "schemas", "inference-request.json")
	benchSample = filepath.Join("..", "..", "bench", "schemas", "inference-request.sample.json")
)

// tinySchemaBench are flags for a short run that sends the sample as is.
var tinySchemaBench = []string{"--duration", "300ms", "--warmup", "100ms", "--window", "64", "--rounds", "2"}

// --schema binds the SemaQ stream to the schema and sends the sample beside
// it; semaq, semaq-noschema and jetstream run, and the report says what was
// enforced and what validating one payload costs.
func TestBenchIngestSchema(t *testing.T) {
	file := filepath.Join(t.TempDir(), "schema.json")
	r := runBench(append([]string{"ingest", "--schema", benchSchema, "--json", file}, tinySchemaBench...)...)
	if r.code != 0 {
		t.Fatalf("exit %d, stderr: %s", r.code, r.stderr)
	}
	for _, want := range []string{
		"ingest: 304-byte messages",
		"stream BENCH_SEMAQ, durability interval: no fsync before the ack, every message validated against registry subject bench-semaq-value",
		"payload: " + benchSample + ", 304 bytes, sent as is",
		"schema: JSON " + benchSchema + ", registry subject bench-semaq-value, id 1; payloads in plain JSON",
		"validation in process", "ns/op",
		"goals: throughput with JSON schema enforcement ≥ 0.70× jetstream",
		"goals: JSON validation ≤ 10 µs",
		"schema enforcement: semaq at",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "timing JSON validation of the 304-byte payload") {
		t.Errorf("no validation progress on stderr:\n%s", r.stderr)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Config struct {
			Size   int `json:"size"`
			Schema struct {
				Type    string `json:"type"`
				Subject string `json:"subject"`
				ID      int    `json:"id"`
			} `json:"schema"`
			Setup []struct {
				Target string `json:"target"`
				Schema string `json:"schema"`
			} `json:"setup"`
		} `json:"config"`
		Results []struct {
			Target string `json:"target"`
			Msgs   int64  `json:"msgs"`
			Errors int64  `json:"errors"`
		} `json:"results"`
		Goals struct {
			Min float64 `json:"throughput_ratio_min"`
		} `json:"goals"`
		Validation struct {
			NSPerOp float64 `json:"ns_per_op"`
			Bytes   int     `json:"payload_bytes"`
		} `json:"validation"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("--json file: %v\n%s", err, b)
	}
	c := rep.Config
	if c.Size != 304 || c.Schema.Type != "JSON" || c.Schema.Subject != "bench-semaq-value" || c.Schema.ID != 1 {
		t.Errorf("config: size %d, schema %+v", c.Size, c.Schema)
	}
	if len(c.Setup) != 3 || c.Setup[0].Schema != "bench-semaq-value" || c.Setup[1].Schema != "" || c.Setup[2].Schema != "" {
		t.Errorf("setup %+v: want semaq bound, semaq-noschema and jetstream not", c.Setup)
	}
	if len(rep.Results) != 3 || rep.Results[1].Target != "semaq-noschema" {
		t.Fatalf("results %+v, want semaq, semaq-noschema, jetstream", rep.Results)
	}
	for _, res := range rep.Results {
		if res.Msgs <= 0 || res.Errors != 0 {
			t.Errorf("%s: %d msgs, %d errors", res.Target, res.Msgs, res.Errors)
		}
	}
	if rep.Goals.Min != 0.7 || rep.Validation.NSPerOp <= 0 || rep.Validation.Bytes != 304 {
		t.Errorf("goals %+v, validation %+v", rep.Goals, rep.Validation)
	}
}

// A payload the schema refuses, or a schema without one, fails before
// anything runs, with one line naming the problem.
func TestBenchIngestSchemaErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sample, err := os.ReadFile(benchSample)
	if err != nil {
		t.Fatal(err)
	}
	badRole := write("bad-role.json", strings.Replace(string(sample), `"role":"user"`, `"role":"admin"`, 1))
	noModel := write("no-model.json", `{"messages":[{"role":"user","content":"hi"}]}`)
	lone := write("lone.json", `{"type":"object"}`)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"bad role", []string{"--schema", benchSchema, "--payload", badRole},
			"payload: " + badRole + " does not match " + benchSchema + ": payload invalid at /messages/1/role"},
		{"missing field", []string{"--schema", benchSchema, "--payload", noModel}, `missing property "model"`},
		{"avro", []string{"--schema", benchSchema, "--schema-type", "avro", "--payload", benchSample}, "does not parse as AVRO"},
		{"no sample", []string{"--schema", lone}, "--schema " + lone + " needs a sample payload that matches it: give --payload FILE"},
		{"too small", []string{"--schema", benchSchema, "--size", "100"}, "size: 100 bytes is less than " + benchSample + " takes as sent (304 bytes)"},
		{"bad type", []string{"--schema", benchSchema, "--schema-type", "xml"}, `--schema-type: "xml" is not json, avro or protobuf`},
		{"type alone", []string{"--schema-type", "avro"}, "--schema-type needs --schema"},
		{"missing schema", []string{"--schema", filepath.Join(dir, "none.json"), "--payload", benchSample}, "--schema: open "},
		{"noschema alone", []string{"--targets", "semaq-noschema"}, `"semaq-noschema" is the comparison for a run with a schema`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := runBench(append([]string{"ingest"}, tt.args...)...)
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

func TestBenchSchemaTypeOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file, typ string
		given     bool
		want      string
	}{
		{"a.json", "", false, "JSON"},
		{"a.AVSC", "", false, "AVRO"},
		{"dir/a.proto", "", false, "PROTOBUF"},
		{"a.schema", "", false, "JSON"},
		{"a.json", "Avro", true, "AVRO"},
		{"a.txt", "protobuf", true, "PROTOBUF"},
	}
	for _, tt := range tests {
		got, err := schemaTypeOf(tt.file, tt.typ, tt.given)
		if err != nil || string(got) != tt.want {
			t.Errorf("schemaTypeOf(%q, %q, %v) = %q, %v; want %s", tt.file, tt.typ, tt.given, got, err, tt.want)
		}
	}
}

// --ceiling measures the no-fsync pair beside the durable one and prints
// the ceiling; --cpuprofile leaves a profile behind.
func TestBenchIngestCeiling(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "cpu.pb")
	r := runBench(append([]string{"ingest", "--sync", "always", "--ceiling", "--rates", "none", "--rounds", "1", "--quiet", "--cpuprofile", prof}, tinyBench...)...)
	if r.code != 0 {
		t.Fatalf("exit %d, stderr: %s", r.code, r.stderr)
	}
	for _, want := range []string{"semaq-interval vs jetstream", "jetstream-interval vs jetstream", "ceiling (same run): disk: jetstream-interval over jetstream sync_always", "group commit: semaq fsync over semaq-interval"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}
	if st, err := os.Stat(prof); err != nil || st.Size() == 0 {
		t.Errorf("no CPU profile: %v", err)
	}
	r = runBench("ingest", "--ceiling")
	if r.code == 0 || !strings.Contains(r.stderr, "--ceiling goes with --sync always") {
		t.Errorf("--ceiling with sync interval: exit %d, stderr %q", r.code, r.stderr)
	}
}
