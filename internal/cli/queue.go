package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/cli/classcmd"
	"github.com/semaq/semaq/semaq"
)

// newQueueCmd is `semaq queue`: work queues of inference requests.
func newQueueCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "queue",
		Short: "Work queues: add, ls, status, rm",
		Long: `A work queue holds inference requests that workers fetch. The broker picks what
each fetch gets: expired requests never, then by priority (with aging), tenant
fair share counted in tokens, FIFO within a tenant, and model/adapter affinity.
See docs/queues.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newQueueAddCmd(e), newQueueLsCmd(e), newQueueStatusCmd(e), newQueueRmCmd(e), classcmd.New(cmdEnv{e}))
	return cmd
}

func newQueueAddCmd(e *env) *cobra.Command {
	var qc semaq.QueueConfig
	cmd := &cobra.Command{
		Use:   "add NAME --subjects PATTERN[,PATTERN]",
		Short: "Add a work queue",
		Example: `  semaq queue add INFER --subjects 'ai.infer.>' --max-tokens 2000000 --default-timeout 30s
  semaq queue add BATCH --subjects 'ai.batch.>' --max-messages 1000000 --ack-wait 5m --max-deliver 3
  semaq queue add CHAT --subjects 'ai.chat.>' --chain-answers agent.answers`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			qc.Name = args[0]
			if err := qc.Check(); err != nil {
				return err
			}
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				qi, err := c.AddQueue(ctx, qc)
				if err != nil {
					return err
				}
				cfg := qi.Config
				_, err = fmt.Fprintf(e.stdout, "Queue %s added on %s (storage %s, max %d messages, ack wait %s, max deliver %d)\n",
					cfg.Name, strings.Join(cfg.Subjects, ","), cfg.Storage, cfg.MaxMessages, cfg.AckWait, cfg.MaxDeliver)
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&qc.Subjects, "subjects", nil, "subjects the queue captures, `PATTERN[,PATTERN]`")
	f.StringVar(&qc.Description, "description", "", "what the queue is for")
	f.StringVar(&qc.Storage, "storage", "file", "file or memory")
	f.IntVar(&qc.Replicas, "replicas", 0, "nodes of a cluster that store the queue and its leases, 1 to 5 (0: 1)")
	f.Int64Var(&qc.MaxTokens, "max-tokens", 0, "refuse publishes past this many prompt tokens held (0: the default, bytes/4; -1: no limit)")
	f.Int64Var(&qc.MaxBytes, "max-bytes", 0, "refuse publishes past this many bytes held (0: 1 GiB on file, 256 MiB in memory; -1: no limit)")
	f.Int64Var(&qc.MaxMessages, "max-messages", semaq.DefaultQueueMaxMessages, "refuse publishes past this many requests held")
	f.DurationVar(&qc.DefaultTimeout, "default-timeout", 0, "deadline of requests that bring none (0: none)")
	f.DurationVar(&qc.AckWait, "ack-wait", semaq.DefaultQueueAckWait, "a job not answered within this goes back to the queue")
	f.IntVar(&qc.MaxDeliver, "max-deliver", semaq.DefaultQueueMaxDeliver, "dead-letter a request after this many deliveries (-1: never)")
	f.DurationVar(&qc.AffinityWait, "affinity-wait", semaq.DefaultAffinityWait, "how long a request waits for a worker holding its model/adapter")
	f.DurationVar(&qc.AgingStep, "aging-step", semaq.DefaultAgingStep, "a request waiting this long competes one priority level higher")
	f.DurationVar(&qc.MaxWait, "max-wait", 0, "adaptive admission: refuse when the tokens waiting exceed what workers serve in this (0: off)")
	f.StringVar(&qc.ChainAnswers, "chain-answers", "", "append the token-stream answer of each request in a session to its chain on `SUBJECT` (a stream with provenance)")
	f.StringVar(&qc.Class, "class", "", "put every request in this class (semaq queue class), whatever its AI-Class")
	_ = cmd.MarkFlagRequired("subjects")
	e.addServerFlag(cmd)
	return cmd
}

func newQueueLsCmd(e *env) *cobra.Command {
	return listing[semaq.QueueInfo]{
		short:    "List work queues",
		noun:     "queues",
		jsonHelp: "print JSON",
		header:   []string{"NAME", "SUBJECTS", "QUEUED", "HELD", "TOKENS", "OLDEST", "WORKERS", "RECOMMENDED"},
		fetch:    (*client.Client).Queues,
		row: func(q semaq.QueueInfo) []string {
			st := q.Status
			return []string{q.Config.Name, strings.Join(q.Config.Subjects, ","), fmt.Sprint(st.Queued + st.Delayed),
				fmt.Sprint(st.Held), fmt.Sprint(st.TokensQueued), st.OldestAge.Round(time.Millisecond).String(),
				fmt.Sprint(st.Workers), fmt.Sprint(st.RecommendedWorkers)}
		},
	}.command(e)
}

func newQueueStatusCmd(e *env) *cobra.Command {
	return showing[*semaq.QueueInfo]{
		use:      "status NAME",
		example:  `  semaq queue status INFER`,
		short:    "Show a queue's depth, waits, rates, fairness counters and recommended workers",
		jsonHelp: "print JSON",
		fetch:    (*client.Client).QueueInfo,
		write:    writeQueueStatus,
	}.command(e)
}

func writeQueueStatus(e *env, qi *semaq.QueueInfo) error {
	st, cfg := qi.Status, qi.Config
	w := e.stdout
	fmt.Fprintf(w, "Queue %s on %s\n", cfg.Name, strings.Join(cfg.Subjects, ","))
	fmt.Fprintf(w, "  queued %d (delayed %d), held %d; tokens queued %d, held %d; oldest %s\n",
		st.Queued+st.Delayed, st.Delayed, st.Held, st.TokensQueued, st.TokensHeld, st.OldestAge.Round(time.Millisecond))
	fmt.Fprintf(w, "  arrivals %.1f/s, served %.1f/s (%.0f tokens/s), service time %.1f ms\n",
		st.ArrivalRate, st.ServiceRate, st.TokenRate, st.ServiceTimeMs)
	fmt.Fprintf(w, "  workers %d, recommended %d\n", st.Workers, st.RecommendedWorkers)
	adm := st.Admission
	limits := fmt.Sprintf("max %d messages", adm.MaxMessages)
	if adm.MaxBytes > 0 {
		limits += fmt.Sprintf(", %d bytes (holding %d)", adm.MaxBytes, st.Bytes)
	}
	if adm.MaxTokens > 0 {
		limits += fmt.Sprintf(", %d tokens", adm.MaxTokens)
	}
	if adm.AdaptiveTokens > 0 {
		limits += fmt.Sprintf(", adaptive %d tokens (prompt CV %.2f, latency CV %.2f)", adm.AdaptiveTokens, adm.PromptCV, adm.LatencyCV)
	}
	fmt.Fprintf(w, "  admission: %s; saturated %v\n", limits, adm.Saturated)
	k := st.Counters
	fmt.Fprintf(w, "  admitted %d, refused %d, dispatched %d, acked %d, nacked %d, redelivered %d, expired %d, cancelled %d, dead letters %d\n",
		k.Admitted, k.Refused, k.Dispatched, k.Acked, k.Nacked, k.Redelivered, k.Expired, k.Cancelled, k.DeadLetters)
	if k.BadReplies > 0 || k.ConsumerRecoveries > 0 || k.LeaseConflicts > 0 {
		fmt.Fprintf(w, "  ignored for bad reply subjects %d, dispatch consumer recreated %d, lease conflicts %d\n", k.BadReplies, k.ConsumerRecoveries, k.LeaseConflicts)
	}
	groups := func(title string, gs []semaq.QueueGroupStat) {
		if len(gs) == 0 {
			return
		}
		fmt.Fprintf(w, "  by %s:\n", title)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, g := range gs {
			fmt.Fprintf(tw, "    %s\t%d queued\t%d tokens\toldest %s\n", g.Key, g.Queued, g.Tokens, g.OldestAge.Round(time.Millisecond))
		}
		tw.Flush()
	}
	groups("priority", st.ByPriority)
	groups("tenant", st.ByTenant)
	groups("model", st.ByModel)
	if len(st.Fairness) > 0 {
		fmt.Fprintln(w, "  fair-share counters (tokens):")
		for _, f := range st.Fairness {
			fmt.Fprintf(w, "    %s\t%.0f\n", f.Tenant, f.Counter)
		}
	}
	classcmd.WriteStatus(w, st.Classes)
	return nil
}

func newQueueRmCmd(e *env) *cobra.Command {
	return removal{
		use:     "rm NAME",
		example: `  semaq queue rm INFER`,
		short:   "Remove a queue and every request in it",
		done:    "Queue %s removed",
		remove:  (*client.Client).DeleteQueue,
	}.command(e)
}

// newWorkCmd is `semaq work`: take work from a queue as a worker.
func newWorkCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "work",
		Short: "Work-queue worker commands: fetch",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newWorkFetchCmd(e))
	return cmd
}

func newWorkFetchCmd(e *env) *cobra.Command {
	var (
		max       int
		maxTokens int64
		wait      time.Duration
		labels    []string
		ack       bool
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "fetch QUEUE [--max N] [--max-tokens T] [--wait D] [--label K=V]... [--ack] [--json]",
		Short: "Fetch a batch of requests from a queue",
		Long: `Fetch asks the dispatcher for up to --max requests whose prompt tokens fit
--max-tokens (a single larger request comes alone). Without --ack the jobs stay
held until their ack wait passes and then go back to the queue; with --json each
job carries its ack_subject, so a script can answer it (+ACK, -NAK, +WPI, +TERM).`,
		Example: `  semaq work fetch INFER --max 8 --max-tokens 4096 --wait 5s --label model=llama3 --label adapter=sql-lora --ack --json`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := []client.FetchOption{client.FetchMax(max), client.FetchWait(wait)}
			if maxTokens > 0 {
				opts = append(opts, client.FetchMaxTokens(maxTokens))
			} else if maxTokens < 0 {
				return fmt.Errorf("--max-tokens %d is negative", maxTokens)
			}
			if len(labels) > 0 {
				m := make(map[string]string, len(labels))
				for _, kv := range labels {
					k, v, ok := strings.Cut(kv, "=")
					if !ok || k == "" {
						return fmt.Errorf("--label %q: want KEY=VALUE", kv)
					}
					m[k] = v
				}
				opts = append(opts, client.FetchLabels(m))
			}
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				jobs, err := c.Fetch(ctx, args[0], opts...)
				if err != nil {
					return err
				}
				for _, j := range jobs {
					if asJSON {
						b, err := json.Marshal(j)
						if err != nil {
							return err
						}
						fmt.Fprintf(e.stdout, "%s\n", b)
					} else {
						if err := writeJob(e, j); err != nil {
							return err
						}
					}
					if ack {
						actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						err := j.Ack(actx)
						cancel()
						if err != nil {
							return fmt.Errorf("acknowledging job %d: %w", j.Seq, err)
						}
					}
				}
				if len(jobs) == 0 && !asJSON {
					fmt.Fprintln(e.stderr, "No requests.")
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&max, "max", 1, "most requests to fetch")
	f.Int64Var(&maxTokens, "max-tokens", 0, "token budget of the batch (0: none)")
	f.DurationVar(&wait, "wait", 0, "how long to wait for the first request")
	f.StringArrayVar(&labels, "label", nil, "a worker label `K=V` (model, adapter drive affinity); repeat for more")
	f.BoolVar(&ack, "ack", false, "acknowledge each job after printing it")
	f.BoolVar(&asJSON, "json", false, "print one JSON object per job")
	e.addServerFlag(cmd)
	return cmd
}

func writeJob(e *env, j *client.Job) error {
	var b strings.Builder
	fmt.Fprintf(&b, "[#%d] %s (queue %s, delivery %d, %d tokens", j.Seq, j.Subject, j.Queue, j.Deliveries, j.Tokens)
	if j.Estimated {
		b.WriteString(" estimated")
	}
	fmt.Fprintf(&b, ", waited %s)\n", j.Waited.Round(time.Microsecond))
	for _, k := range []string{semaq.HdrMsgID, semaq.HdrTenant, semaq.HdrPriority, semaq.HdrModel, semaq.HdrAdapter, semaq.HdrDeadline} {
		if v := j.Header.Get(k); v != "" {
			fmt.Fprintf(&b, "  %s: %s\n", k, v)
		}
	}
	b.Write(j.Data)
	if len(j.Data) == 0 || j.Data[len(j.Data)-1] != '\n' {
		b.WriteByte('\n')
	}
	b.WriteByte('\n')
	_, err := fmt.Fprint(e.stdout, b.String())
	return err
}

// newCancelCmd is `semaq cancel QUEUE ID`.
func newCancelCmd(e *env) *cobra.Command {
	var token string
	cmd := &cobra.Command{
		Use:     "cancel QUEUE ID",
		Example: `  semaq cancel INFER req-42 --token 3q2-7wEtVxXnBv1H2kq9sA`,
		Short:   "Cancel a request by its Nats-Msg-Id or queue sequence",
		Long: `A queued request is removed before any worker gets it; a request a worker holds
is removed and the worker is told to stop (its job context is cancelled).

Only the request's owner may cancel it. Without auth that is whoever has its
cancel token (--token: semaq pub --json prints it); with auth its publisher,
a service of its tenant or an admin, or whoever has its token.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				res, err := c.Cancel(ctx, args[0], args[1], client.CancelToken(token))
				if err != nil {
					return err
				}
				switch res.Result {
				case "notified":
					_, err = fmt.Fprintf(e.stdout, "Request %s (seq %d) cancelled; worker %s told to stop\n", args[1], res.Seq, res.Worker)
				default:
					_, err = fmt.Fprintf(e.stdout, "Request %s (seq %d) removed from queue %s\n", args[1], res.Seq, args[0])
				}
				return err
			})
		},
	}
	cmd.Flags().StringVar(&token, "token", "", "the request's cancel token (AI-Cancel-Token of its publish)")
	e.addServerFlag(cmd)
	return cmd
}
