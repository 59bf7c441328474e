package cli

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// newAgentCmd is `semaq agent`: the agent capability registry.
func newAgentCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Agent capability registry: announce, ls",
		Long: `Agents announce the intents they serve with a heartbeat; an agent whose
heartbeats stop leaves the table once its TTL passes. See docs/agents.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newAgentAnnounceCmd(e), newAgentLsCmd(e))
	return cmd
}

func newAgentAnnounceCmd(e *env) *cobra.Command {
	var (
		a    semaq.Agent
		caps []string
		ttl  time.Duration
	)
	cmd := &cobra.Command{
		Use:     "announce ID --intent I[,I] [--capability K=V]... [--subject P] [--ttl D]",
		Short:   "Announce an agent and keep it alive until interrupted, then leave",
		Example: `  semaq agent announce summarizer-1 --intent summarize,classify --capability model=llama3 --ttl 10s`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			a.ID = args[0]
			if len(caps) > 0 {
				a.Capabilities = make(map[string]string, len(caps))
				for _, kv := range caps {
					k, v, ok := strings.Cut(kv, "=")
					if !ok || k == "" {
						return fmt.Errorf("--capability %q: want KEY=VALUE", kv)
					}
					a.Capabilities[k] = v
				}
			}
			if _, err := semaq.CheckAgent(&a, ttl); err != nil {
				return err
			}
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				an, err := c.Announce(ctx, a, ttl)
				if err != nil {
					return err
				}
				info := an.Info()
				fmt.Fprintf(e.stdout, "Agent %s announced for %s (ttl %s); heartbeating until interrupted\n",
					info.ID, strings.Join(info.Intents, ","), info.TTL)
				<-ctx.Done()
				lctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				if err := an.Leave(lctx); err != nil {
					return fmt.Errorf("leaving: %w", err)
				}
				_, err = fmt.Fprintf(e.stdout, "Agent %s left\n", info.ID)
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&a.Intents, "intent", nil, "intents served, `I[,I]` (AI-Intent values)")
	f.StringArrayVar(&caps, "capability", nil, "a capability `K=V`; repeat for more")
	f.StringVar(&a.Subject, "subject", "", "subject `PATTERN` the agent consumes (for information)")
	f.DurationVar(&ttl, "ttl", semaq.DefaultAgentTTL, "how long an announcement holds without a heartbeat; heartbeats go every third of it")
	e.addServerFlag(cmd)
	return cmd
}

func newAgentLsCmd(e *env) *cobra.Command {
	return listing[semaq.AgentInfo]{
		short:    "List the live agents",
		noun:     "agents",
		jsonHelp: "print JSON",
		header:   []string{"ID", "INTENTS", "CAPABILITIES", "SUBJECT", "TTL", "EXPIRES"},
		fetch:    (*client.Client).Agents,
		row: func(a semaq.AgentInfo) []string {
			keys := slices.Sorted(maps.Keys(a.Capabilities))
			for i, k := range keys {
				keys[i] = k + "=" + a.Capabilities[k]
			}
			return []string{a.ID, strings.Join(a.Intents, ","), orDefault(strings.Join(keys, ","), "-"),
				orDefault(a.Subject, "-"), a.TTL.String(), a.ExpiresAt.Local().Format(time.TimeOnly)}
		},
	}.command(e)
}
