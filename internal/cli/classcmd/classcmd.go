// Package classcmd is `semaq queue class`: the hardware classes of work
// queues (docs/queues.md, Hardware classes), added, listed and removed by
// an admin. It also gives the semaq command the worker's --labels flag and
// the classes part of `semaq queue status`.
package classcmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/cli/clienv"
	"github.com/semaq/semaq/semaq"
)

// New is the `class` command group, under `semaq queue`.
func New(env clienv.Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "class",
		Short: "Hardware classes of work queues: add, ls, rm",
		Long: `A class groups the labels its requests' workers must have (--require) and would
rather have (--prefer), and may cap how many of its requests workers hold at
once across the cluster (--max-concurrency). A request names its class with
the AI-Class header, or is in its queue's (semaq queue add --class). Only
admins change classes. See docs/queues.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(addCmd(env), lsCmd(env), rmCmd(env))
	return cmd
}

func addCmd(env clienv.Env) *cobra.Command {
	var (
		qc              semaq.QueueClass
		require, prefer string
		replace         bool
	)
	cmd := &cobra.Command{
		Use:     "add NAME [--require K=V,...] [--prefer K=V,...] [--max-concurrency N]",
		Short:   "Add (or with --replace, replace) a class",
		Example: `  semaq queue class add hbm2-inference --require hardware.gpu.memory=hbm2 --max-concurrency 8`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			qc.Name = args[0]
			var err error
			if require != "" {
				if qc.Require, err = semaq.ParseLabels(require); err != nil {
					return fmt.Errorf("--require: %w", err)
				}
			}
			if prefer != "" {
				if qc.Prefer, err = semaq.ParseLabels(prefer); err != nil {
					return fmt.Errorf("--prefer: %w", err)
				}
			}
			if err := qc.Check(); err != nil {
				return err
			}
			return env.WithClient(cmd, func(ctx context.Context, c *client.Client) error {
				ci, err := c.AddClass(ctx, qc, replace)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(env.Stdout(), "Class %s added (require %s, prefer %s, max concurrency %s)\n",
					ci.Name, orDash(semaq.FormatLabels(ci.Require)), orDash(semaq.FormatLabels(ci.Prefer)), capOf(ci.MaxConcurrency))
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&require, "require", "", "labels a worker must announce, `K=V,...`")
	f.StringVar(&prefer, "prefer", "", "labels a worker should announce, `K=V,...`")
	f.IntVar(&qc.MaxConcurrency, "max-concurrency", 0, "requests of the class workers may hold at once, cluster-wide (0: no cap)")
	f.StringVar(&qc.Description, "description", "", "what the class is for")
	f.BoolVar(&replace, "replace", false, "replace a class of that name")
	env.AddServerFlag(cmd)
	return cmd
}

func lsCmd(env clienv.Env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List the classes, with the requests each has held now",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return env.WithClient(cmd, func(ctx context.Context, c *client.Client) error {
				list, err := c.Classes(ctx)
				if err != nil {
					return err
				}
				w := env.Stdout()
				if asJSON {
					if list == nil {
						list = []semaq.ClassInfo{}
					}
					enc := json.NewEncoder(w)
					enc.SetIndent("", "  ")
					return enc.Encode(list)
				}
				if len(list) == 0 {
					_, err := fmt.Fprintln(w, "No classes.")
					return err
				}
				tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tREQUIRE\tPREFER\tHELD\tMAX")
				for _, ci := range list {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", ci.Name, orDash(semaq.FormatLabels(ci.Require)),
						orDash(semaq.FormatLabels(ci.Prefer)), ci.Held, capOf(ci.MaxConcurrency))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	env.AddServerFlag(cmd)
	return cmd
}

func rmCmd(env clienv.Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "rm NAME",
		Short:   "Remove a class: its requests lose its cap at once, its labels when next indexed",
		Example: `  semaq queue class rm hbm2-inference`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return env.WithClient(cmd, func(ctx context.Context, c *client.Client) error {
				if err := c.DeleteClass(ctx, args[0]); err != nil {
					return err
				}
				_, err := fmt.Fprintf(env.Stdout(), "Class %s removed\n", args[0])
				return err
			})
		},
	}
	env.AddServerFlag(cmd)
	return cmd
}

// WriteStatus writes the classes part of `semaq queue status`.
func WriteStatus(w io.Writer, classes []semaq.ClassStat) {
	if len(classes) == 0 {
		return
	}
	fmt.Fprintln(w, "  by class:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, cs := range classes {
		fmt.Fprintf(tw, "    %s\t%d queued\t%d held here\t%d held in the cluster, max %s\n", cs.Class, cs.Queued, cs.Held, cs.ClusterHeld, capOf(cs.Max))
	}
	tw.Flush()
}

// Labels is the worker's --labels flag: K=V,... added to *m.
func Labels(m *map[string]string) interface {
	String() string
	Set(string) error
	Type() string
} {
	return labelsValue{m}
}

type labelsValue struct{ m *map[string]string }

func (v labelsValue) String() string {
	if v.m == nil {
		return ""
	}
	return semaq.FormatLabels(*v.m)
}

func (v labelsValue) Set(s string) error {
	l, err := semaq.ParseLabels(s)
	if err != nil {
		return err
	}
	if *v.m == nil {
		*v.m = map[string]string{}
	}
	maps.Copy(*v.m, l)
	return nil
}

func (labelsValue) Type() string { return "K=V,..." }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func capOf(n int) string {
	if n == 0 {
		return "none"
	}
	return strconv.Itoa(n)
}
