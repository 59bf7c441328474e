package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// newRouteCmd is `semaq route`: route rules applied at the ingress.
func newRouteCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "route",
		Short: "Route messages by their content: add, ls, status, rm, test",
		Long: `Route rules move a message to another subject when it is published: rules whose
--subject pattern matches the publish subject are tried by --order, then name,
and the first whose --when expression (CEL, see docs/expressions.md) is true
stores the message under its target instead, with AI-Origin-Subject set to the
subject it was published to. Changes take effect on the next publish.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(
		newRouteAddCmd(e),
		newRouteLsCmd(e),
		newRouteRmCmd(e),
		newRouteTestCmd(e),
		newRouteStatusCmd(e),
	)
	return cmd
}

func newRouteAddCmd(e *env) *cobra.Command {
	var (
		r       semaq.Route
		split   string
		replace bool
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "add NAME --subject PATTERN [--when EXPR] (--to SUBJECT | --split SUBJ=W,SUBJ=W [--sticky-key EXPR] [--adaptive])",
		Short: "Add a route rule",
		Long: `Add a rule. --to sends matching messages to one subject; --split shares them
among several by weight (an A/B test): with --sticky-key every message with the
same key value goes to the same target while the weights stay the same, without
it each message picks at random. Targets must be subjects a stream captures.
--adaptive makes a split health-weighted: weight moves away from targets whose
consumers nak, terminate or ack slowly, and back when they recover
(docs/routing.md); see it with route status.`,
		Example: `  semaq route add llama --subject ai.inference.llm --when 'model.startsWith("llama3")' --to gpu.cluster-a
  semaq route add confident --subject 'ai.answers.>' --when 'payload.confidence > 0.85' --to ai.review.auto --order 10
  semaq route add ab --subject ai.inference.llm --split gpu.cluster-a=70,gpu.cluster-b=30 --sticky-key tenant
  semaq route add pool --subject ai.inference.llm --split gpu.cluster-a=50,gpu.cluster-b=50 --adaptive`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r.Name = args[0]
			if err := semaq.CheckRouteName(r.Name); err != nil {
				return err
			}
			if r.Subject == "" {
				return errors.New("--subject: name the subject pattern the rule applies to")
			}
			switch {
			case r.To != "" && split != "":
				return errors.New("give --to or --split, not both")
			case r.To == "" && split == "":
				return errors.New("name a target with --to SUBJECT or --split SUBJ=W,SUBJ=W")
			case r.StickyKey != "" && split == "":
				return errors.New("--sticky-key needs --split")
			case r.Adaptive && split == "":
				return errors.New("--adaptive needs --split")
			}
			if split != "" {
				var err error
				if r.Split, err = parseSplit(split); err != nil {
					return err
				}
			}
			var opts []client.RouteOption
			if replace {
				opts = append(opts, client.WithReplace())
			}
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				info, err := c.AddRoute(ctx, r, opts...)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(e.stdout, info)
				}
				_, err = fmt.Fprintf(e.stdout, "Route %s added: %s\n", info.Name, describeRoute(&info.Route))
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&r.Subject, "subject", "", "publish subjects the rule applies to, `PATTERN` (wildcards allowed)")
	f.StringVar(&r.When, "when", "", "CEL condition, `EXPR`; empty matches every message")
	f.StringVar(&r.To, "to", "", "target `SUBJECT`")
	f.StringVar(&split, "split", "", "weighted targets `SUBJ=W,SUBJ=W`")
	f.StringVar(&r.StickyKey, "sticky-key", "", "CEL key `EXPR` that keeps a split's messages with the same key on one target")
	f.BoolVar(&r.Adaptive, "adaptive", false, "health-weighted split: shift weight away from failing or slow targets")
	f.IntVar(&r.Order, "order", 0, "rank `N`: lower is tried first, then by name")
	f.BoolVar(&replace, "replace", false, "replace a rule of the same name")
	f.BoolVar(&asJSON, "json", false, "print the stored rule as JSON")
	e.addServerFlag(cmd)
	return cmd
}

// parseSplit reads SUBJ=W,SUBJ=W.
func parseSplit(s string) ([]semaq.RouteSplit, error) {
	var out []semaq.RouteSplit
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		i := strings.LastIndexByte(part, '=')
		if i <= 0 {
			return nil, fmt.Errorf("--split %q: want SUBJ=WEIGHT,SUBJ=WEIGHT", s)
		}
		w, err := strconv.Atoi(part[i+1:])
		if err != nil || w < 1 {
			return nil, fmt.Errorf("--split %q: weight %q of %s is not a whole number of 1 or more", s, part[i+1:], part[:i])
		}
		out = append(out, semaq.RouteSplit{Subject: part[:i], Weight: w})
	}
	if len(out) < 2 {
		return nil, fmt.Errorf("--split %q: a split needs at least two targets; use --to for one", s)
	}
	return out, nil
}

// describeRoute is a rule on one line: pattern, condition, targets, order.
func describeRoute(r *semaq.Route) string {
	var b strings.Builder
	b.WriteString(r.Subject)
	if r.When != "" {
		fmt.Fprintf(&b, " when %s", r.When)
	}
	fmt.Fprintf(&b, " -> %s", routeTargets(r))
	if r.StickyKey != "" {
		fmt.Fprintf(&b, " sticky on %s", r.StickyKey)
	}
	if r.Adaptive {
		b.WriteString(" adaptive")
	}
	if r.Order != 0 {
		fmt.Fprintf(&b, " (order %d)", r.Order)
	}
	return b.String()
}

func routeTargets(r *semaq.Route) string {
	if r.To != "" {
		return r.To
	}
	parts := make([]string, len(r.Split))
	for i, s := range r.Split {
		parts[i] = fmt.Sprintf("%s=%d", s.Subject, s.Weight)
	}
	return strings.Join(parts, ",")
}

func newRouteLsCmd(e *env) *cobra.Command {
	return listing[semaq.RouteInfo]{
		short:    "List route rules in the order they are tried, with this node's counters",
		noun:     "routes",
		jsonHelp: "print the rules with their counters as a JSON array",
		header:   []string{"ORDER", "NAME", "SUBJECT", "WHEN", "TARGET", "MATCHED", "ERRORS"},
		fetch:    (*client.Client).Routes,
		row: func(r semaq.RouteInfo) []string {
			target := routeTargetsNow(&r)
			if r.StickyKey != "" {
				target += " sticky on " + r.StickyKey
			}
			if r.Adaptive {
				target += " adaptive"
			}
			if r.Error != "" {
				target += " (not loaded: " + oneLine(r.Error) + ")"
			}
			return []string{fmt.Sprint(r.Order), r.Name, r.Subject, orDefault(r.When, "(always)"),
				target, fmt.Sprint(r.Stats.Matched), fmt.Sprint(r.Stats.Errors)}
		},
	}.command(e)
}

func newRouteRmCmd(e *env) *cobra.Command {
	return removal{
		use:     "rm NAME",
		example: `  semaq route rm llama`,
		aliases: []string{"delete"},
		short:   "Remove a route rule",
		done:    "Route %s removed",
		remove:  (*client.Client).DeleteRoute,
	}.command(e)
}

func newRouteTestCmd(e *env) *cobra.Command {
	var (
		fl      pubFlags
		subject string
		as      string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "test --subject SUBJECT [--header K=V]... [--as USER] [DATA|-]",
		Short: "Show where a message would be routed, without publishing it (exit 0 accepted, 1 refused, 2 error)",
		Long: `Run the broker's ingress on a message without storing it: the same steps a
publish takes (envelope, policy steps, schema, routing), short of quotas and
queue admission. Shows every rule tried, in order, and why it did or did not
match; the target subject and the stream that would store the message; the step
that would refuse it. With --as USER (auth on, admins) the message is tried as
that user's: its tenant stamped, its policy applied. Exits 0 when the message
would be stored, 1 when the publish would be refused (bad envelope or payload, a
policy step, a target no stream captures), 2 when the test could not run.`,
		Example: `  semaq route test --subject ai.inference.llm --model llama3-70b
  echo '{"confidence":0.9}' | semaq route test --subject ai.answers.x -H AI-Tenant=acme -
  semaq route test --subject ai.inference.llm --as alice --json`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.MaximumNArgs(1)(cmd, args); err != nil {
				return &exitError{code: 2, msg: err.Error()}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := func() (*semaq.RouteTestResponse, error) {
				if subject == "" {
					return nil, errors.New("--subject: name the subject the message would be published to")
				}
				opts, err := fl.options(cmd)
				if err != nil {
					return nil, err
				}
				var data []byte
				if len(args) == 1 {
					if args[0] == "-" {
						if data, err = io.ReadAll(e.stdin); err != nil {
							return nil, fmt.Errorf("reading the payload from stdin: %w", err)
						}
					} else {
						data = []byte(args[0])
					}
				}
				ctx := cmd.Context()
				c, err := e.connect(ctx)
				if err != nil {
					return nil, err
				}
				defer c.Close()
				if as != "" {
					return c.TestRouteAs(ctx, as, subject, data, opts...)
				}
				return c.TestRoute(ctx, subject, data, opts...)
			}()
			if err != nil {
				return &exitError{code: 2, msg: err.Error()}
			}
			if asJSON {
				if err := writeJSON(e.stdout, res); err != nil {
					return &exitError{code: 2, msg: err.Error()}
				}
			} else if err := writeRouteTest(e.stdout, res); err != nil {
				return &exitError{code: 2, msg: err.Error()}
			}
			if res.Refused != "" {
				return &exitError{code: 1, msg: "the publish would be refused: " + res.Refused}
			}
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: 2, msg: err.Error()} })
	f := cmd.Flags()
	f.StringVar(&subject, "subject", "", "the `SUBJECT` the message would be published to")
	f.StringArrayVarP(&fl.headers, "header", "H", nil, "header `K=V` (repeatable)")
	f.StringVar(&fl.model, "model", "", "model the message is for (AI-Model)")
	f.StringVar(&fl.priority, "priority", "", "critical, high, normal, low, bulk or 0-9 (AI-Priority)")
	f.StringVar(&fl.tenant, "tenant", "", "tenant (AI-Tenant)")
	f.StringVar(&fl.intent, "intent", "", "what the message asks for (AI-Intent)")
	f.StringVar(&fl.session, "session", "", "session id (AI-Session)")
	f.IntVar(&fl.promptTokens, "prompt-tokens", 0, "prompt size in tokens (AI-Prompt-Tokens)")
	f.StringVar(&as, "as", "", "try the message as sent by store `USER` (auth on; admins)")
	f.BoolVar(&asJSON, "json", false, "print the outcome as JSON")
	e.addServerFlag(cmd)
	return cmd
}

// writeRouteTest prints a dry run for people.
func writeRouteTest(w io.Writer, res *semaq.RouteTestResponse) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if len(res.Trials) > 0 {
		fmt.Fprintln(tw, "ORDER\tRULE\tSUBJECT\tRESULT\tWHY")
		for _, t := range res.Trials {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", t.Order, t.Name, t.Subject, t.Result, oneLine(t.Reason))
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var err error
	switch {
	case res.Route == "" && res.Refused != "" && res.RefusedBy != "":
		_, err = fmt.Fprintf(w, "Refused: %s (%s step)\n", oneLine(res.Refused), res.RefusedBy)
	case res.Route == "" && res.Refused != "":
		_, err = fmt.Fprintf(w, "Refused: %s\n", oneLine(res.Refused))
	case res.Route == "":
		_, err = fmt.Fprintf(w, "No rule matched: stored on %s%s\n", res.Target, streamNote(res))
	case res.Random:
		_, err = fmt.Fprintf(w, "Routed by %s to %s%s; a random split: another publish may pick another target\n", res.Route, res.Target, streamNote(res))
	case res.Key != "":
		_, err = fmt.Fprintf(w, "Routed by %s to %s%s; sticky key %q\n", res.Route, res.Target, streamNote(res), res.Key)
	default:
		_, err = fmt.Fprintf(w, "Routed by %s to %s%s\n", res.Route, res.Target, streamNote(res))
	}
	return err
}

func streamNote(res *semaq.RouteTestResponse) string {
	if res.Stream == "" {
		return " (no stream captures it: the publish would be refused)"
	}
	return " (stream " + res.Stream + ")"
}
