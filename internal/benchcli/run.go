package benchcli

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/internal/bench"
	"github.com/semaq/semaq/internal/bench/scenario"
)

func newBenchRunCmd(e *env) *cobra.Command {
	var (
		cfg       = scenario.ScenarioConfig{Targets: []string{bench.TargetSemaq, bench.TargetJetStream}}
		jsonFile  string
		htmlFile  string
		quiet     bool
		rate      int
		consumers int
	)
	cmd := &cobra.Command{
		Use:   "run SCENARIO|FILE",
		Short: "Run an AI workload scenario (rag, agent, finetune, rl-feedback, tokens) against SemaQ and raw JetStream (and RabbitMQ)",
		Long: `Run a workload scenario: a shipped one by name (` + strings.Join(scenario.ScenarioNames(), ", ") + `)
or a YAML file in the same form (see bench/scenarios/). The scenario fixes the
pattern (queue, request-reply, pipeline, tokens), offered rate, payload sizes,
sessions, workers, SLO and a seed that makes the offered load reproducible.

Each target runs the scenario in turn on an embedded broker (the raw JetStream
target uses the same server; a durable scenario runs JetStream with sync
always, the baseline on its own sync_always server). RabbitMQ needs a server
of its own, so it is measured only when asked for, as two targets: rabbitmq
declares classic queues, whose confirm of a persistent message may come
before it is written (once a worker acked it); rabbitmq-quorum declares
quorum queues, which write and fsync every message before confirming it, as
SemaQ does in a durable scenario (and still do in a non-durable one). Both
are reached over AMQP 0.9.1 at --rabbitmq-url with publisher confirms and
manual acks, and may run in one command; when no server answers, the report
says so, which URL it tried and how to start one, and the other targets are
still measured.

The table and the diagnosis (findings: root cause, evidence, suggestion) go to
stdout, progress to stderr; --json writes the report as JSON and --html a
self-contained page with a latency CDF, throughput and lag over time and a
heatmap of p99 per interval.`,
		Example: `  semaq bench run rag
  semaq bench run rl-feedback --html rl.html
  semaq bench run finetune --targets semaq,jetstream,rabbitmq --rabbitmq-url amqp://guest:guest@127.0.0.1:5672/ --json finetune.json
  semaq bench run finetune --rate 0 --targets semaq,rabbitmq,rabbitmq-quorum   # both RabbitMQ queue types
  semaq bench run agent --rate 0          # closed loop: capacity instead of latency at a load
  semaq bench run my-workload.yaml --short`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("give one scenario: %s, or a YAML file", strings.Join(scenario.ScenarioNames(), ", "))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			sc, err := scenario.LoadScenario(args[0])
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("rate") {
				sc.Rate = rate
				if sc.Short != nil {
					sc.Short.Rate = rate
				}
			}
			if cmd.Flags().Changed("consumers") {
				sc.Consumers = consumers
			}
			if err := sc.Validate(); err != nil {
				return err
			}
			cfg.Scenario = sc
			if !cmd.Flags().Changed("rounds") && cfg.Short {
				cfg.Rounds = 1 // a second is too short to cut up
			}
			for i, t := range cfg.Targets {
				cfg.Targets[i] = strings.TrimSpace(t)
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			// Check the report files can be written before a long run.
			outs := []*atomicFile{}
			defer func() {
				for _, o := range outs {
					o.abort()
				}
			}()
			open := func(flag, path string) (*atomicFile, error) {
				if path == "" {
					return nil, nil
				}
				f, err := createAtomic(path)
				if err != nil {
					return nil, fmt.Errorf("--%s %s: %w", flag, path, err)
				}
				outs = append(outs, f)
				return f, nil
			}
			jf, err := open("json", jsonFile)
			if err != nil {
				return err
			}
			hf, err := open("html", htmlFile)
			if err != nil {
				return err
			}
			if !quiet {
				cfg.Progress = e.stderr
				cfg.ProgressBar = isTerminal(e.stderr)
				if !slices.Contains(cfg.Targets, scenario.TargetRabbitMQ) && !slices.Contains(cfg.Targets, scenario.TargetRabbitMQQuorum) {
					fmt.Fprintf(e.stderr, "rabbitmq: not measured; add it with --targets %s,%s (classic queues) or %s (quorum queues, fsync before confirm), needs a RabbitMQ server at --rabbitmq-url\n",
						strings.Join(cfg.Targets, ","), scenario.TargetRabbitMQ, scenario.TargetRabbitMQQuorum)
				}
			}
			rep, runErr := scenario.RunScenario(cmd.Context(), cfg)
			if rep == nil {
				return runErr
			}
			// An interrupted run still reports what it measured, marked
			// as partial, and then ends with its error.
			if jf != nil {
				if err := jf.commit(rep.WriteJSON); err != nil {
					return fmt.Errorf("--json %s: %w", jsonFile, err)
				}
			}
			if hf != nil {
				if err := hf.commit(rep.WriteHTML); err != nil {
					return fmt.Errorf("--html %s: %w", htmlFile, err)
				}
			}
			if err := rep.WriteTable(e.stdout); err != nil {
				return err
			}
			return runErr
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&cfg.Targets, "targets", cfg.Targets, "targets to measure, comma-separated: "+strings.Join(scenario.ScenarioTargets, ", "))
	f.StringVar(&cfg.RabbitMQURL, "rabbitmq-url", scenario.DefaultRabbitMQURL, "AMQP URL of the RabbitMQ server of the rabbitmq and rabbitmq-quorum targets")
	f.DurationVar(&cfg.Duration, "duration", 0, "measured time per target (default: the scenario's)")
	f.IntVar(&cfg.Rounds, "rounds", 3, "slices of each target's measured time, run in alternating target order (default with --short: 1)")
	f.BoolVar(&cfg.Short, "short", false, "run the scenario's short form: about a second per target at a lower rate")
	f.IntVar(&rate, "rate", 0, "offered msgs/s instead of the scenario's; 0: closed loop, as fast as the window allows")
	f.IntVar(&consumers, "consumers", 0, "workers per stage instead of the scenario's")
	f.StringVar(&cfg.DataDir, "data", "", "broker data directory, empty or new, kept afterwards (default: a temporary directory, removed afterwards)")
	f.StringVar(&jsonFile, "json", "", "also write the report as JSON to this file")
	f.StringVar(&htmlFile, "html", "", "also write the report as a self-contained HTML page with charts to this file")
	f.BoolVar(&quiet, "quiet", false, "no progress on stderr")
	return cmd
}

// isTerminal reports whether w is a character device, where a progress
// bar can redraw its line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
