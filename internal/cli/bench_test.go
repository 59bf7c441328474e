package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/benchcli"
)

// `semaq bench` runs semaq-bench. In these tests the test binary is that
// program: findBench names it, and run under semaq-bench's argv[0] it runs
// the benchmark command line instead of the tests. The command line is
// tested in internal/benchcli; here, that semaq bench hands it the
// arguments, the streams and the exit code.
func init() {
	if len(os.Args) > 0 && os.Args[0] == benchArgv0 {
		os.Exit(benchcli.Main(benchcli.SubcommandName, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	findBench = os.Executable
}

// runBench runs `semaq bench args...`; bench starts its own broker, so
// there is no --server.
func runBench(args ...string) result {
	var stdout, stderr bytes.Buffer
	code := Main(append([]string{"bench"}, args...), strings.NewReader(""), &stdout, &stderr)
	return result{code, stdout.String(), stderr.String()}
}

// semaq bench passes the arguments on and ends with semaq-bench's exit code
// and its error line, unchanged.
func TestBenchRunsSemaqBench(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"ingest", "--sync", "never"}, `semaq: bench: invalid configuration: sync: "never" is not a sync mode`},
		{[]string{"ingest", "now"}, `semaq: unknown command "now" for "semaq bench ingest"` + "\n"},
		{[]string{"run"}, "semaq: give one scenario: agent, finetune, rag, rl-feedback, tokens, or a YAML file\n" +
			"Usage: semaq bench run SCENARIO|FILE [flags]\n"},
	} {
		r := runBench(tc.args...)
		if r.code != 1 || !strings.HasPrefix(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("semaq bench %s: exit %d, stdout %q, stderr %q; want exit 1 and stderr starting %q",
				strings.Join(tc.args, " "), r.code, r.stdout, r.stderr, tc.want)
		}
	}
	r := runBench("ingest", "--help")
	if r.code != 0 || !strings.Contains(r.stdout, "Usage:\n  semaq bench ingest [flags]") || !strings.Contains(r.stdout, "--sync string") {
		t.Errorf("semaq bench ingest --help: exit %d, stdout %s, stderr %s", r.code, r.stdout, r.stderr)
	}
}

// A bare semaq bench, or with --help, answers without semaq-bench: it lists
// the subcommands and says where they come from.
func TestBenchHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{nil, {"--help"}, {"-h"}} {
		r := runBench(args...)
		if r.code != 0 {
			t.Fatalf("semaq bench %v: exit %d, stderr %s", args, r.code, r.stderr)
		}
		for _, want := range []string{"\n  ingest ", "\n  dispatch ", "\n  tokens ", "\n  run ", "semaq-bench", "go build -o", "./cmd/semaq-bench"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("semaq bench %v lacks %q:\n%s", args, want, r.stdout)
			}
		}
	}
}

// semaq-bench is looked up next to semaq, then on PATH; missing, the error
// says how to build it.
func TestBenchLookup(t *testing.T) {
	exe := "semaq-bench"
	if runtime.GOOS == "windows" {
		exe += ".exe"
	}
	install := func(dir string) string {
		p := filepath.Join(dir, exe)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	beside, onPath, empty := t.TempDir(), t.TempDir(), t.TempDir()
	self := func(dir string) func() (string, error) {
		return func() (string, error) { return filepath.Join(dir, "semaq"), nil }
	}

	t.Setenv("PATH", empty)
	_, err := lookBench(self(beside))
	for _, want := range []string{"semaq-bench", "in " + beside + " (next to semaq) nor on PATH",
		"go build -o " + filepath.Join(beside, exe) + " ./cmd/semaq-bench", "go install ./cmd/semaq-bench"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("not installed: error %v, want one naming %q", err, want)
		}
	}
	_, err = lookBench(func() (string, error) { return "", errors.New("no executable") })
	if err == nil || !strings.Contains(err.Error(), "go build -o $(dirname $(command -v semaq))/"+exe) {
		t.Errorf("no executable, not installed: error %v", err)
	}
	r := runBenchWith(t, func() (string, error) { return lookBench(self(beside)) }, "ingest")
	if r.code != 1 || !strings.HasPrefix(r.stderr, "semaq: semaq bench runs the benchmark program semaq-bench") {
		t.Errorf("semaq bench without semaq-bench: exit %d, stderr %q", r.code, r.stderr)
	}

	want := install(onPath)
	t.Setenv("PATH", onPath)
	if got, err := lookBench(self(beside)); got != want || err != nil {
		t.Errorf("on PATH: %q, %v; want %q", got, err, want)
	}
	want = install(beside)
	if got, err := lookBench(self(beside)); got != want || err != nil {
		t.Errorf("next to semaq and on PATH: %q, %v; want %q", got, err, want)
	}
}

// runBenchWith runs `semaq bench args...` with find in place of findBench.
func runBenchWith(t *testing.T, find func() (string, error), args ...string) result {
	t.Helper()
	saved := findBench
	findBench = find
	defer func() { findBench = saved }()
	return runBench(args...)
}

// cancelOn cancels when a write contains marker.
type cancelOn struct {
	w      *bytes.Buffer
	marker string
	cancel context.CancelFunc
}

func (c cancelOn) Write(p []byte) (int, error) {
	if strings.Contains(string(p), c.marker) {
		c.cancel()
	}
	return c.w.Write(p)
}

// Ctrl-C in the middle of `semaq bench run`: semaq-bench prints the rounds
// that ended, marked partial, says it was interrupted once, and semaq ends
// with its exit code, 130, adding nothing.
func TestBenchInterrupted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	interrupt, stop := context.WithCancel(ctx)
	defer stop()
	var stdout, stderr bytes.Buffer
	code := run(interrupt, []string{"bench", "run", "rl-feedback", "--short", "--rounds", "2", "--targets", "semaq,jetstream", "--data", t.TempDir()},
		strings.NewReader(""), &stdout, cancelOn{&stderr, "jetstream: rl-feedback, round 2/2", stop})
	if code != exitInterrupted || strings.Count(stderr.String(), "interrupted\n") != 1 || !strings.HasSuffix(stderr.String(), "semaq: interrupted\n") {
		t.Fatalf("exit %d, stderr:\n%s\nwant 130 and one line saying so, last", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "PARTIAL: interrupted in round 2 of 2") || !strings.Contains(stdout.String(), "semaq vs jetstream") {
		t.Fatalf("stdout:\n%s\nwant the partial report", stdout.String())
	}
}
