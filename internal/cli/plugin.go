package cli

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// newPluginCmd is `semaq plugin`: WASM modules the broker runs on messages.
func newPluginCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plugin",
		Short: "Run WASM plugins on messages: add, ls, rm",
		Long: `A plugin is a WASM module the broker runs at a stage: at the ingress (ingress),
as a subscription filter (filter) or on token streams (tokens), on the subjects
it names. Each call is bounded in time and memory; a plugin that fails too often
in a row is disabled. See docs/plugins.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(
		newPluginAddCmd(e),
		newPluginLsCmd(e),
		removal{
			use:     "rm NAME",
			example: "  semaq plugin rm enrich",
			aliases: []string{"remove", "delete"},
			short:   "Remove a plugin from every node",
			done:    "Plugin %s removed.",
			remove:  (*client.Client).DeletePlugin,
		}.command(e),
	)
	return cmd
}

// maxPluginMemoryMiB is the broker's bound on a plugin instance's memory.
const maxPluginMemoryMiB = 1024

var (
	pluginStages   = []string{semaq.PluginStageIngress, semaq.PluginStageFilter, semaq.PluginStageTokens}
	pluginFailures = []string{semaq.PluginFailReject, semaq.PluginFailPass}
)

func newPluginAddCmd(e *env) *cobra.Command {
	var (
		p         semaq.Plugin
		signature string
		replace   bool
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "add NAME FILE.wasm --stage ingress|filter|tokens [--subjects P,...] [--tenant T] [--timeout D] [--memory MIB] [--on-failure reject|pass] [--fail-after N] [--signature FILE] [--replace]",
		Short: "Upload a WASM module and run it as a plugin",
		Long: `Add uploads FILE.wasm and runs it at --stage: an ingress plugin on the
messages of --subjects, a tokens plugin on every token stream, both of one
--tenant's when given; a filter plugin on the subscriptions that name it
(semaq sub --filter-plugin, client.WithFilterPlugin). A call that takes
longer than --timeout or more than --memory MiB fails; --on-failure says
whether a failed call rejects the message (the default) or lets it pass as it
was, and --fail-after failures in a row disable the plugin. A broker that
checks plugin keys wants --signature: a file holding the ed25519 signature of
the module's SHA-256, base64 or 64 raw bytes. The command returns when every
node has loaded the module.`,
		Example: `  semaq plugin add enrich enrich.wasm --stage ingress --subjects 'demo.>'
  semaq plugin add redact redact.wasm --stage tokens --timeout 5ms --on-failure pass --replace`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			p.Name = args[0]
			f := cmd.Flags()
			switch {
			case p.Stage == "":
				return fmt.Errorf("--stage: say where the plugin runs: %s", strings.Join(pluginStages, ", "))
			case !slices.Contains(pluginStages, p.Stage):
				return fmt.Errorf("--stage %q: use %s", p.Stage, strings.Join(pluginStages, ", "))
			case f.Changed("tenant") && p.Tenant == "":
				return errors.New("--tenant: empty value")
			case f.Changed("timeout") && (p.Timeout <= 0 || p.Timeout > semaq.MaxPluginTime):
				return fmt.Errorf("--timeout %s: want more than 0 and at most %s", p.Timeout, semaq.MaxPluginTime)
			case p.Stage == semaq.PluginStageIngress && len(p.Subjects) == 0:
				return errors.New("--subjects: name the subjects the ingress plugin runs on")
			case p.Stage == semaq.PluginStageFilter && len(p.Subjects) > 0:
				return errors.New("--subjects: a filter plugin runs on the subscriptions that name it, not on subjects")
			case p.Stage == semaq.PluginStageTokens && len(p.Subjects) > 0:
				return errors.New("--subjects: a tokens plugin runs on every token stream (of --tenant), not on subjects")
			case f.Changed("memory") && (p.MemoryMiB < 1 || p.MemoryMiB > maxPluginMemoryMiB):
				return fmt.Errorf("--memory %d: want 1 to %d (MiB)", p.MemoryMiB, maxPluginMemoryMiB)
			case p.OnFailure != "" && !slices.Contains(pluginFailures, p.OnFailure):
				return fmt.Errorf("--on-failure %q: use %s", p.OnFailure, strings.Join(pluginFailures, ", "))
			case f.Changed("fail-after") && p.FailAfter < 1:
				return fmt.Errorf("--fail-after %d: want at least 1", p.FailAfter)
			}
			for _, s := range p.Subjects {
				if err := semaq.CheckSubject(s, true); err != nil {
					return fmt.Errorf("--subjects %q: %w", s, err)
				}
			}
			if signature != "" {
				var err error
				if p.Signature, err = readSignature(signature); err != nil {
					return fmt.Errorf("--signature: %w", err)
				}
			}
			wasm, err := readModule(args[1])
			if err != nil {
				return err
			}
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				info, err := c.AddPlugin(ctx, p, wasm, replace)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(e.stdout, info)
				}
				_, err = fmt.Fprintf(e.stdout, "Plugin %s added: %s on %s (sha256 %s, %s)\n", info.Name, info.Stage,
					orDefault(strings.Join(info.Subjects, ","), "the subscriptions that name it"), shortSum(info.SHA256), formatBytes(uint64(info.Size)))
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&p.Stage, "stage", "", "where the plugin runs: ingress, filter or tokens")
	f.StringSliceVar(&p.Subjects, "subjects", nil, "subject `PATTERNS` an ingress plugin runs on")
	f.StringVar(&p.Tenant, "tenant", "", "run the plugin on one tenant's messages only")
	f.DurationVar(&p.Timeout, "timeout", 0, "bound on one call (default 2ms, at most 5s)")
	f.IntVar(&p.MemoryMiB, "memory", 0, "bound on an instance's memory, in `MiB`, at most 1024 (default the node's)")
	f.StringVar(&p.OnFailure, "on-failure", "", "what a failed call does to its message: reject (default) or pass")
	f.IntVar(&p.FailAfter, "fail-after", 0, "disable the plugin after `N` failures in a row (default 10)")
	f.StringVar(&signature, "signature", "", "`FILE` with the ed25519 signature of the module's SHA-256 (base64 or 64 raw bytes)")
	f.BoolVar(&replace, "replace", false, "replace a plugin of the same name")
	f.BoolVar(&asJSON, "json", false, "print the stored plugin as JSON")
	e.addServerFlag(cmd)
	return cmd
}

// readModule reads a WASM module, refusing one past the bound on plugins
// before it is read whole.
func readModule(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, semaq.MaxPluginBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	switch {
	case len(b) > semaq.MaxPluginBytes:
		return nil, fmt.Errorf("%s is larger than a plugin may be (%s)", name, formatBytes(semaq.MaxPluginBytes))
	case !bytes.HasPrefix(b, []byte("\x00asm")):
		return nil, fmt.Errorf("%s is not a WASM module (it does not start with \\0asm)", name)
	}
	return b, nil
}

// readSignature reads a signature file, base64 or raw, as the API's base64.
func readSignature(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	// Base64 of 64 bytes is 88 characters; a few more for line ends.
	b, err := io.ReadAll(io.LimitReader(f, 1024))
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", name, err)
	}
	if len(b) == ed25519.SignatureSize {
		return base64.StdEncoding.EncodeToString(b), nil
	}
	s := strings.TrimSpace(string(b))
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return "", fmt.Errorf("%s is neither %d raw bytes nor base64: %v", name, ed25519.SignatureSize, err)
	}
	if len(raw) != ed25519.SignatureSize {
		return "", fmt.Errorf("%s holds %d bytes in base64; an ed25519 signature has %d", name, len(raw), ed25519.SignatureSize)
	}
	return s, nil
}

// shortSum is the first 12 hex digits of a digest.
func shortSum(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

func newPluginLsCmd(e *env) *cobra.Command {
	return listing[semaq.PluginInfo]{
		short:    "List plugins by name, with this node's counters",
		noun:     "plugins",
		jsonHelp: "print the plugins with their counters as a JSON array",
		header:   []string{"NAME", "STAGE", "SUBJECTS", "SHA256", "CALLS", "FAILURES", "STATUS"},
		fetch:    (*client.Client).Plugins,
		row: func(p semaq.PluginInfo) []string {
			subjects := orDefault(strings.Join(p.Subjects, ","), "-")
			if p.Tenant != "" {
				subjects += " tenant " + p.Tenant
			}
			return []string{p.Name, p.Stage, subjects, shortSum(p.SHA256), fmt.Sprint(p.Stats.Calls),
				fmt.Sprint(p.Stats.Failures), pluginStatus(&p)}
		},
	}.command(e)
}

// pluginStatus is whether a plugin runs on this node, and else why not.
func pluginStatus(p *semaq.PluginInfo) string {
	switch {
	case p.Error != "":
		return "not loaded: " + oneLine(p.Error)
	case p.Stats.Disabled:
		return "disabled: " + oneLine(orDefault(p.Stats.DisabledReason, p.Stats.LastError))
	case p.Stats.LastError != "":
		return "running; last error: " + oneLine(p.Stats.LastError)
	}
	return "running"
}
