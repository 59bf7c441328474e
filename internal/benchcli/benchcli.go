// Package benchcli implements semaq-bench, the benchmark command: SemaQ
// measured beside raw JetStream (and RabbitMQ) on brokers it embeds. It is a
// program of its own so that the broker binary carries neither the harness
// nor a RabbitMQ client; `semaq bench ARGS` runs `semaq-bench ARGS`.
package benchcli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/internal/cmdusage"
)

const (
	// Name is the program's own name.
	Name = "semaq-bench"
	// SubcommandName is the name it answers to when `semaq bench` runs it
	// (as its argv[0]): usage and errors then read as they always have,
	// "semaq bench ingest ..." and "semaq: ...".
	SubcommandName = "semaq bench"
)

// Main runs the command line of the program called name (Name or
// SubcommandName) and returns the process exit code. Errors are printed as
// one line on stderr, prefixed with the program's name.
func Main(name string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, name, args, stdin, stdout, stderr)
}

// run is Main with its context: ctx's end is the interrupt.
func run(ctx context.Context, name string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr}
	root := newBenchCmd(e, Name)
	if name == SubcommandName {
		// A parent "semaq" makes the command paths "semaq bench ...".
		bench := newBenchCmd(e, "bench")
		root = &cobra.Command{Use: "semaq"}
		root.AddCommand(bench)
		args = append([]string{"bench"}, args...)
	}
	root.SilenceUsage, root.SilenceErrors = true, true
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetArgs(args)
	cmdusage.Explain(root)
	prefix := strings.Fields(name)[0]
	err := root.ExecuteContext(ctx)
	if ctx.Err() != nil {
		// SIGINT or SIGTERM: the error says what was cut short, unless it
		// is only the cancellation; the exit code is the shells' 130.
		if err != nil && !errors.Is(err, context.Canceled) {
			fmt.Fprintf(stderr, "%s: %s\n", prefix, oneLine(err.Error()))
		}
		fmt.Fprintf(stderr, "%s: interrupted\n", prefix)
		return exitInterrupted
	}
	if err != nil {
		if ue, ok := errors.AsType[*cmdusage.Error](err); ok {
			ue.Write(stderr, prefix)
			return 1
		}
		fmt.Fprintf(stderr, "%s: %s\n", prefix, oneLine(err.Error()))
		return 1
	}
	return 0
}

// exitInterrupted is the exit code of a run SIGINT or SIGTERM ended
// (128 + SIGINT), as semaq's own commands exit.
const exitInterrupted = 130

// env is what every command shares: its streams.
type env struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
}

func newBenchCmd(e *env, use string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: "Measure SemaQ against raw JetStream on an embedded broker",
		Long: `Run a benchmark scenario on a broker embedded in this process (temporary data
directory, NATS on 127.0.0.1 with a free port, no HTTP) and report SemaQ's
figures beside raw JetStream's from the same run, as ratios.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown scenario %q for %q (scenarios: ingest)", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
	var cpuProfile string
	var profile *os.File
	cmd.PersistentFlags().StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of this process (brokers, clients, harness) for the whole run to this file (go tool pprof)")
	cmd.PersistentPreRunE = func(*cobra.Command, []string) error {
		if cpuProfile == "" {
			return nil
		}
		f, err := os.Create(cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		profile = f
		return nil
	}
	cmd.PersistentPostRunE = func(*cobra.Command, []string) error {
		if profile == nil {
			return nil
		}
		pprof.StopCPUProfile()
		if err := profile.Close(); err != nil {
			return fmt.Errorf("--cpuprofile: %w", err)
		}
		return nil
	}
	cmd.AddCommand(newBenchIngestCmd(e))
	cmd.AddCommand(newBenchDispatchCmd(e))
	cmd.AddCommand(newBenchTokensCmd(e))
	cmd.AddCommand(newBenchSessionsCmd(e))
	cmd.AddCommand(newBenchRunCmd(e))
	cmd.AddCommand(newDispatchChildCmd(e))
	return cmd
}

func oneLine(s string) string { return cmdusage.OneLine(s) }
