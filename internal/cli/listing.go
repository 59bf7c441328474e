package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
)

// The CLI's list, show and remove commands are built from the three
// shapes below, so that each kind prints alike: a table with a header
// (or "No <things>." when there is nothing), JSON with --json, and one
// line saying what was removed.

// listing is an "ls" command over one kind of thing.
type listing[T any] struct {
	short    string
	noun     string // plural, as in "No agents."
	jsonHelp string
	header   []string
	fetch    func(c *client.Client, ctx context.Context) ([]T, error) // a client method
	row      func(T) []string                                         // one cell per header column
}

func (l listing[T]) command(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   l.short,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				items, err := l.fetch(c, ctx)
				if err != nil {
					return err
				}
				if asJSON {
					if items == nil {
						items = []T{} // an empty list is [], not null
					}
					return writeJSON(e.stdout, items)
				}
				if len(items) == 0 {
					_, err := fmt.Fprintf(e.stdout, "No %s.\n", l.noun)
					return err
				}
				tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, strings.Join(l.header, "\t"))
				for _, it := range items {
					fmt.Fprintln(tw, strings.Join(l.row(it), "\t"))
				}
				return tw.Flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, l.jsonHelp)
	e.addServerFlag(cmd)
	return cmd
}

// showing is a command describing one thing by name.
type showing[T any] struct {
	use, short, long, example, jsonHelp string
	fetch                               func(c *client.Client, ctx context.Context, name string) (T, error) // a client method
	write                               func(e *env, v T) error
}

func (s showing[T]) command(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     s.use,
		Short:   s.short,
		Long:    s.long,
		Example: s.example,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				v, err := s.fetch(c, ctx, args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(e.stdout, v)
				}
				return s.write(e, v)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, s.jsonHelp)
	e.addServerFlag(cmd)
	return cmd
}

// removal is a command removing one thing by name; done says what was
// removed, with %s for the name.
type removal struct {
	use, short, example, done string
	aliases                   []string
	remove                    func(c *client.Client, ctx context.Context, name string) error // a client method
}

func (r removal) command(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:     r.use,
		Example: r.example,
		Aliases: r.aliases,
		Short:   r.short,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				if err := r.remove(c, ctx, args[0]); err != nil {
					return err
				}
				_, err := fmt.Fprintf(e.stdout, r.done+"\n", args[0])
				return err
			})
		},
	}
	e.addServerFlag(cmd)
	return cmd
}
