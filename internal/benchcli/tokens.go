package benchcli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/internal/bench/tokens"
)

func newBenchTokensCmd(e *env) *cobra.Command {
	cfg := tokens.DefaultConfig()
	var (
		jsonFile string
		quiet    bool
	)
	cmd := &cobra.Command{
		Use:   "tokens",
		Short: "Token streams and the OpenAI gateway: throughput in order, many streams, time to first token",
		Long: `On a broker embedded in this process (temporary data directory, NATS and
HTTP on 127.0.0.1 with free ports), in one run:

1. one token stream of --tokens tokens, written with client.OpenTokenStream
   and read with client.ReadTokens on other connections, every token checked
   in order; beside it raw JetStream carrying one message per token
   (asynchronous publishes, same window, ordered consumer);
2. --streams concurrent streams of --stream-tokens tokens each, both ways;
3. the time to first token of streamed completions at --rate requests/s
   (open loop, measured from each request's scheduled time): through
   POST /v1/chat/completions (gateway, queue, a worker with the simulated
   model, token stream) against the simulated model's own HTTP server
   called directly. The difference is the gateway's overhead.

The table goes to stdout, progress to stderr; --json writes the report.`,
		Example: `  semaq bench tokens
  semaq bench tokens --json tokens.json
  semaq bench tokens --tokens 300000 --streams 200 --rate 200 --duration 4s`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return err
			}
			if !quiet {
				cfg.Progress = e.stderr
			}
			rep, err := tokens.Run(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			switch jsonFile {
			case "":
			case "-":
				return rep.WriteJSON(e.stdout)
			default:
				if err := writeFileAtomic(jsonFile, func(f *os.File) error { return rep.WriteJSON(f) }); err != nil {
					return fmt.Errorf("--json %s: %w", jsonFile, err)
				}
			}
			return rep.WriteTable(e.stdout)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Tokens, "tokens", cfg.Tokens, "tokens of the single stream")
	f.IntVar(&cfg.Streams, "streams", cfg.Streams, "concurrent streams")
	f.IntVar(&cfg.StreamTokens, "stream-tokens", cfg.StreamTokens, "tokens of each concurrent stream")
	f.Float64Var(&cfg.Rate, "rate", cfg.Rate, "offered load of the gateway phase, requests/s")
	f.DurationVar(&cfg.Duration, "duration", cfg.Duration, "length of the gateway phase per target")
	f.IntVar(&cfg.AnswerTokens, "answer-tokens", cfg.AnswerTokens, "tokens of each simulated answer in the gateway phase")
	f.IntVar(&cfg.Window, "window", cfg.Window, "write window of the token writers and of the raw publishers")
	f.StringVar(&cfg.Dir, "data", "", "broker data directory (default: a temporary directory, removed afterwards)")
	f.StringVar(&jsonFile, "json", "", `write the report as JSON to this file ("-": stdout, instead of the table)`)
	f.BoolVar(&quiet, "quiet", false, "no progress lines on stderr")
	return cmd
}
