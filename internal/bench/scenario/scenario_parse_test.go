package scenario

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/bench"
)

const minimalScenario = `name: x
pattern: queue
duration: 2s
rate: 100
payload: {min: 10, max: 20}
`

func TestParseScenarioDefaults(t *testing.T) {
	sc, err := ParseScenario([]byte(minimalScenario), "x.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := Scenario{Name: "x", Pattern: PatternQueue, Duration: 2 * time.Second, Interval: time.Second, Rate: 100,
		Publishers: 1, Window: 256, Consumers: 1, Hops: 1, Sessions: 1, AckWait: 30 * time.Second, Payload: SizeRange{10, 20}}
	if sc.Name != want.Name || sc.Duration != want.Duration || sc.Interval != want.Interval || sc.Window != want.Window ||
		sc.Consumers != want.Consumers || sc.Hops != want.Hops || sc.AckWait != want.AckWait || sc.Payload != want.Payload {
		t.Errorf("parsed %+v, want %+v", *sc, want)
	}
}

func TestParseScenarioErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"empty", "", "empty file"},
		{"unknown key", minimalScenario + "consumer: 3\n", "field consumer not found"},
		{"no name", "duration: 1s\n", "name: missing"},
		{"pattern", "name: x\npattern: fanout\nduration: 1s\n", `"fanout" is not a pattern`},
		{"duration", "name: x\nduration: 2h\n", "duration: 2h0m0s is outside"},
		{"bad duration", "name: x\nduration: soon\n", "soon"},
		{"rate", minimalScenario + "publishers: 0\nwindow: -1\n", "window: -1"},
		{"hops without pipeline", minimalScenario + "hops: 3\n", "need pattern pipeline"},
		{"payload range", "name: x\nduration: 1s\npayload: {min: 20, max: 10}\n", "payload: 20..10"},
		{"payload too big", "name: x\nduration: 1s\npayload: {min: 1, max: 99999999}\n", "payload"},
		{"tokens missing", "name: x\npattern: tokens\nduration: 1s\n", "needs a tokens section"},
		{"tokens elsewhere", minimalScenario + "tokens: {per_stream: 1, bytes: 1, context_window: 1}\n", "only pattern tokens"},
		{"context window", "name: x\npattern: tokens\nduration: 1s\ntokens: {per_stream: 10, bytes: 4, context_window: 0}\n", "tokens.context_window: 0"},
		{"ack wait", minimalScenario + "ack_wait: 1ms\n", "ack_wait: 1ms"},
		{"interval", minimalScenario + "interval: 5s\n", "interval: 5s"},
		{"short", minimalScenario + "short: {rate: -1}\n", "short.rate: -1"},
		{"not a mapping", "- a\n- b\n", "cannot unmarshal"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseScenario([]byte(tc.yaml), "t.yaml")
			if !errors.Is(err, bench.ErrBadConfig) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "t.yaml") {
				t.Errorf("err = %v, want ErrBadConfig naming t.yaml and %q", err, tc.want)
			}
		})
	}
}

func TestLoadScenario(t *testing.T) {
	if _, err := LoadScenario("nope"); !errors.Is(err, bench.ErrBadConfig) || !strings.Contains(err.Error(), "rag") {
		t.Errorf("unknown name: err = %v, want ErrBadConfig listing the scenarios", err)
	}
	file := filepath.Join(t.TempDir(), "mine.yaml")
	if err := os.WriteFile(file, []byte(minimalScenario), 0o600); err != nil {
		t.Fatal(err)
	}
	sc, err := LoadScenario(file)
	if err != nil || sc.Name != "x" {
		t.Errorf("file: %+v, %v", sc, err)
	}
	if _, err := LoadScenario(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, bench.ErrBadConfig) {
		t.Errorf("missing file: err = %v, want ErrBadConfig", err)
	}
}

// Short mode keeps every shipped scenario to seconds.
func TestShortened(t *testing.T) {
	for _, name := range ScenarioNames() {
		sc, err := LoadScenario(name)
		if err != nil {
			t.Fatal(err)
		}
		s := sc.shortened()
		if s.Duration+s.Warmup > 2*time.Second || s.Interval > s.Duration/2 {
			t.Errorf("%s short: %s + %s warm-up, interval %s", name, s.Duration, s.Warmup, s.Interval)
		}
		if sc.Rate > 0 && (s.Rate <= 0 || s.Rate > sc.Rate) {
			t.Errorf("%s short: rate %d from %d", name, s.Rate, sc.Rate)
		}
		if err := s.Validate(); err != nil {
			t.Errorf("%s short: %v", name, err)
		}
	}
}

func FuzzParseScenario(f *testing.F) {
	for _, name := range ScenarioNames() {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", "bench", "scenarios", name+".yaml"))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(minimalScenario))
	f.Add([]byte("name: [\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		sc, err := ParseScenario(b, "fuzz.yaml")
		if err != nil {
			if !errors.Is(err, bench.ErrBadConfig) {
				t.Fatalf("error %v is not ErrBadConfig", err)
			}
			return
		}
		// Whatever parses must be a runnable scenario.
		if err := sc.Validate(); err != nil {
			t.Fatalf("parsed scenario fails Validate: %v", err)
		}
		short := sc.shortened()
		if err := short.Validate(); err != nil {
			t.Fatalf("short form of a valid scenario fails Validate: %v", err)
		}
	})
}
