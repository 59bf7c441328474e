package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"

	"github.com/spf13/cobra"
)

// benchProgram is the program `semaq bench` runs: the benchmarks live
// beside the broker, not in it, so the semaq binary carries neither the
// harness nor a RabbitMQ client (cmd/semaq-bench, internal/benchcli).
const benchProgram = "semaq-bench"

// benchArgv0 is the name semaq-bench is run under, so that its usage and
// errors read "semaq bench ..." and "semaq: ...", as they always have.
const benchArgv0 = "semaq bench"

// findBench locates semaq-bench; tests replace it.
var findBench = func() (string, error) { return lookBench(os.Executable) }

func newBenchCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:   "bench SUBCOMMAND [flags]",
		Short: "Measure SemaQ against raw JetStream on an embedded broker (runs semaq-bench)",
		Long: `Run a benchmark on a broker embedded in the benchmark's process and report
SemaQ's figures beside raw JetStream's from the same run, as ratios.

Subcommands:
  ingest    Publish throughput and latency: through the ingress vs straight into JetStream
  dispatch  Work-queue scheduling: priority and tenant isolation, token fairness, throughput
            vs a raw pull consumer
  tokens    Token streams and the OpenAI gateway: throughput in order, many streams, time to
            first token
  sessions  Session patch + get through the SDK vs the same on a raw JetStream KV bucket
  run       Run an AI workload scenario (rag, agent, finetune, rl-feedback, tokens) against
            SemaQ and raw JetStream (and RabbitMQ)

The benchmarks are a program of their own, semaq-bench, so that the broker
binary carries neither the harness nor a RabbitMQ client. "semaq bench ARGS"
runs "semaq-bench ARGS", found next to the semaq executable or else on PATH.
Build it beside semaq from the source tree:

  go build -o "$(dirname "$(command -v semaq)")/semaq-bench" ./cmd/semaq-bench

or install both with "go install ./cmd/semaq ./cmd/semaq-bench".
Run 'semaq bench SUBCOMMAND --help' for a subcommand's flags.`,
		Example: `  semaq bench ingest --sync always
  semaq bench run rag --html rag.html`,
		// Every argument, flags and --help of a subcommand included, goes to
		// semaq-bench; only a bare "semaq bench [--help]" is answered here.
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 || (len(args) == 1 && (args[0] == "-h" || args[0] == "--help")) {
				return cmd.Help()
			}
			return e.runBench(cmd.Context(), args)
		},
	}
}

// runBench runs semaq-bench with args and this command's streams, and ends
// with its exit code. An interrupt or SIGTERM is passed on as an interrupt,
// so the benchmark stops as it would on its own.
func (e *env) runBench(ctx context.Context, args []string) error {
	path, err := findBench()
	if err != nil {
		return err
	}
	c := exec.CommandContext(ctx, path, args...)
	c.Args[0] = benchArgv0
	c.Stdin, c.Stdout, c.Stderr = e.stdin, e.stdout, e.stderr
	c.Cancel = func() error { return c.Process.Signal(os.Interrupt) }
	err = c.Run()
	if ee, ok := errors.AsType[*exec.ExitError](err); ok {
		if code := ee.ExitCode(); code > 0 {
			return &exitError{code: code} // semaq-bench has said why
		}
		return fmt.Errorf("%s: %w", benchProgram, err) // killed by a signal
	}
	if err != nil {
		return fmt.Errorf("%s: %w", benchProgram, err)
	}
	return nil
}

// lookBench finds semaq-bench next to the running executable, else on
// PATH. Not found, the error says how to build it.
func lookBench(executable func() (string, error)) (string, error) {
	name := benchProgram
	if runtime.GOOS == "windows" {
		name += ".exe"
	}
	dir := ""
	if self, err := executable(); err == nil {
		dir = filepath.Dir(self)
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			return p, nil
		}
	}
	if p, err := exec.LookPath(benchProgram); err == nil {
		return p, nil
	}
	where := "next to semaq nor on PATH"
	out := "$(dirname $(command -v semaq))/" + name
	if dir != "" {
		where = "in " + dir + " (next to semaq) nor on PATH"
		out = filepath.Join(dir, name)
	}
	return "", fmt.Errorf("semaq bench runs the benchmark program %s, which is neither %s; "+
		"build it from the SemaQ source tree with `go build -o %s ./cmd/semaq-bench` or `go install ./cmd/semaq-bench`",
		benchProgram, where, out)
}
