package cli

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/internal/schema/infer"
)

// newSchemaCmd is the schema registry's command group. Subcommands that
// talk to the broker live in schema_*.go.
func newSchemaCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schema",
		Short: "Schema registry: register, check, bind and infer schemas",
	}
	cmd.AddCommand(newSchemaInferCmd(e))
	for _, add := range schemaSubcommands {
		cmd.AddCommand(add(e))
	}
	return cmd
}

// schemaSubcommands are added by other files of the package.
var schemaSubcommands []func(*env) *cobra.Command

func newSchemaInferCmd(e *env) *cobra.Command {
	var closed bool
	cmd := &cobra.Command{
		Use:   "infer [FILE|-]",
		Short: "Print a JSON Schema inferred from JSON samples, one per line",
		Long: `Read JSON samples, one document per line (FILE, or stdin when FILE is - or
absent), and print a JSON Schema (draft 2020-12) they all satisfy: the types
seen at each location, the properties present in every sample (required),
string formats every value matches (date-time, uuid, email, uri), small
enumerations (at most 5 values, each seen 3 times on average), and nested
objects and arrays. The same samples always give the same output.

Objects are open by default: a message may carry properties the samples did
not show. Under the default BACKWARD compatibility an open schema cannot gain
a typed optional property later (OPTIONAL_PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL:
old messages may already hold another value under that name). --closed adds
"additionalProperties": false to every object: messages with unknown
properties are refused, and new optional properties are compatible.`,
		Example: `  semaq schema infer samples.jsonl > req.json
  semaq schema infer --closed samples.jsonl > req.json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var r io.Reader = e.stdin
			name := "stdin"
			if len(args) == 1 && args[0] != "-" {
				f, err := os.Open(args[0])
				if err != nil {
					return err
				}
				defer f.Close()
				r, name = f, args[0]
			}
			in := infer.Inferrer{Closed: closed}
			if err := in.ReadLines(r); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			b, err := in.JSON()
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			_, err = e.stdout.Write(b)
			return err
		},
	}
	cmd.Flags().BoolVar(&closed, "closed", false, `close every object ("additionalProperties": false): unknown properties are refused, and adding optional ones later is backward compatible`)
	return cmd
}
