package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	jsonfmt "github.com/semaq/semaq/internal/schema/json"
	"github.com/semaq/semaq/semaq"
)

// The schema registry commands that talk to the broker over NATS.
func init() {
	schemaSubcommands = append(schemaSubcommands,
		newSchemaRegisterCmd,
		newSchemaLsCmd,
		newSchemaGetCmd,
		newSchemaCheckCmd,
		newSchemaConfigCmd,
		newSchemaRmCmd,
		newSchemaBindCmd,
		newSchemaUnbindCmd,
		newSchemaBindingsCmd,
	)
}

// schemaInput is the schema text and options of register and check.
type schemaInput struct {
	typ  string
	refs []string
}

func (in *schemaInput) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&in.typ, "type", "", "schema type: json, avro or protobuf (default: avro for .avsc files, protobuf for .proto, else json)")
	f.StringArrayVar(&in.refs, "ref", nil, "reference to another subject's schema, `NAME=SUBJECT:VERSION` (VERSION a number or latest); repeatable")
}

// read returns the schema text of FILE (stdin for -) and its options.
func (in *schemaInput) read(e *env, file string) (string, []client.SchemaOption, error) {
	typ, err := schemaType(in.typ, file)
	if err != nil {
		return "", nil, err
	}
	refs := make([]semaq.SchemaReference, 0, len(in.refs))
	for _, r := range in.refs {
		ref, err := parseSchemaRef(r)
		if err != nil {
			return "", nil, err
		}
		refs = append(refs, ref)
	}
	var b []byte
	if file == "-" {
		b, err = io.ReadAll(e.stdin)
	} else {
		b, err = os.ReadFile(file)
	}
	if err != nil {
		return "", nil, err
	}
	if strings.TrimSpace(string(b)) == "" {
		name := file
		if file == "-" {
			name = "stdin"
		}
		return "", nil, fmt.Errorf("%s: empty schema", name)
	}
	return string(b), []client.SchemaOption{client.WithSchemaType(typ), client.WithSchemaReferences(refs...)}, nil
}

// schemaType is --type, checked, or the type the file's extension implies.
func schemaType(flag, file string) (string, error) {
	if flag != "" {
		t, err := semaq.ParseSchemaType(flag)
		if err != nil {
			return "", fmt.Errorf("--type %q: use json, avro or protobuf", flag)
		}
		return t, nil
	}
	switch strings.ToLower(filepath.Ext(file)) {
	case ".avsc":
		return semaq.SchemaTypeAvro, nil
	case ".proto":
		return semaq.SchemaTypeProtobuf, nil
	}
	return semaq.SchemaTypeJSON, nil
}

// parseSchemaRef reads NAME=SUBJECT:VERSION. The subject is what lies
// between the first '=' and the last ':', so subjects may hold ':'.
func parseSchemaRef(s string) (semaq.SchemaReference, error) {
	bad := func(why string) (semaq.SchemaReference, error) {
		return semaq.SchemaReference{}, fmt.Errorf("--ref %q: %s; want NAME=SUBJECT:VERSION, VERSION a number or latest", s, why)
	}
	name, rest, ok := strings.Cut(s, "=")
	if !ok || name == "" {
		return bad("no NAME=")
	}
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 {
		return bad("no SUBJECT:VERSION")
	}
	subject, ver := rest[:i], rest[i+1:]
	if strings.EqualFold(ver, "latest") {
		return semaq.SchemaReference{Name: name, Subject: subject, Version: -1}, nil
	}
	n, err := strconv.ParseInt(ver, 10, 32)
	if err != nil || n < 1 {
		return bad(fmt.Sprintf("version %q is not a number from 1 or latest", ver))
	}
	return semaq.SchemaReference{Name: name, Subject: subject, Version: int(n)}, nil
}

// versionFlag checks --version: latest or a number.
func versionFlag(v string) error {
	if err := semaq.CheckSchemaVersion(v); err != nil {
		return fmt.Errorf("--version %q: use latest or a number from 1", v)
	}
	return nil
}

func newSchemaRegisterCmd(e *env) *cobra.Command {
	var (
		in        schemaInput
		normalize bool
		asJSON    bool
		strict    bool
	)
	cmd := &cobra.Command{
		Use:   "register SUBJECT FILE|-",
		Short: "Register a schema under a registry subject; prints its id and version",
		Long: `Register the schema in FILE (stdin for -) as the next version of SUBJECT, if
it is compatible with the subject's earlier versions under the subject's
compatibility mode. The same schema has the same global id under every
subject; registering a live version's schema again prints that version.
A JSON Schema keyword no draft defines ("requird") is valid JSON Schema, and
enforces nothing: register warns about each, with the keyword meant when it
is a near miss; --strict refuses the schema instead.`,
		Example: `  semaq schema register orders orders.schema.json
  semaq schema register payments payment.avsc
  semaq schema register orders order.proto --ref common.proto=common:latest`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			text, opts, err := in.read(e, args[1])
			if err != nil {
				return err
			}
			if typ, _ := schemaType(in.typ, args[1]); typ == semaq.SchemaTypeJSON {
				warnings := jsonfmt.UnknownKeywords(text)
				if strict && len(warnings) > 0 {
					return fmt.Errorf("--strict: %s", strings.Join(warnings, "; "))
				}
				for _, w := range warnings {
					fmt.Fprintf(e.stderr, "semaq: warning: %s\n", w)
				}
			}
			if normalize {
				opts = append(opts, client.WithSchemaNormalize())
			}
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				id, version, err := c.RegisterSchema(ctx, args[0], text, opts...)
				if err != nil {
					if errors.Is(err, semaq.ErrSchemaIncompatible) {
						writeSchemaHints(e.stderr, args[0], ruleNames(err.Error()))
					}
					return err
				}
				if asJSON {
					return writeJSON(e.stdout, semaq.SchemaRegisterResponse{ID: id, Version: version})
				}
				_, err = fmt.Fprintf(e.stdout, "Registered %s version %d: schema id %d\n", args[0], version, id)
				return err
			})
		},
	}
	in.addFlags(cmd)
	cmd.Flags().BoolVar(&normalize, "normalize", false, "store the schema's canonical text instead of the file's")
	cmd.Flags().BoolVar(&strict, "strict", false, "refuse a JSON Schema with a keyword no draft defines instead of warning")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"id":N,"version":N}`)
	e.addServerFlag(cmd)
	return cmd
}

func newSchemaLsCmd(e *env) *cobra.Command {
	var deleted, asJSON bool
	cmd := &cobra.Command{
		Use:     "ls [SUBJECT]",
		Aliases: []string{"list"},
		Short:   "List registry subjects, or the versions of one subject",
		Args:    cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				if len(args) == 1 {
					vs, err := c.SchemaVersions(ctx, args[0], deleted)
					if err != nil {
						return err
					}
					if asJSON {
						if vs == nil {
							vs = []int{}
						}
						return writeJSON(e.stdout, vs)
					}
					for _, v := range vs {
						fmt.Fprintln(e.stdout, v)
					}
					return nil
				}
				subjects, err := c.SchemaSubjects(ctx, deleted)
				if err != nil {
					return err
				}
				if asJSON {
					if subjects == nil {
						subjects = []string{}
					}
					return writeJSON(e.stdout, subjects)
				}
				if len(subjects) == 0 {
					_, err := fmt.Fprintln(e.stdout, "No subjects.")
					return err
				}
				for _, s := range subjects {
					fmt.Fprintln(e.stdout, s)
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&deleted, "deleted", false, "include soft-deleted subjects (or versions)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	e.addServerFlag(cmd)
	return cmd
}

func newSchemaGetCmd(e *env) *cobra.Command {
	var (
		version string
		id      int
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "get [SUBJECT] [--version N|latest] [--id N]",
		Short: "Print a schema: a version of a subject, or a schema by id",
		Long: `Print the schema text on stdout, and what it is (subject, version, id, type,
references) on stderr, so the text can be redirected to a file. --json prints
everything as one JSON object on stdout.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			byID := cmd.Flags().Changed("id")
			switch {
			case byID && len(args) == 1:
				return fmt.Errorf("give SUBJECT or --id, not both")
			case byID && cmd.Flags().Changed("version"):
				return fmt.Errorf("--version applies to SUBJECT, not to --id")
			case byID && id < 1:
				return fmt.Errorf("--id %d: schema ids start at 1", id)
			case !byID && len(args) == 0:
				return fmt.Errorf("give SUBJECT or --id N")
			}
			if !byID {
				if err := versionFlag(version); err != nil {
					return err
				}
			}
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				var s *semaq.Schema
				var err error
				if byID {
					s, err = c.Schema(ctx, id)
				} else {
					s, err = c.SchemaVersion(ctx, args[0], version)
				}
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(e.stdout, s)
				}
				return writeSchema(e.stdout, e.stderr, s)
			})
		},
	}
	cmd.Flags().StringVar(&version, "version", "latest", "version of SUBJECT: a number or latest")
	cmd.Flags().IntVar(&id, "id", 0, "global schema id (instead of SUBJECT)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the schema and what it is as JSON")
	e.addServerFlag(cmd)
	return cmd
}

// writeSchema prints the text on out and what it is on info.
func writeSchema(out, info io.Writer, s *semaq.Schema) error {
	if s.Subject != "" {
		fmt.Fprintf(info, "Subject %s version %d: schema id %d (%s)\n", s.Subject, s.Version, s.ID, s.Type)
	} else {
		fmt.Fprintf(info, "Schema id %d (%s)\n", s.ID, s.Type)
	}
	for _, r := range s.References {
		fmt.Fprintf(info, "  reference %s: %s version %d\n", r.Name, r.Subject, r.Version)
	}
	text := s.Text
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	_, err := io.WriteString(out, text)
	return err
}

func newSchemaCheckCmd(e *env) *cobra.Command {
	var (
		in       schemaInput
		version  string
		allowNew bool
	)
	cmd := &cobra.Command{
		Use:     "check SUBJECT FILE|-",
		Example: `  semaq schema check orders orders.schema.json`,
		Short:   "Test a schema against a subject without registering it (exit 0 compatible, 1 not, 2 error)",
		Long: `Test the schema in FILE (stdin for -) against SUBJECT. Without --version it is
checked as register would check it; with --version against that version only.
Prints "compatible" and exits 0, or prints one reason per line and exits 1.
Any other failure exits 2, an unknown SUBJECT included: a misspelt subject
must not pass a CI gate. --allow-new accepts a SUBJECT without versions
(any schema is compatible with it, as register would take it).`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.ExactArgs(2)(cmd, args); err != nil {
				return &exitError{code: 2, msg: err.Error()}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			err := func() error {
				if version != "" {
					if err := versionFlag(version); err != nil {
						return err
					}
				}
				text, opts, err := in.read(e, args[1])
				if err != nil {
					return err
				}
				subject := args[0]
				notFound := fmt.Errorf("registry subject %q not found (semaq schema ls lists them; --allow-new checks against a new subject)", subject)
				return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
					if version == "" && !allowNew {
						// The registry takes any schema for a subject without
						// versions; a CI gate must not.
						vs, err := c.SchemaVersions(ctx, subject, false)
						switch {
						case errors.Is(err, semaq.ErrSchemaSubjectNotFound), err == nil && len(vs) == 0:
							return notFound
						case err != nil:
							return err
						}
					}
					ok, reasons, err := c.CheckSchema(ctx, subject, version, text, opts...)
					if errors.Is(err, semaq.ErrSchemaSubjectNotFound) {
						return notFound
					}
					if err != nil {
						return err
					}
					if ok {
						_, err := fmt.Fprintln(e.stdout, "compatible")
						return err
					}
					rules := make([]string, 0, len(reasons))
					for _, r := range reasons {
						fmt.Fprintln(e.stdout, r.String())
						rules = append(rules, r.Rule)
					}
					writeSchemaHints(e.stderr, subject, rules)
					return &exitError{code: 1, msg: fmt.Sprintf("incompatible with subject %s: %d reason(s)", subject, len(reasons))}
				})
			}()
			if _, ok := errors.AsType[*exitError](err); err != nil && !ok {
				return &exitError{code: 2, msg: err.Error()}
			}
			return err
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: 2, msg: err.Error()} })
	in.addFlags(cmd)
	cmd.Flags().StringVar(&version, "version", "", "check against this version only: a number or latest")
	cmd.Flags().BoolVar(&allowNew, "allow-new", false, "accept a SUBJECT that has no versions yet (default: exit 2, as for a typo)")
	e.addServerFlag(cmd)
	return cmd
}

func newSchemaConfigCmd(e *env) *cobra.Command {
	var (
		compat string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "config [SUBJECT] [--compat MODE]",
		Short: "Show or set the compatibility mode of a subject, or the global one",
		Long: `Without --compat, print the compatibility mode that applies to SUBJECT
("(inherited)" when it has none of its own), or the global mode. With --compat,
set it. Modes: ` + strings.Join(semaq.SchemaCompatibilities, ", ") + ` (any case).`,
		Example: `  semaq schema config
  semaq schema config orders --compat full_transitive`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			subject := ""
			if len(args) == 1 {
				subject = args[0]
			}
			set := cmd.Flags().Changed("compat")
			if set {
				m, err := semaq.ParseSchemaCompatibility(compat)
				if err != nil {
					return fmt.Errorf("--compat %q: use %s", compat, strings.ToLower(strings.Join(semaq.SchemaCompatibilities, ", ")))
				}
				compat = m
			}
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				var cfg *semaq.SchemaConfig
				var err error
				if set {
					cfg, err = c.SetSchemaCompatibility(ctx, subject, compat)
				} else {
					cfg, err = c.SchemaCompatibility(ctx, subject)
				}
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(e.stdout, cfg)
				}
				name := "global"
				if subject != "" {
					name = subject
				}
				switch {
				case set && subject == "":
					_, err = fmt.Fprintf(e.stdout, "Global compatibility set to %s\n", cfg.Compatibility)
				case set:
					_, err = fmt.Fprintf(e.stdout, "Compatibility of %s set to %s\n", subject, cfg.Compatibility)
				case cfg.Inherited:
					_, err = fmt.Fprintf(e.stdout, "%s: %s (inherited)\n", name, cfg.Compatibility)
				default:
					_, err = fmt.Fprintf(e.stdout, "%s: %s\n", name, cfg.Compatibility)
				}
				return err
			})
		},
	}
	cmd.Flags().StringVar(&compat, "compat", "", "set the compatibility `MODE`")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the setting as JSON")
	e.addServerFlag(cmd)
	return cmd
}

func newSchemaRmCmd(e *env) *cobra.Command {
	var (
		version   string
		permanent bool
	)
	cmd := &cobra.Command{
		Use:     "rm SUBJECT [--version N|latest] [--permanent]",
		Example: `  semaq schema rm orders --version 1`,
		Aliases: []string{"delete"},
		Short:   "Delete a subject's versions (soft; --permanent removes soft-deleted ones)",
		Long: `Soft-delete every version of SUBJECT, or one with --version: the versions
are hidden, their schema ids stay readable. --permanent removes versions that
were soft-deleted before.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if version != "" {
				if err := versionFlag(version); err != nil {
					return err
				}
			}
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				vs, err := c.DeleteSchema(ctx, args[0], version, permanent)
				if err != nil {
					return err
				}
				how := "Soft-deleted"
				if permanent {
					how = "Permanently deleted"
				}
				_, err = fmt.Fprintf(e.stdout, "%s %s %s %s\n", how, args[0], plural(len(vs), "version", "versions"), joinInts(vs))
				return err
			})
		},
	}
	cmd.Flags().StringVar(&version, "version", "", "delete this version only: a number or latest")
	cmd.Flags().BoolVar(&permanent, "permanent", false, "remove versions that were soft-deleted before")
	e.addServerFlag(cmd)
	return cmd
}

func newSchemaBindCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bind PATTERN SUBJECT",
		Short: "Validate messages on NATS subjects matching PATTERN against a registry subject",
		Long: `Bind a NATS subject pattern to a registry subject: the broker validates each
message published on a matching subject against the registry subject's
schema before storing it. The most specific pattern wins; binding a pattern
again replaces its subject.`,
		Example: `  semaq schema bind 'ai.orders.>' orders`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				if err := c.BindSchema(ctx, args[0], args[1]); err != nil {
					return err
				}
				_, err := fmt.Fprintf(e.stdout, "Bound %s to schema subject %s\n", args[0], args[1])
				return err
			})
		},
	}
	e.addServerFlag(cmd)
	return cmd
}

func newSchemaUnbindCmd(e *env) *cobra.Command {
	return removal{
		use:     "unbind PATTERN",
		example: `  semaq schema unbind 'ai.orders.>'`,
		short:   "Remove the binding of a NATS subject pattern",
		done:    "Unbound %s",
		remove:  (*client.Client).UnbindSchema,
	}.command(e)
}

func newSchemaBindingsCmd(e *env) *cobra.Command {
	cmd := listing[semaq.SchemaBinding]{
		short:    "List the bindings of NATS subject patterns to registry subjects",
		noun:     "bindings",
		jsonHelp: "print the bindings as a JSON array",
		header:   []string{"PATTERN", "SUBJECT"},
		fetch:    (*client.Client).SchemaBindings,
		row:      func(b semaq.SchemaBinding) []string { return []string{b.Pattern, b.Subject} },
	}.command(e)
	cmd.Use, cmd.Aliases = "bindings", nil
	return cmd
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}
