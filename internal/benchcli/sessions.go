package benchcli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/internal/bench/sessions"
)

func newBenchSessionsCmd(e *env) *cobra.Command {
	cfg := sessions.DefaultConfig()
	var (
		jsonFile string
		quiet    bool
	)
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "Session patch + get through the SDK vs the same on a raw JetStream KV bucket",
		Long: `On a broker embedded in this process (temporary data directory, NATS on
127.0.0.1 with a free port, no HTTP), time one pair of operations on a
session's state, in alternating rounds of two targets:

  semaq         PatchSession with a --size-byte JSON merge patch
                ({"turn":N,"summary":"..."}), then GetSession;
  jetstream-kv  the same with NATS KV alone, on a bucket stored like the
                session store (file storage, R1): Get, apply the merge
                patch in the client, Update with the revision read
                (compare-and-set), Get.

Each client works on --sessions sessions of its own, round-robin, on a
connection of its own per target (the SDK's as any user, the KV client's as
the benchmark's operator, the only login that may use a bucket of its own).
With one client (the default) the pairs run one after the other: latency
without contention. Every session's last write is checked at the end.

--duration is each target's measured time, cut into --rounds rounds run in
alternating target order after --warmup each. The report gives each
target's p50/p90/p99 of a pair and pairs per second, per round and as the
median over the rounds, and semaq's p50 and p99 over jetstream-kv's, round
by round and their median, against the goal p50 <= 1.5×.

The table goes to stdout, progress to stderr; --json writes the report.`,
		Example: `  semaq bench sessions
  semaq bench sessions --duration 10s --rounds 5 --json sessions.json
  semaq bench sessions --clients 8 --sessions 64`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return err
			}
			var out *atomicFile
			if jsonFile != "" && jsonFile != "-" {
				// Created now, so an unwritable path fails before the run.
				f, err := createAtomic(jsonFile)
				if err != nil {
					return fmt.Errorf("--json %s: %w", jsonFile, err)
				}
				defer f.abort()
				out = f
			}
			if !quiet {
				cfg.Progress = e.stderr
			}
			rep, err := sessions.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			switch {
			case jsonFile == "-":
				return rep.WriteJSON(e.stdout)
			case out != nil:
				if err := out.commit(func(w io.Writer) error { return rep.WriteJSON(w) }); err != nil {
					return fmt.Errorf("--json %s: %w", jsonFile, err)
				}
			}
			return rep.WriteTable(e.stdout)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Sessions, "sessions", cfg.Sessions, "sessions each client patches and reads, round-robin")
	f.IntVar(&cfg.Clients, "clients", cfg.Clients, "concurrent clients, each with its own connections and sessions")
	f.IntVar(&cfg.Size, "size", cfg.Size, "bytes of each merge patch")
	f.DurationVar(&cfg.Duration, "duration", cfg.Duration, "measured time of each target, over all rounds")
	f.DurationVar(&cfg.Warmup, "warmup", cfg.Warmup, "unmeasured pairs on each target before the first round, for this long")
	f.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "rounds per target, in alternating target order; figures are their medians")
	f.StringVar(&cfg.Dir, "data", "", "broker data directory, empty or new, kept afterwards (default: a temporary directory, removed afterwards)")
	f.StringVar(&jsonFile, "json", "", `write the report as JSON to this file ("-": stdout, instead of the table)`)
	f.BoolVar(&quiet, "quiet", false, "no progress lines on stderr")
	return cmd
}
