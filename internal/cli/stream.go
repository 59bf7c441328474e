package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

func newStreamCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "stream",
		Short: "Manage streams: add, ls, info, rm",
		// Runnable, so that an unknown subcommand is an error rather than help.
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(
		newStreamAddCmd(e),
		newStreamLsCmd(e),
		newStreamInfoCmd(e),
		newStreamRmCmd(e),
	)
	return cmd
}

var (
	retentions   = []string{"limits", "workqueue", "interest"}
	storages     = []string{"file", "memory"}
	durabilities = []string{"fsync", "interval"}
	provenances  = []string{semaq.ProvenanceSession, semaq.ProvenanceSigned}
	orders       = []string{semaq.SessionOrderStrict, semaq.SessionOrderStrictSeq}
)

func newStreamAddCmd(e *env) *cobra.Command {
	var (
		cfg    semaq.StreamConfig
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "add NAME --subjects PATTERN[,PATTERN]",
		Short: "Create a stream that stores the messages published on its subjects",
		Example: `  semaq stream add AI --subjects 'ai.>'
  semaq stream add JOBS --subjects 'jobs.*' --retention workqueue --max-age 24h
  semaq stream add AGENT --subjects 'agent.>' --provenance signed --session-order strict`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg.Name = args[0]
			if len(cfg.Subjects) == 0 {
				return fmt.Errorf("--subjects is required: the subject patterns the stream captures, e.g. --subjects 'ai.>'")
			}
			for _, s := range cfg.Subjects {
				if strings.TrimSpace(s) == "" {
					return fmt.Errorf("--subjects %q: empty pattern", strings.Join(cfg.Subjects, ","))
				}
			}
			var err error
			if cfg.Retention, err = oneOf("retention", cfg.Retention, retentions); err != nil {
				return err
			}
			if cfg.Storage, err = oneOf("storage", cfg.Storage, storages); err != nil {
				return err
			}
			if cfg.Durability, err = oneOf("durability", cfg.Durability, durabilities); err != nil {
				return err
			}
			if cfg.Provenance, err = oneOf("provenance", cfg.Provenance, provenances); err != nil {
				return err
			}
			if cfg.SessionOrder, err = oneOf("session-order", cfg.SessionOrder, orders); err != nil {
				return err
			}
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				info, err := c.AddStream(ctx, cfg)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(e.stdout, info)
				}
				extra := ""
				if info.Config.Schema != "" {
					extra = ", schema " + info.Config.Schema + " (messages validated on the way in)"
				}
				if p := info.Config.Provenance; p != "" {
					extra += ", provenance " + p
				}
				if o := info.Config.SessionOrder; o != "" {
					extra += ", session order " + o
				}
				_, err = fmt.Fprintf(e.stdout, "Stream %s created: subjects %s, retention %s, storage %s, durability %s%s\n",
					info.Config.Name, strings.Join(info.Config.Subjects, ","),
					orDefault(info.Config.Retention, "limits"), orDefault(info.Config.Storage, "file"), durabilityName(info), extra)
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&cfg.Subjects, "subjects", nil, "subject `PATTERN`s the stream captures, comma separated or repeated (required)")
	f.StringVar(&cfg.Retention, "retention", "", "limits (default), workqueue or interest")
	f.StringVar(&cfg.Storage, "storage", "", "file (default) or memory")
	f.StringVar(&cfg.Durability, "durability", "", "fsync (an ack means on disk; group-committed) or interval (periodic fsync); default: the server's --sync")
	f.DurationVar(&cfg.MaxAge, "max-age", 0, "drop messages older than this (0: no limit)")
	f.Int64Var(&cfg.MaxBytes, "max-bytes", 0, "drop the oldest messages beyond this many bytes (0: the broker's stream_max_bytes, 1 GiB on file and 256 MiB in memory by default)")
	f.IntVar(&cfg.Replicas, "replicas", 0, "number of replicas (0: the broker's default)")
	f.StringVar(&cfg.Description, "description", "", "what the stream is for")
	f.StringVar(&cfg.Schema, "schema", "", "schema registry `SUBJECT` every message must match (schema-on-write)")
	f.StringVar(&cfg.Provenance, "provenance", "", "chain each session's messages by hash: session, or signed (each link also signed by the node that stored it); docs/provenance.md")
	f.StringVar(&cfg.SessionOrder, "session-order", "", "refuse a session's message not after its last: strict (by AI-Timestamp) or strict-seq (by AI-Seq)")
	f.BoolVar(&asJSON, "json", false, "print the created stream as JSON")
	e.addServerFlag(cmd)
	return cmd
}

func newStreamLsCmd(e *env) *cobra.Command {
	return listing[semaq.StreamInfo]{
		short:    "List streams",
		noun:     "streams",
		jsonHelp: "print the streams as a JSON array",
		header:   []string{"NAME", "SUBJECTS", "MESSAGES", "BYTES", "STORAGE", "RETENTION"},
		fetch:    (*client.Client).Streams,
		row: func(s semaq.StreamInfo) []string {
			return []string{s.Config.Name, strings.Join(s.Config.Subjects, ","), fmt.Sprint(s.State.Messages),
				formatBytes(s.State.Bytes), orDefault(s.Config.Storage, "file"), orDefault(s.Config.Retention, "limits")}
		},
	}.command(e)
}

func newStreamInfoCmd(e *env) *cobra.Command {
	return showing[*semaq.StreamInfo]{
		use:      "info NAME",
		example:  `  semaq stream info AI --json`,
		short:    "Describe a stream: configuration, durability and state",
		jsonHelp: "print the stream info as JSON",
		fetch:    (*client.Client).StreamInfo,
		write:    func(e *env, info *semaq.StreamInfo) error { return writeStreamInfo(e.stdout, info) },
	}.command(e)
}

func newStreamRmCmd(e *env) *cobra.Command {
	return removal{
		use:     "rm NAME",
		example: `  semaq stream rm AI`,
		aliases: []string{"delete"},
		short:   "Delete a stream and every message in it",
		done:    "Stream %s deleted",
		remove:  (*client.Client).DeleteStream,
	}.command(e)
}

// oneOf checks the value of --flag against its choices (any case) and
// returns it in lower case; empty stays empty, for the broker's default.
func oneOf(flag, v string, choices []string) (string, error) {
	if v == "" {
		return "", nil
	}
	lv := strings.ToLower(v)
	for _, c := range choices {
		if lv == c {
			return lv, nil
		}
	}
	return "", fmt.Errorf("--%s %q: use %s", flag, v, strings.Join(choices, ", "))
}

func writeStreamInfo(w io.Writer, info *semaq.StreamInfo) error {
	cfg, st := info.Config, info.State
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "Stream %s\n", cfg.Name)
	if cfg.Description != "" {
		fmt.Fprintf(tw, "  Description:\t%s\n", cfg.Description)
	}
	fmt.Fprintf(tw, "  Subjects:\t%s\n", strings.Join(cfg.Subjects, ", "))
	fmt.Fprintf(tw, "  Retention:\t%s\n", orDefault(cfg.Retention, "limits"))
	fmt.Fprintf(tw, "  Storage:\t%s\n", orDefault(cfg.Storage, "file"))
	if cfg.Replicas > 0 {
		fmt.Fprintf(tw, "  Replicas:\t%d\n", cfg.Replicas)
	}
	if c := info.Cluster; c != nil {
		fmt.Fprintf(tw, "  Leader:\t%s\n", orDefault(c.Leader, "none (electing)"))
		if len(c.Followers) > 0 {
			fmt.Fprintf(tw, "  Followers:\t%s\n", followers(c.Followers))
		}
	}
	fmt.Fprintf(tw, "  Durability:\t%s\n", describeSync(info.Sync))
	if cfg.Schema != "" {
		fmt.Fprintf(tw, "  Schema:\t%s (every message is validated on the way in)\n", cfg.Schema)
	}
	switch cfg.Provenance {
	case semaq.ProvenanceNone:
	case semaq.ProvenanceSession:
		fmt.Fprintf(tw, "  Provenance:\t%s (each session's messages hash-chained)\n", cfg.Provenance)
	case semaq.ProvenanceSigned:
		fmt.Fprintf(tw, "  Provenance:\t%s (each session's messages hash-chained, each signed by its node)\n", cfg.Provenance)
	default:
		fmt.Fprintf(tw, "  Provenance:\t%s\n", cfg.Provenance)
	}
	if o := cfg.SessionOrder; o != "" {
		fmt.Fprintf(tw, "  Session order:\t%s (a session's message not after its last, by %s, is refused)\n", o, semaq.OrderHeader(o))
	}
	if c := info.Commit; c != nil && c.Batches > 0 {
		fmt.Fprintf(tw, "  Group commits:\t%d batches, %d acks, %d failed; acks per fsync p50 %d p99 %d; fsync p50 %dµs p99 %dµs\n",
			c.Batches, c.Acks, c.Failures, c.BatchSize.P50, c.BatchSize.P99, c.CommitLatency.P50, c.CommitLatency.P99)
	}
	fmt.Fprintf(tw, "  Max age:\t%s\n", limit(cfg.MaxAge > 0, cfg.MaxAge.String()))
	fmt.Fprintf(tw, "  Max bytes:\t%s\n", limit(cfg.MaxBytes > 0, formatBytes(uint64(cfg.MaxBytes))))
	fmt.Fprintf(tw, "  Max messages:\t%s\n", limit(cfg.MaxMsgs > 0, fmt.Sprint(cfg.MaxMsgs)))
	dup := cfg.Duplicates
	if dup == 0 {
		dup = 2 * time.Minute
	}
	fmt.Fprintf(tw, "  Dedup window:\t%s\n", dup)
	fmt.Fprintf(tw, "  Created:\t%s\n", formatTime(info.Created))
	fmt.Fprintf(tw, "  Messages:\t%d\n", st.Messages)
	fmt.Fprintf(tw, "  Bytes:\t%s\n", formatBytes(st.Bytes))
	if st.Messages > 0 {
		fmt.Fprintf(tw, "  First seq:\t%d (%s)\n", st.FirstSeq, formatTime(st.FirstTime))
		fmt.Fprintf(tw, "  Last seq:\t%d (%s)\n", st.LastSeq, formatTime(st.LastTime))
	} else {
		fmt.Fprintf(tw, "  First seq:\t%d\n", st.FirstSeq)
		fmt.Fprintf(tw, "  Last seq:\t%d\n", st.LastSeq)
	}
	fmt.Fprintf(tw, "  Consumers:\t%d\n", st.ConsumerCount)
	return tw.Flush()
}

// durabilityName is a stream's durability as --durability spells it.
func durabilityName(info *semaq.StreamInfo) string {
	switch {
	case info.Config.Storage == "memory":
		return "memory"
	case info.Sync == "always":
		return "fsync"
	}
	return orDefault(info.Sync, "unknown")
}

func describeSync(mode string) string {
	switch mode {
	case "always":
		return "fsync (an ack means on disk; acks are group-committed)"
	case "interval":
		return "interval (periodic fsync; a machine crash can lose the latest writes)"
	case "":
		return "unknown"
	default:
		return mode
	}
}

func limit(set bool, v string) string {
	if !set {
		return "unlimited"
	}
	return v
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// formatBytes renders n in binary units: 512 B, 1.5 KiB, 3.0 MiB.
func formatBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// writeJSON prints v as indented JSON, leaving subject wildcards such as >
// unescaped.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
