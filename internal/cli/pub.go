package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// pubFlags are the flags of `semaq pub`.
type pubFlags struct {
	headers      []string
	model        string
	modelVersion string
	adapter      string
	priority     string
	tenant       string
	intent       string
	timeout      time.Duration
	session      string
	promptTokens int
	msgID        string
	ttl          time.Duration
	json         bool
	retryFor     time.Duration
	batch        string
	atomic       bool
	batchSize    int
}

func newPubCmd(e *env) *cobra.Command {
	var fl pubFlags
	cmd := &cobra.Command{
		Use:   "pub {SUBJECT [DATA|-] | --batch FILE|-}",
		Short: "Publish a message through the broker's ingress",
		Long: `Publish one message to SUBJECT and wait for the broker to store it. DATA is
the payload; - reads it from stdin; no DATA sends an empty payload. The
envelope flags set the AI-* headers; --header adds any other header (envelope
aliases such as X-Model-Version are accepted and normalised by the broker).
--json also prints the request's cancel token (semaq cancel --token); set
your own with --header AI-Cancel-Token=<16 to 128 characters>.

--batch FILE publishes the messages of FILE (- reads stdin), NDJSON of one
message per line, {"subject":...,"headers":{...},"data":<JSON>} or
"data_base64" for bytes, in batches of --batch-size (docs/batches.md). It
prints a line per batch and fails if any message was refused. --atomic
makes each batch all or nothing.`,
		Example: `  semaq pub ai.inference.llm '{"prompt":"hi"}' --model llama3-70b --priority high --timeout 8s
  cat prompt.json | semaq pub ai.inference.llm - --tenant acme --json
  semaq pub --batch events.ndjson --batch-size 500`,
		Args: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("batch") {
				return nil // pubBatch names an argument given with it
			}
			return cobra.RangeArgs(1, 2)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("batch") {
				return e.pubBatch(cmd, args, &fl)
			}
			if cmd.Flags().Changed("atomic") || cmd.Flags().Changed("batch-size") {
				return errors.New("--atomic and --batch-size go with --batch FILE")
			}
			if looksLikePayload(args[0]) {
				return fmt.Errorf("SUBJECT %q looks like a payload: the subject comes first (semaq pub SUBJECT DATA)", oneLine(args[0]))
			}
			opts, err := fl.options(cmd)
			if err != nil {
				return err
			}
			var data []byte
			if len(args) == 2 {
				if args[1] == "-" {
					if data, err = io.ReadAll(e.stdin); err != nil {
						return fmt.Errorf("reading the payload from stdin: %w", err)
					}
				} else {
					data = []byte(args[1])
				}
			}
			if fl.msgID == "" {
				// Retried, the message is stored once: JetStream drops a
				// second copy with the same id.
				opts = append(opts, client.WithMsgID(nuid.Next()))
			}
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				ack, err := retryPublish(ctx, fl.retryFor, func(ctx context.Context) (*semaq.PubAck, error) {
					return c.Publish(ctx, args[0], data, opts...)
				})
				if err != nil {
					return err
				}
				if fl.json {
					// PubAck omits duplicate when false; the CLI always shows it.
					b, err := json.Marshal(struct {
						Stream      string `json:"stream"`
						Seq         uint64 `json:"seq"`
						Duplicate   bool   `json:"duplicate"`
						CancelToken string `json:"cancel_token"`
					}{ack.Stream, ack.Sequence, ack.Duplicate, ack.CancelToken})
					if err != nil {
						return err
					}
					_, err = fmt.Fprintf(e.stdout, "%s\n", b)
					return err
				}
				dup := ""
				if ack.Duplicate {
					dup = " (duplicate)"
				}
				_, err = fmt.Fprintf(e.stdout, "Published to stream %s seq %d%s\n", ack.Stream, ack.Sequence, dup)
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringArrayVarP(&fl.headers, "header", "H", nil, "header `K=V` (repeatable)")
	f.StringVar(&fl.model, "model", "", "model the message is for (AI-Model)")
	f.StringVar(&fl.modelVersion, "model-version", "", "model version (AI-Model-Version)")
	f.StringVar(&fl.adapter, "adapter", "", "LoRA adapter (AI-Adapter)")
	f.StringVar(&fl.priority, "priority", "", "critical, high, normal, low, bulk or 0-9 (AI-Priority)")
	f.StringVar(&fl.tenant, "tenant", "", "tenant (AI-Tenant)")
	f.StringVar(&fl.intent, "intent", "", "what the message asks for (AI-Intent)")
	f.DurationVar(&fl.timeout, "timeout", 0, "inference time budget, e.g. 8s (AI-Timeout; the broker sets AI-Deadline)")
	f.StringVar(&fl.session, "session", "", "session id (AI-Session)")
	f.IntVar(&fl.promptTokens, "prompt-tokens", 0, "prompt size in tokens (AI-Prompt-Tokens)")
	f.StringVar(&fl.msgID, "msg-id", "", "deduplication id (Nats-Msg-Id)")
	f.DurationVar(&fl.ttl, "ttl", 0, "expire the message from its stream after this long, at least 1s (Nats-TTL)")
	f.BoolVar(&fl.json, "json", false, `print the acknowledgement as {"stream","seq","duplicate"}`)
	f.StringVar(&fl.batch, "batch", "", "publish the NDJSON messages of `FILE` (- for stdin) in batches")
	f.BoolVar(&fl.atomic, "atomic", false, "with --batch: store each batch all or nothing")
	f.IntVar(&fl.batchSize, "batch-size", defaultBatchSize, fmt.Sprintf("with --batch: messages per batch, at most %d", semaq.MaxBatchMsgs))
	f.DurationVar(&fl.retryFor, "retry-for", 30*time.Second, "keep trying a publish no one acknowledges (a stream electing its leader) this long; 0: once")
	e.addServerFlag(cmd)
	return cmd
}

// options turns the flags into publish options. Errors name the flag, so
// they are checked here rather than left to the SDK's messages.
func (fl *pubFlags) options(cmd *cobra.Command) ([]client.PublishOption, error) {
	f := cmd.Flags()
	var opts []client.PublishOption
	tokens := []struct {
		flag string
		val  string
		opt  func(string) client.PublishOption
	}{
		{"model", fl.model, client.WithModel},
		{"model-version", fl.modelVersion, client.WithModelVersion},
		{"adapter", fl.adapter, client.WithAdapter},
		{"tenant", fl.tenant, client.WithTenant},
		{"intent", fl.intent, client.WithIntent},
		{"session", fl.session, client.WithSession},
		{"msg-id", fl.msgID, client.WithMsgID},
	}
	for _, t := range tokens {
		if !f.Changed(t.flag) {
			continue
		}
		if t.val == "" {
			return nil, fmt.Errorf("--%s: empty value", t.flag)
		}
		opts = append(opts, t.opt(t.val))
	}
	if f.Changed("priority") {
		p, err := semaq.ParsePriority(fl.priority)
		if err != nil {
			return nil, fmt.Errorf("--priority: %w", err)
		}
		opts = append(opts, client.WithPriority(p))
	}
	if f.Changed("timeout") {
		if fl.timeout <= 0 {
			return nil, fmt.Errorf("--timeout: %s is not positive", fl.timeout)
		}
		opts = append(opts, client.WithInferenceTimeout(fl.timeout))
	}
	if f.Changed("prompt-tokens") {
		if fl.promptTokens < 0 {
			return nil, fmt.Errorf("--prompt-tokens: %d is negative", fl.promptTokens)
		}
		opts = append(opts, client.WithPromptTokens(fl.promptTokens))
	}
	if f.Changed("ttl") {
		if fl.ttl < time.Second {
			return nil, fmt.Errorf("--ttl: %s is under one second", fl.ttl)
		}
		opts = append(opts, client.WithTTL(fl.ttl))
	}
	for _, h := range fl.headers {
		k, v, ok := strings.Cut(h, "=")
		if !ok {
			return nil, fmt.Errorf("--header %q: want K=V", h)
		}
		if k = strings.TrimSpace(k); k == "" {
			return nil, fmt.Errorf("--header %q: empty header name", h)
		}
		opts = append(opts, client.WithHeader(k, v))
	}
	return opts, nil
}

// looksLikePayload tells a payload given where the subject goes: JSON, or
// words with spaces, which no subject has.
func looksLikePayload(s string) bool {
	t := strings.TrimSpace(s)
	return strings.HasPrefix(t, "{") || strings.HasPrefix(t, "[") || strings.HasPrefix(t, `"`) || strings.ContainsAny(t, " \t\n")
}

// retryPublish runs publish until it is acknowledged, fails for a reason
// that another try would not change, or retryFor has passed: a stream
// whose leader is being elected (a node lost) answers nothing for a few
// seconds. The message keeps its Nats-Msg-Id across tries (a batch, each
// of its messages).
func retryPublish[A any](ctx context.Context, retryFor time.Duration, publish func(context.Context) (A, error)) (A, error) {
	var none A
	deadline := time.Now().Add(retryFor)
	tries := 0
	for pause := 100 * time.Millisecond; ; pause = min(2*pause, 2*time.Second) {
		ack, err := publish(ctx)
		tries++
		if err == nil || !transientPublish(err) || ctx.Err() != nil {
			return ack, err
		}
		if !time.Now().Add(pause).Before(deadline) {
			if tries == 1 {
				return none, err
			}
			return none, fmt.Errorf("no acknowledgement after %d tries in %s: no stream leader (an election in progress? semaq cluster status): %w",
				tries, retryFor, err)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return none, err
		case <-t.C:
		}
	}
}

// transientPublish tells a publish worth trying again: no answer in time,
// or a broker or JetStream that says it cannot serve it now.
func transientPublish(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, semaq.ErrUnavailable)
}
