package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// newUserCmd is `semaq user`: identities of a broker started with --auth.
func newUserCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "user",
		Short: "Manage the users of a broker started with --auth: add, ls, info, quota, rm",
		Long: `Users authenticate the NATS door of a broker started with --auth, each with a
key the broker shows once. A user has a role: admin (everything, users
included), publisher (publish on its --subjects), reader (subscribe to and
filter its --subjects), worker (fetch from and answer the queues its --queues
globs match) or service (publisher and reader on its --subjects). These commands
need an admin's key (--key or $SEMAQ_KEY); see docs/security.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(
		newUserAddCmd(e),
		newUserQuotaCmd(e),
		listing[semaq.UserInfo]{
			short:    "List the users",
			noun:     "users",
			jsonHelp: "print the users as JSON",
			header:   []string{"NAME", "ROLE", "TENANT", "GRANTS", "KEY IDS", "CREDENTIAL", "CREATED"},
			fetch:    (*client.Client).Users,
			row: func(u semaq.UserInfo) []string {
				return []string{u.Name, u.Role, dash(u.Tenant), dash(grants(u)), dash(keyIDs(u)), credential(u), u.Created.Format("2006-01-02 15:04:05")}
			},
		}.command(e),
		showing[*semaq.UserInfo]{
			use:      "info NAME",
			short:    "Describe a user",
			example:  "  semaq user info ingest-svc",
			jsonHelp: "print the user as JSON",
			fetch:    (*client.Client).UserInfo,
			write: func(e *env, u *semaq.UserInfo) error {
				_, err := fmt.Fprintf(e.stdout, "Name:     %s\nRole:     %s\nTenant:   %s\nSubjects: %s\nQueues:   %s\nQuota:    %s\nKeys:     %s\nCreated:  %s\n",
					u.Name, u.Role, dash(u.Tenant), dash(strings.Join(u.Subjects, " ")), dash(strings.Join(u.Queues, " ")),
					dash(userQuota(*u)), dash(keyIDs(*u)), u.Created.Format("2006-01-02 15:04:05 MST"))
				if err == nil && u.Nkey != "" {
					_, err = fmt.Fprintf(e.stdout, "Nkey:     %s\n", u.Nkey)
				}
				if err == nil && u.CertSubject != "" {
					_, err = fmt.Fprintf(e.stdout, "Cert:     %s\n", u.CertSubject)
				}
				return err
			},
		}.command(e),
		removal{
			use:     "rm NAME",
			short:   "Remove a user; its open connections are closed",
			example: "  semaq user rm alice",
			done:    "User %s removed.",
			aliases: []string{"remove"},
			remove: func(c *client.Client, ctx context.Context, name string) error {
				_, err := c.RemoveUser(ctx, name)
				return err
			},
		}.command(e),
	)
	return cmd
}

func newUserAddCmd(e *env) *cobra.Command {
	var (
		r      semaq.UserAddRequest
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "add NAME --role ROLE [--tenant T] [--subjects S,...] [--queues GLOB,...] [--rpm N] [--tpm N] [--nkey U... | --cert-subject DN]",
		Short: "Add a user and print its key, once",
		Long: `Add a user and print its key. The key is shown this once: the broker keeps only
its hash. Give it to the user's program (client.WithKey, or --key / $SEMAQ_KEY
for this CLI). --subjects are NATS subjects (wildcards allowed, first token
literal); --queues are globs over queue names (INFER_*, Q[0-9]). --rpm and --tpm
are the user's own quotas, requests and prompt tokens per minute, on top of its
tenant's (docs/quotas.md).

Instead of a key, a user may authenticate by an nkey (--nkey, its public key
U...: the user connects with the seed, --nkey-seed FILE) or by a TLS client
certificate (--cert-subject, the certificate's subject as an RFC 4514 name,
most specific first, as 'openssl x509 -noout -subject -nameopt RFC2253'
prints it; the broker must verify client certificates, --tls-client-ca).
Such a user gets no key, and connects with --auth-user NAME.`,
		Example: `  semaq user add ingest-svc --tenant acme --role publisher --subjects 'ai.inference.>'
  semaq user add gpu-7 --role worker --queues 'INFER_*'
  semaq user add alice --tenant acme --role reader --subjects 'results.acme.>'
  semaq user add chat-app --tenant acme --role service --subjects 'ai.infer.>' --rpm 600 --tpm 100000
  semaq user add gpu-8 --role worker --queues 'INFER_*' --nkey UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4
  semaq user add etl --tenant acme --role publisher --subjects 'etl.>' --cert-subject 'CN=etl,O=acme'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r.Name = args[0]
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				resp, err := c.AddUser(ctx, r)
				if errors.Is(err, context.DeadlineExceeded) {
					// The change may have been made; its answer, with the
					// only copy of the key, did not come.
					return fmt.Errorf("%w\nthe user may have been added without its key reaching you: "+
						"check with `semaq user info %s`, and if it is there, `semaq key rotate %s` gives it a new key", err, r.Name, r.Name)
				}
				if err != nil {
					return err
				}
				return e.writeKey(resp, asJSON, "added")
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&r.Role, "role", "", "admin, publisher, reader, worker or service (required)")
	f.StringVar(&r.Tenant, "tenant", "", "the tenant the user belongs to")
	f.StringSliceVar(&r.Subjects, "subjects", nil, "subjects a publisher, reader or service works on (comma-separated or repeated)")
	f.StringSliceVar(&r.Queues, "queues", nil, "globs of the queues a worker serves (comma-separated or repeated)")
	f.DurationVar(&r.ExpiresIn, "expires", 0, "the key stops working this long from now, e.g. 720h (0: never)")
	f.Int64Var(&r.RPM, "rpm", 0, "the user's quota of requests per minute (0: none)")
	f.Int64Var(&r.TPM, "tpm", 0, "the user's quota of prompt tokens per minute (0: none)")
	f.StringVar(&r.Nkey, "nkey", "", "the user's public nkey (U...): it authenticates by nkey, and gets no key")
	f.StringVar(&r.CertSubject, "cert-subject", "", "subject `DN` of the user's TLS client certificates ('CN=gpu-7,O=acme'): it authenticates by certificate, and gets no key")
	f.BoolVar(&asJSON, "json", false, "print the user and its key as JSON")
	_ = cmd.MarkFlagRequired("role")
	e.addServerFlag(cmd)
	return cmd
}

// newUserQuotaCmd is `semaq user quota`: a user's own quotas changed.
func newUserQuotaCmd(e *env) *cobra.Command {
	var rpm, tpm int64
	cmd := &cobra.Command{
		Use:   "quota NAME [--rpm N] [--tpm N]",
		Short: "Change a user's own quotas: requests and prompt tokens per minute",
		Long: `Change the quotas a user has of its own, on top of its tenant's
(docs/quotas.md): --rpm requests per minute, --tpm prompt tokens per minute.
A flag left out keeps its value; 0 removes the limit. The node charges the new
quota from the moment the command returns; the user keeps its key.`,
		Example: `  semaq user quota chat-app --rpm 1200
  semaq user quota chat-app --tpm 0`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var r, t *int64
			if cmd.Flags().Changed("rpm") {
				r = &rpm
			}
			if cmd.Flags().Changed("tpm") {
				t = &tpm
			}
			if r == nil && t == nil {
				return fmt.Errorf("user quota %s: give --rpm, --tpm or both", args[0])
			}
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				u, err := c.SetUserQuota(ctx, args[0], r, t)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(e.stdout, "User %s: quota %s.\n", u.Name, dash(userQuota(*u)))
				return err
			})
		},
	}
	cmd.Flags().Int64Var(&rpm, "rpm", 0, "requests per minute (0: no limit)")
	cmd.Flags().Int64Var(&tpm, "tpm", 0, "prompt tokens per minute (0: no limit)")
	e.addServerFlag(cmd)
	return cmd
}

// newKeyCmd is `semaq key`: a user's keys.
func newKeyCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "key",
		Short: "Manage the keys of users: rotate",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	var (
		asJSON  bool
		expires time.Duration
	)
	rotate := &cobra.Command{
		Use:   "rotate NAME",
		Short: "Give a user a new key, printed once; the old key stops working now",
		Long: `Give a user a new key and print it, once. The user's old key stops working at
once: new connections with it are refused and its open connections are closed.`,
		Example: "  semaq key rotate ingest-svc",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				resp, err := c.RotateKey(ctx, args[0], expires)
				if err != nil {
					return err
				}
				return e.writeKey(resp, asJSON, "given a new key")
			})
		},
	}
	rotate.Flags().BoolVar(&asJSON, "json", false, "print the user and its new key as JSON")
	rotate.Flags().DurationVar(&expires, "expires", 0, "the new key stops working this long from now, e.g. 720h (0: never)")
	e.addServerFlag(rotate)
	cmd.AddCommand(rotate)
	return cmd
}

// writeKey prints a key the broker shows once.
func (e *env) writeKey(resp *semaq.UserAddResponse, asJSON bool, what string) error {
	if asJSON {
		return writeJSON(e.stdout, resp)
	}
	if resp.Key == "" {
		_, err := fmt.Fprintf(e.stdout, "User %s (%s) %s. It has no key: it authenticates by %s; connect with --auth-user %s.\n",
			resp.User.Name, resp.User.Role, what, credential(resp.User), resp.User.Name)
		return err
	}
	_, err := fmt.Fprintf(e.stdout, "User %s (%s) %s. Its key, which will not be shown again:\n\n  %s\n\n"+
		"Keep it secret; connect with --key or $SEMAQ_KEY (CLI) or client.WithKey (SDK).\n",
		resp.User.Name, resp.User.Role, what, resp.Key)
	return err
}

// userQuota describes a user's own quotas, "" when it has none.
func userQuota(u semaq.UserInfo) string {
	var parts []string
	if u.RPM > 0 {
		parts = append(parts, fmt.Sprintf("%d requests/min (rpm)", u.RPM))
	}
	if u.TPM > 0 {
		parts = append(parts, fmt.Sprintf("%d prompt tokens/min (tpm)", u.TPM))
	}
	return strings.Join(parts, ", ")
}

func grants(u semaq.UserInfo) string {
	return strings.Join(append(append([]string{}, u.Subjects...), u.Queues...), " ")
}

func keyIDs(u semaq.UserInfo) string {
	ids := make([]string, 0, len(u.Keys))
	for _, k := range u.Keys {
		id := k.ID
		if !k.Expires.IsZero() {
			id += " (expires " + k.Expires.UTC().Format("2006-01-02 15:04 MST") + ")"
		}
		ids = append(ids, id)
	}
	return strings.Join(ids, " ")
}

// credential says how u authenticates besides keys: its nkey or its
// certificate subject.
func credential(u semaq.UserInfo) string {
	switch {
	case u.Nkey != "":
		return "nkey " + u.Nkey
	case u.CertSubject != "":
		return "cert " + u.CertSubject
	}
	return "-"
}

// dash is s, or "-" for nothing.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
