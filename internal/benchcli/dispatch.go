package benchcli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/internal/bench/dispatch"
)

func newBenchDispatchCmd(e *env) *cobra.Command {
	cfg := dispatch.DefaultConfig()
	var (
		jsonFile string
		quiet    bool
	)
	cmd := &cobra.Command{
		Use:   "dispatch",
		Short: "Work-queue scheduling: priority and tenant isolation, token fairness, throughput vs a raw pull consumer",
		Long: `Run the work-queue dispatcher on a broker embedded in this process and measure,
in one run:

  priority isolation  critical requests' p99 queue wait alone, then beside a bulk
                      flood of --flood-factor times their rate, stated as
                      alone + one service time + X (goal X ≤ 2 ms);
  tenant isolation    tenant B's p99 wait alone, then while tenant A offers
                      --tenant-factor times B's load (goal ≤ 1.5×);
  token fairness      tokens served to two backlogged tenants with 100- and
                      1000-token requests, against VTC's bound of twice the
                      largest request;
  throughput          draining --drain requests with --drain-workers workers
                      through the dispatcher (Fetch + confirmed Ack) against a
                      raw JetStream workqueue stream with a pull consumer
                      (Fetch + AckSync) on the same broker (goal ≥ 0.7×).

The paced phases use --workers workers, each serving one request at a time for
--service (a simulated inference), and last --duration each. Queue wait is
measured by the broker: from the ingress taking the request to its dispatch;
the end-to-end wait from the publish call to the worker holding the job.

With --processes the paced phases' load generators (one process per load)
and workers (one process) run as child processes of this one, which keeps the
broker; --pin (Linux) pins the broker to one CPU and the children to the
others, --nice N runs the load generators at nice N. Each process's CPU use
over a phase is reported, in every mode.

The table goes to stdout, progress to stderr; --json writes the report.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !quiet {
				cfg.Progress = func(format string, args ...any) { fmt.Fprintf(e.stderr, format+"\n", args...) }
			}
			out, err := openReport(jsonFile, e.stdout)
			if err != nil {
				return err
			}
			defer out.abort()
			rep, err := dispatch.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if jsonFile != "-" {
				if err := dispatch.WriteTable(e.stdout, rep); err != nil {
					return err
				}
			}
			return out.write(rep)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&cfg.Duration, "duration", cfg.Duration, "length of each paced phase")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "workers in the paced phases")
	f.DurationVar(&cfg.Service, "service", cfg.Service, "simulated service time of one request")
	f.IntVar(&cfg.CriticalRate, "critical-rate", cfg.CriticalRate, "critical requests per second")
	f.IntVar(&cfg.FloodFactor, "flood-factor", cfg.FloodFactor, "bulk flood as a multiple of the critical rate")
	f.IntVar(&cfg.TenantRate, "tenant-rate", cfg.TenantRate, "tenant B's requests per second")
	f.IntVar(&cfg.TenantFactor, "tenant-factor", cfg.TenantFactor, "tenant A's load as a multiple of B's")
	f.IntVar(&cfg.Drain, "drain", cfg.Drain, "requests drained per target and round in the throughput phase")
	f.IntVar(&cfg.DrainWorkers, "drain-workers", cfg.DrainWorkers, "workers in the throughput phase")
	f.IntVar(&cfg.DrainBatch, "drain-batch", cfg.DrainBatch, "jobs per fetch in the throughput phase")
	f.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "throughput rounds, alternating target order")
	f.BoolVar(&cfg.AckNoWait, "ack-nowait", false, "drain with unconfirmed acks (Job.AckNoWait vs a JetStream Ack) instead of confirmed ones (Job.Ack vs AckSync)")
	f.IntVar(&cfg.Size, "size", cfg.Size, "payload bytes")
	f.BoolVar(&cfg.WorkerAckNoWait, "worker-ack-nowait", false, "paced phases' workers answer with Job.AckNoWait and fetch at once instead of waiting for Job.Ack")
	f.BoolVar(&cfg.Processes, "processes", false, "run the paced phases' load generators and workers as child processes")
	f.BoolVar(&cfg.Pin, "pin", false, "with --processes: pin the broker to one CPU and the children to the others (Linux)")
	f.IntVar(&cfg.Nice, "nice", 0, "with --processes: nice value of the load generator processes")
	f.StringVar(&jsonFile, "json", "", "write the JSON report to `FILE` (- for stdout, instead of the table)")
	f.BoolVar(&quiet, "quiet", false, "no progress lines on stderr")
	return cmd
}

// newDispatchChildCmd is the hidden command a processes-mode dispatch
// benchmark runs its children with.
func newDispatchChildCmd(e *env) *cobra.Command {
	return &cobra.Command{
		Use:    dispatch.ChildCommand,
		Short:  "A load generator or workers process of dispatch --processes (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if code := dispatch.ChildMain(cmd.Context(), e.stdin, e.stdout, e.stderr); code != 0 {
				return errChildFailed
			}
			return nil
		},
	}
}

// errChildFailed: the child said why on stderr already.
var errChildFailed = errors.New("child process failed")
