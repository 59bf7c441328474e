// Package modelcmd is `semaq model`: the model registry (docs/models.md),
// built on clienv so it grows outside internal/cli.
package modelcmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/cli/clienv"
	"github.com/semaq/semaq/semaq"
)

// New is the `semaq model` command group.
func New(e clienv.Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "model",
		Short: "The model registry: register, promote (canary or all), rollback, drain, report, ls, history",
		Long: `Models and their versions, each registered -> canary -> active -> draining
-> retired. A request naming a registered model (AI-Model) is bound at
admission to the active version, or for a sticky share of sessions to the
canary, and records it (AI-Model-Version, AI-Model-Revision); only workers
announcing that version (semaq worker --version) take it. A full promotion
passes the promotion gate on the figures reported for the versions.
See docs/models.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(register(e), promote(e), rollback(e), drain(e), report(e), ls(e), history(e))
	return cmd
}

// jsonFlag is --json: the answer as the API gives it.
func jsonFlag(cmd *cobra.Command, on *bool) {
	cmd.Flags().BoolVar(on, "json", false, "print the answer as JSON")
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// parseLabels reads k=v,k=v.
func parseLabels(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	out := map[string]string{}
	for kv := range strings.SplitSeq(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--labels %q: want KEY=VALUE[,KEY=VALUE]", s)
		}
		out[k] = v
	}
	return out, nil
}

func register(e clienv.Env) *cobra.Command {
	var (
		req    semaq.ModelRegisterRequest
		labels string
		gate   semaq.ModelGate
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:     "register MODEL --version V [--labels K=V,...]",
		Short:   "Register a version of a model (the model too, the first time)",
		Example: "  semaq model register llama3 --version v2 --labels quant=fp8\n  semaq model register llama3 --version v3 --gate-p95-drift 5",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Model = args[0]
			var err error
			if req.Labels, err = parseLabels(labels); err != nil {
				return err
			}
			if gate != (semaq.ModelGate{}) {
				req.Gate = &gate
			}
			if err := semaq.CheckModelRef(req.ModelRef, true); err != nil {
				return err
			}
			return e.WithClient(cmd, func(ctx context.Context, c *client.Client) error {
				info, err := c.ModelRegister(ctx, req)
				if err != nil || asJSON {
					return orJSON(e, info, err, asJSON)
				}
				fmt.Fprintf(e.Stdout(), "Model %s version %s registered (revision %d).\n", info.Name, req.Version, info.Revision)
				return nil
			})
		},
	}
	e.AddServerFlag(cmd)
	f := cmd.Flags()
	f.StringVar(&req.Version, "version", "", "the version to register (letters, digits, '.', '_', '-')")
	f.StringVar(&labels, "labels", "", "labels of the version, KEY=VALUE,...")
	f.Float64Var(&gate.P95DriftPct, "gate-p95-drift", 0, "the model's gate: p95 latency drift allowed, in percent (default 8)")
	f.Float64Var(&gate.MemoryGrowthPct, "gate-memory-growth", 0, "the model's gate: memory growth allowed, in percent (default 15)")
	f.Float64Var(&gate.ColdStartMs, "gate-cold-start", 0, "the model's gate: cold start allowed, in ms (default 300)")
	jsonFlag(cmd, &asJSON)
	return cmd
}

func orJSON(e clienv.Env, v any, err error, asJSON bool) error {
	if err != nil {
		return err
	}
	return printJSON(e.Stdout(), v)
}

func promote(e clienv.Env) *cobra.Command {
	var (
		req    semaq.ModelPromoteRequest
		canary string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "promote MODEL VERSION [--canary N%] [--sticky session|tenant] [--force]",
		Short: "Make a version the canary of a share of the traffic, or the active version in one switch",
		Long: `With --canary, the version takes that share of the requests, sticky by
session (or tenant): the same session always gets the same version. Without,
the version becomes active for every request admitted from the switch's
revision on, once the promotion gate passes (--force promotes past it; the
audit record says so). The previous active version drains.`,
		Example: "  semaq model promote llama3 v2 --canary 10%\n  semaq model promote llama3 v2",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Model, req.Version = args[0], args[1]
			if canary != "" {
				p, err := semaq.ParseCanaryPercent(canary)
				if err != nil {
					return err
				}
				req.CanaryPercent = p
			}
			return e.WithClient(cmd, func(ctx context.Context, c *client.Client) error {
				info, err := c.ModelPromote(ctx, req)
				if err != nil || asJSON {
					return orJSON(e, info, err, asJSON)
				}
				if req.CanaryPercent > 0 {
					fmt.Fprintf(e.Stdout(), "Model %s: %s is the canary of %g%% of the traffic, sticky by %s; %s keeps the rest (revision %d).\n",
						info.Name, req.Version, info.CanaryPercent, info.Sticky, info.Active, info.Revision)
				} else {
					fmt.Fprintf(e.Stdout(), "Model %s: %s is active from revision %d on.\n", info.Name, info.Active, info.Revision)
				}
				return nil
			})
		},
	}
	e.AddServerFlag(cmd)
	f := cmd.Flags()
	f.StringVar(&canary, "canary", "", "the share of the traffic, e.g. 10%")
	f.StringVar(&req.Sticky, "sticky", "", "what keeps a request's split with --canary: session (default) or tenant")
	f.BoolVar(&req.Force, "force", false, "promote past a failing gate (audited)")
	jsonFlag(cmd, &asJSON)
	return cmd
}

func rollback(e clienv.Env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "rollback MODEL",
		Short:   "End the model's canary, or return its traffic to the previous active version",
		Example: "  semaq model rollback llama3",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.WithClient(cmd, func(ctx context.Context, c *client.Client) error {
				info, err := c.ModelRollback(ctx, args[0])
				if err != nil || asJSON {
					return orJSON(e, info, err, asJSON)
				}
				fmt.Fprintf(e.Stdout(), "Model %s: %s is active from revision %d on.\n", info.Name, info.Active, info.Revision)
				return nil
			})
		},
	}
	e.AddServerFlag(cmd)
	jsonFlag(cmd, &asJSON)
	return cmd
}

func drain(e clienv.Env) *cobra.Command {
	var (
		noWait bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "drain MODEL VERSION [--no-wait]",
		Short: "Stop admitting requests to a version; report when its requests in flight are done, and retire it",
		Long: `The version admits no new request from now on (a request naming it is
refused; the registry binds no request to it). The command waits until no
request bound to it is queued or held by a worker anywhere in the cluster,
then retires the version. --no-wait reports how many are in flight and
returns; run it again to finish.`,
		Example: "  semaq model drain llama3 v1",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.WithClient(cmd, func(ctx context.Context, c *client.Client) error {
				var r *semaq.ModelDrainResponse
				var err error
				if noWait {
					// One answer: the progress callback ends the wait.
					once, cancel := context.WithCancel(ctx)
					defer cancel()
					r, err = c.ModelDrain(once, args[0], args[1], 0, func(semaq.ModelDrainResponse) { cancel() })
					if r != nil && errors.Is(err, context.Canceled) && ctx.Err() == nil {
						err = nil
					}
				} else {
					last := -1
					r, err = c.ModelDrain(ctx, args[0], args[1], 0, func(p semaq.ModelDrainResponse) {
						if p.InFlight != last && !asJSON {
							fmt.Fprintf(e.Stderr(), "draining %s %s: %d requests in flight\n", p.Model, p.Version, p.InFlight)
							last = p.InFlight
						}
					})
				}
				if err != nil || asJSON {
					return orJSON(e, r, err, asJSON)
				}
				if r.Done {
					fmt.Fprintf(e.Stdout(), "Model %s version %s drained: no request in flight; it is %s.\n", r.Model, r.Version, r.State)
				} else {
					fmt.Fprintf(e.Stdout(), "Model %s version %s is %s: %d requests in flight.\n", r.Model, r.Version, r.State, r.InFlight)
				}
				return nil
			})
		},
	}
	e.AddServerFlag(cmd)
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "report the requests in flight and return")
	jsonFlag(cmd, &asJSON)
	return cmd
}

func report(e clienv.Env) *cobra.Command {
	var (
		req    semaq.ModelReportRequest
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:     "report MODEL VERSION --p95-ms N --memory-mb N --cold-start-ms N",
		Short:   "Report a version's figures, which the promotion gate judges",
		Example: "  semaq model report llama3 v2 --p95-ms 412 --memory-mb 15800 --cold-start-ms 240",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Model, req.Version = args[0], args[1]
			if err := semaq.CheckModelFigures(req.ModelFigures); err != nil {
				return err
			}
			return e.WithClient(cmd, func(ctx context.Context, c *client.Client) error {
				info, err := c.ModelReport(ctx, req)
				if err != nil || asJSON {
					return orJSON(e, info, err, asJSON)
				}
				fmt.Fprintf(e.Stdout(), "Model %s version %s: figures recorded.\n", info.Name, req.Version)
				return nil
			})
		},
	}
	e.AddServerFlag(cmd)
	f := cmd.Flags()
	f.Float64Var(&req.P95Ms, "p95-ms", 0, "p95 latency, ms")
	f.Float64Var(&req.MemoryMB, "memory-mb", 0, "memory in use, MB")
	f.Float64Var(&req.ColdStartMs, "cold-start-ms", 0, "cold start, ms")
	jsonFlag(cmd, &asJSON)
	return cmd
}

func ls(e clienv.Env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the models: active version, canary, every version's state",
		Example: "  semaq model ls",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.WithClient(cmd, func(ctx context.Context, c *client.Client) error {
				l, err := c.ModelList(ctx)
				if err != nil || asJSON {
					return orJSON(e, l, err, asJSON)
				}
				if len(l.Models) == 0 {
					fmt.Fprintln(e.Stdout(), "No model registered.")
					return nil
				}
				tw := tabwriter.NewWriter(e.Stdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "MODEL\tACTIVE\tCANARY\tVERSIONS")
				for _, m := range l.Models {
					var vs []string
					for _, v := range m.Versions {
						vs = append(vs, v.Version+"="+string(v.State))
					}
					canary := "-"
					if m.Canary != "" {
						canary = fmt.Sprintf("%s %g%% by %s", m.Canary, m.CanaryPercent, m.Sticky)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", m.Name, orDash(m.Active), canary, strings.Join(vs, " "))
				}
				return tw.Flush()
			})
		},
	}
	e.AddServerFlag(cmd)
	jsonFlag(cmd, &asJSON)
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func history(e clienv.Env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "history MODEL",
		Short:   "A model's changes, oldest first (the last " + strconv.Itoa(semaq.MaxModelHistory) + ")",
		Example: "  semaq model history llama3",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.WithClient(cmd, func(ctx context.Context, c *client.Client) error {
				m, err := c.ModelGet(ctx, args[0])
				if err != nil || asJSON {
					if m != nil {
						return orJSON(e, m.History, err, asJSON)
					}
					return orJSON(e, nil, err, asJSON)
				}
				tw := tabwriter.NewWriter(e.Stdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "AT\tEVENT\tVERSION\tSTATE\tBY\tDETAIL")
				for _, h := range slices.Clone(m.History) {
					state := "-"
					if h.To != "" {
						state = string(h.From) + "->" + string(h.To)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", h.At.UTC().Format(time.RFC3339), h.Event, orDash(h.Version), state, orDash(h.By), h.Detail)
				}
				return tw.Flush()
			})
		},
	}
	e.AddServerFlag(cmd)
	jsonFlag(cmd, &asJSON)
	return cmd
}
