package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// routeTargetsNow is routeTargets with an adaptive split's effective
// weights where they differ from the configured ones: a=50(now 2.5).
func routeTargetsNow(r *semaq.RouteInfo) string {
	if !r.Adaptive || len(r.Health) != len(r.Split) {
		return routeTargets(&r.Route)
	}
	parts := make([]string, len(r.Health))
	for i, h := range r.Health {
		parts[i] = fmt.Sprintf("%s=%d", h.Subject, h.Weight)
		if h.Effective != float64(h.Weight) {
			parts[i] += fmt.Sprintf("(now %g)", h.Effective)
		}
	}
	return strings.Join(parts, ",")
}

func newRouteStatusCmd(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status NAME",
		Short: "Show a rule's targets: weights, health and traffic on this node",
		Long: `Show one rule with this node's counters. For an adaptive split, each target's
configured and effective weight, health score, smoothed error rate and ack
latency (docs/routing.md).`,
		Example: `  semaq route status pool`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				routes, err := c.Routes(ctx)
				if err != nil {
					return err
				}
				var r *semaq.RouteInfo
				for i := range routes {
					if routes[i].Name == args[0] {
						r = &routes[i]
					}
				}
				if r == nil {
					return fmt.Errorf("route %s not found", args[0])
				}
				if asJSON {
					return writeJSON(e.stdout, r)
				}
				return writeRouteStatus(e, r)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the rule with its counters and health as JSON")
	e.addServerFlag(cmd)
	return cmd
}

func writeRouteStatus(e *env, r *semaq.RouteInfo) error {
	if r.Error != "" {
		return errors.New("route " + r.Name + " is stored but not loaded on this node: " + oneLine(r.Error))
	}
	fmt.Fprintf(e.stdout, "Route %s: %s\n", r.Name, describeRoute(&r.Route))
	fmt.Fprintf(e.stdout, "Matched %d, errors %d\n", r.Stats.Matched, r.Stats.Errors)
	tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	switch {
	case len(r.Health) > 0:
		fmt.Fprintln(tw, "TARGET\tWEIGHT\tEFFECTIVE\tHEALTH\tERROR RATE\tACK LATENCY\tERRORS\tROUTED")
		for _, h := range r.Health {
			lat := "-"
			if h.AckLatency > 0 {
				lat = h.AckLatency.String()
			}
			fmt.Fprintf(tw, "%s\t%d\t%g\t%.3f\t%.3f\t%s\t%d\t%d\n", h.Subject, h.Weight, h.Effective, h.Health,
				h.ErrorRate, lat, h.Errors, r.Stats.Targets[h.Subject])
		}
	case len(r.Split) > 0:
		fmt.Fprintln(tw, "TARGET\tWEIGHT\tROUTED")
		for _, s := range r.Split {
			fmt.Fprintf(tw, "%s\t%d\t%d\n", s.Subject, s.Weight, r.Stats.Targets[s.Subject])
		}
	}
	return tw.Flush()
}
