package cli

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/provenance"
	"github.com/semaq/semaq/semaq"
)

// newProvenanceCmd is `semaq provenance`: session chains, exported from
// the broker and verified without it.
func newProvenanceCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "provenance",
		Short: "Session chains: export a session's chain, verify an export offline, list the nodes' signing keys",
		Long: `A stream with provenance on (semaq stream add --provenance session|signed)
chains the messages of each session (AI-Session) by hash: each carries the hash
of its content and of the message before it, and with "signed" the signature of
the node that stored it. 'export' writes a session's chain to a file; 'verify'
checks such a file without the broker and names the first link that was
modified, removed, inserted or reordered. See docs/provenance.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newProvenanceExportCmd(e), newProvenanceVerifyCmd(e), newProvenanceKeysCmd(e))
	return cmd
}

func newProvenanceExportCmd(e *env) *cobra.Command {
	var stream, tenant, out string
	cmd := &cobra.Command{
		Use:   "export SESSION --stream NAME [--tenant T] [-o FILE]",
		Short: "Write a session's chain to a file (default stdout), for 'semaq provenance verify'",
		Long: `Export writes the chain of session SESSION in stream NAME as NDJSON: a header
with the chain's head and the nodes' public keys, then every message of the
session from the chain's first link to its head, as the stream stores it. It
reads without consuming anything. With --auth a user exports its own tenant's
sessions; services and admins name one with --tenant.`,
		Example: `  semaq provenance export s-42 --stream AGENT -o s-42.ndjson
  semaq provenance export s-42 --stream AGENT --tenant acme > s-42.ndjson`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			session := args[0]
			if stream == "" {
				return errors.New("--stream is required: the stream whose chain to export, e.g. --stream AGENT")
			}
			if err := semaq.CheckStreamName(stream); err != nil {
				return fmt.Errorf("--stream %q: %w", stream, err)
			}
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				return e.exportProvenance(ctx, c, stream, tenant, session, out)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&stream, "stream", "", "the `NAME` of the stream that holds the chain (required)")
	f.StringVar(&tenant, "tenant", "", "the session's tenant (services and admins; others export their own)")
	f.StringVarP(&out, "output", "o", "", "write the export to `FILE` instead of stdout")
	e.addServerFlag(cmd)
	return cmd
}

// exportProvenance writes the export to out (stdout when empty): to a
// file only once the export is whole, so a failed one leaves none.
func (e *env) exportProvenance(ctx context.Context, c *client.Client, stream, tenant, session, out string) error {
	var (
		w    io.Writer = e.stdout
		tmp  *os.File
		dest = "stdout"
	)
	if out != "" {
		var err error
		if tmp, err = os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".*"); err != nil {
			return fmt.Errorf("-o %s: %w", out, err)
		}
		defer func() {
			if tmp != nil {
				tmp.Close()
				os.Remove(tmp.Name())
			}
		}()
		w, dest = tmp, out
	}
	lines := &lineCounter{w: w}
	head, err := c.ExportProvenance(ctx, stream, tenant, session, lines)
	if err != nil {
		return err
	}
	if tmp != nil {
		if err := tmp.Close(); err != nil {
			return fmt.Errorf("-o %s: %w", out, err)
		}
		if err := os.Rename(tmp.Name(), out); err != nil {
			return fmt.Errorf("-o %s: %w", out, err)
		}
		tmp = nil
	}
	links := uint64(max(lines.n-1, 0))
	fmt.Fprintf(e.stderr, "Exported %d links of session %s (stream %s) to %s; head %s\n", links, session, stream, dest, head.Hash)
	if links < head.Links {
		fmt.Fprintf(e.stderr, "semaq: warning: the chain has %d links and the stream holds %d of them (its limits removed the others?); verify names the missing ones\n",
			head.Links, links)
	}
	return nil
}

// lineCounter counts the lines written through it.
type lineCounter struct {
	w io.Writer
	n int
}

func (l *lineCounter) Write(p []byte) (int, error) {
	n, err := l.w.Write(p)
	l.n += bytes.Count(p[:n], []byte("\n"))
	return n, err
}

// Exit codes of `semaq provenance verify`, as `semaq policy test`'s.
const (
	exitChainBroken  = 1 // the chain does not verify
	exitVerifyFailed = 2 // the check could not run
)

func newProvenanceVerifyCmd(e *env) *cobra.Command {
	var (
		keys []string
		head string
	)
	cmd := &cobra.Command{
		Use:   "verify FILE|- [--key BASE64|FILE]... [--head HASH]",
		Short: "Check an export offline (exit 0 it verifies, 1 it does not, 2 the check could not run)",
		Long: `Verify checks an export of 'semaq provenance export' without the broker: it
recomputes every link's hash and checks that none was modified, removed,
inserted or reordered, that the last is the head, and for a signed chain every
signature. It prints one line: "OK: ..." (exit 0), or the first bad link on
stderr (exit 1), e.g.
  semaq: link 7 (stream seq 1234): modified: its content does not hash to its AI-Hash
Exit 2 when the file cannot be read or is not an export.

Without --key a signed chain is checked with the keys the export lists, which
proves it is consistent, not who made it; --key pins the nodes' public keys
(base64, or a FILE with one per line or the JSON of 'semaq provenance keys
--json'). --head takes a head hash kept elsewhere (an anchor): the chain must
hold a link with that hash, so a chain rewritten whole, head and all, fails.`,
		Example: `  semaq provenance verify s-42.ndjson
  semaq provenance keys --json > keys.json
  semaq provenance verify s-42.ndjson --key keys.json --head 3f2a…`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.ExactArgs(1)(cmd, args); err != nil {
				return &exitError{code: exitVerifyFailed, msg: err.Error()}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := e.verifyProvenance(args[0], keys, head)
			if err != nil {
				return &exitError{code: exitVerifyFailed, msg: err.Error()}
			}
			if !rep.OK() {
				return &exitError{code: exitChainBroken, msg: rep.String()}
			}
			_, err = fmt.Fprintln(e.stdout, rep.String())
			return err
		},
	}
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		err = c.Parent().FlagErrorFunc()(c, err) // the nearest flag suggested, as everywhere
		return &exitError{code: exitVerifyFailed, msg: err.Error()}
	})
	f := cmd.Flags()
	f.StringArrayVar(&keys, "key", nil, "a trusted node public key: base64, or a `FILE` of them (one per line, or 'semaq provenance keys --json'); repeatable")
	f.StringVar(&head, "head", "", "a trusted head `HASH` (hex) the chain must hold")
	return cmd
}

// verifyProvenance verifies the export in name ("-": stdin).
func (e *env) verifyProvenance(name string, keyArgs []string, head string) (*provenance.Report, error) {
	var opts provenance.VerifyOptions
	for _, k := range keyArgs {
		pubs, err := readKeys(k)
		if err != nil {
			return nil, err
		}
		opts.TrustedKeys = append(opts.TrustedKeys, pubs...)
	}
	if head != "" {
		if err := provenance.CheckHash(head); err != nil {
			return nil, fmt.Errorf("--head: %w", err)
		}
		opts.Head = head
	}
	r := e.stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	rep, err := provenance.Verify(r, opts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return rep, nil
}

// maxKeysFile bounds a --key FILE.
const maxKeysFile = 1 << 20

// readKeys reads the public keys of a --key: base64 itself, or a file of
// them.
func readKeys(arg string) ([]ed25519.PublicKey, error) {
	if st, err := os.Stat(arg); err == nil && st.Mode().IsRegular() {
		return readKeysFile(arg)
	}
	pub, err := decodeKey(arg)
	if err != nil {
		return nil, fmt.Errorf("--key %.64q is neither a file nor a base64 Ed25519 public key (%w)", arg, err)
	}
	return []ed25519.PublicKey{pub}, nil
}

func readKeysFile(name string) ([]ed25519.PublicKey, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("--key %s: %w", name, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxKeysFile+1))
	if err != nil {
		return nil, fmt.Errorf("--key %s: %w", name, err)
	}
	if len(b) > maxKeysFile {
		return nil, fmt.Errorf("--key %s is larger than %s: not a file of keys", name, formatBytes(maxKeysFile))
	}
	var out []ed25519.PublicKey
	if t := bytes.TrimSpace(b); len(t) > 0 && (t[0] == '[' || t[0] == '{') {
		// The JSON of `semaq provenance keys --json`, or the API's reply.
		var list []semaq.ProvenanceKey
		if t[0] == '{' {
			var keys semaq.ProvenanceKeys
			if err := json.Unmarshal(t, &keys); err != nil {
				return nil, fmt.Errorf("--key %s: %w", name, err)
			}
			list = keys.Keys
		} else if err := json.Unmarshal(t, &list); err != nil {
			return nil, fmt.Errorf("--key %s: %w", name, err)
		}
		for i, k := range list {
			if len(k.PublicKey) != ed25519.PublicKeySize {
				return nil, fmt.Errorf("--key %s: key %d: public_key is %d bytes, not %d", name, i+1, len(k.PublicKey), ed25519.PublicKeySize)
			}
			out = append(out, k.PublicKey)
		}
	} else {
		for i, line := range strings.Split(string(b), "\n") {
			if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			pub, err := decodeKey(line)
			if err != nil {
				return nil, fmt.Errorf("--key %s line %d: not a base64 Ed25519 public key (%w)", name, i+1, err)
			}
			out = append(out, pub)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--key %s holds no key", name)
	}
	return out, nil
}

// decodeKey reads an Ed25519 public key in base64 (padded or not).
func decodeKey(s string) (ed25519.PublicKey, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		if b, err = base64.RawStdEncoding.DecodeString(s); err != nil {
			return nil, errors.New("not base64")
		}
	}
	if len(b) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%d bytes, not %d", len(b), ed25519.PublicKeySize)
	}
	return b, nil
}

func newProvenanceKeysCmd(e *env) *cobra.Command {
	cmd := listing[semaq.ProvenanceKey]{
		short:    "List the nodes' signing keys: what 'verify --key' pins",
		noun:     "signing keys",
		jsonHelp: "print the keys as JSON, which 'semaq provenance verify --key FILE' reads",
		header:   []string{"ID", "NODE", "PUBLIC KEY", "CREATED"},
		fetch:    (*client.Client).ProvenanceKeys,
		row: func(k semaq.ProvenanceKey) []string {
			return []string{k.ID, k.Node, base64.StdEncoding.EncodeToString(k.PublicKey), formatTime(k.Created)}
		},
	}.command(e)
	cmd.Use, cmd.Aliases = "keys", nil
	cmd.Example = `  semaq provenance keys
  semaq provenance keys --json > keys.json`
	return cmd
}
