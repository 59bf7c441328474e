package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/cli/classcmd"
	"github.com/semaq/semaq/internal/worker"
)

// newWorkerCmd is `semaq worker`: the worker adapter (docs/worker.md).
func newWorkerCmd(e *env) *cobra.Command {
	var (
		cfg       worker.Config
		apiKeyEnv string
		labels    []string
		logLevel  string
	)
	cmd := &cobra.Command{
		Use:   "worker --upstream URL|sim --model NAME [--model NAME]... [--concurrency N] [--api-key-env VAR] [--label K=V]...",
		Short: "Serve inference requests from the queues of some models with an OpenAI-compatible upstream",
		Long: `Take the inference requests of each --model from its queue (INFER_<model>,
created if missing), call the upstream's /chat/completions with streaming
on, and stream its tokens into the request's token stream, where the
gateway (POST /v1/chat/completions) or any reader picks them up. A request
the client cancels, or whose deadline passes, is stopped at the upstream.
The worker announces its models in the agent registry, which is how
GET /v1/models knows them. Interrupt it to stop taking requests; those in
progress finish first.

--upstream is the base URL an OpenAI client would use (http://host:8000/v1
for vLLM, http://host:11434/v1 for Ollama, http://host:8080/v1 for the
llama.cpp server, https://api.openai.com/v1), or "sim": a built-in
deterministic model whose first token is "sum=<CRC-32 of the prompt>",
paced by --sim-ttft and --sim-tps (50 tokens/s unless given; 0 for as
fast as possible). An upstream URL must answer GET <upstream>/models at
start; while it stops answering, the worker withdraws its models.

A model's requests are taken from the queue that captures its subject
ai.infer.<model>: one made by the operator for several models
(semaq queue add INFER --subjects 'ai.infer.>') or else INFER_<model>.`,
		Example: `  semaq worker --upstream sim --model demo
  semaq worker --upstream http://127.0.0.1:8000/v1 --model meta-llama/Llama-3.1-8B-Instruct --concurrency 16
  OPENAI_API_KEY=... semaq worker --upstream https://api.openai.com/v1 --model gpt-4o-mini --api-key-env OPENAI_API_KEY
  semaq worker --upstream sim --model demo --label adapter=sql-lora --sim-ttft 200ms --sim-tps 50`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if apiKeyEnv != "" {
				cfg.APIKey = os.Getenv(apiKeyEnv)
				if cfg.APIKey == "" {
					return fmt.Errorf("--api-key-env %s: the variable is empty or unset", apiKeyEnv)
				}
			}
			for _, kv := range labels {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return fmt.Errorf("--label %q: want KEY=VALUE", kv)
				}
				if cfg.Labels == nil {
					cfg.Labels = map[string]string{}
				}
				cfg.Labels[k] = v
			}
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return fmt.Errorf("--log-level %q: want debug, info, warn or error", logLevel)
			}
			cfg.Log = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: lvl}))
			if err := cfg.Validate(); err != nil {
				return err
			}
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				w, err := worker.New(c, cfg)
				if err != nil {
					return err
				}
				return w.Run(ctx)
			})
		},
	}
	e.addServerFlag(cmd)
	f := cmd.Flags()
	f.StringVar(&cfg.Upstream, "upstream", "", "OpenAI-compatible base URL (http://host:8000/v1), or sim")
	f.StringArrayVar(&cfg.Models, "model", nil, "a model this worker serves (repeat for more)")
	f.StringVar(&cfg.Version, "version", "", "the model version it serves: it takes the requests the model registry bound to it (docs/models.md)")
	f.IntVar(&cfg.Concurrency, "concurrency", 4, "requests served at once")
	f.StringVar(&apiKeyEnv, "api-key-env", "", "environment variable holding the upstream's API key")
	f.StringArrayVar(&labels, "label", nil, "KEY=VALUE describing the worker to the dispatcher (adapter=a,b draws those adapters' requests)")
	f.Var(classcmd.Labels(&cfg.Labels), "labels", "labels the worker announces, `K=V,...` (hardware: gpu=a100,hardware.gpu.memory=hbm2)")
	f.StringVar(&cfg.ID, "id", "", "worker id in the agent registry (default worker-<random>)")
	f.DurationVar(&cfg.AnnounceTTL, "announce-ttl", 0, "how long the worker's announcement outlives it: the gateway gives up a dead worker's requests after it (default 10s)")
	f.StringVar(&cfg.QueueStorage, "queue-storage", "", "storage of the queues this worker creates: memory (default) or file")
	f.DurationVar(&cfg.AckWait, "ack-wait", 0, "ack wait of the queues this worker creates: a dead worker's request moves on after it (default 10s)")
	f.DurationVar(&cfg.HealthInterval, "health-interval", 0, "how often an upstream URL is asked GET /models; models are withdrawn while it does not answer (default 5s)")
	f.DurationVar(&cfg.Sim.TTFT, "sim-ttft", 0, "sim: time to first token")
	f.Float64Var(&cfg.Sim.TokensPerSec, "sim-tps", 50, "sim: tokens per second after the first (0: as fast as possible)")
	f.IntVar(&cfg.Sim.Tokens, "sim-tokens", 16, "sim: answer length of a request without max_tokens")
	f.Uint64Var(&cfg.Sim.Seed, "sim-seed", 0, "sim: seed of the generated words")
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	return cmd
}
