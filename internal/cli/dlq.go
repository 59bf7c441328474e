package cli

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// newDLQCmd is `semaq dlq`: the dead-letter queue.
func newDLQCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "Inspect and replay dead letters: ls, show, replay, rm, purge",
		Long: `Messages a consumer gave up on land in the dead-letter queue with their payload,
headers and the reason: they exceeded the consumer's max deliveries, or the consumer
terminated them. Replay sends one back to its original subject through the broker.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(
		newDLQLsCmd(e),
		newDLQShowCmd(e),
		newDLQReplayCmd(e),
		newDLQRmCmd(e),
		newDLQPurgeCmd(e),
	)
	return cmd
}

func newDLQLsCmd(e *env) *cobra.Command {
	var (
		f      client.DeadLetterFilter
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List dead letters, oldest first",
		Example: `  semaq dlq ls
  semaq dlq ls --stream AI --consumer worker --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if f.Limit < 1 {
				return fmt.Errorf("--limit %d: want at least 1", f.Limit)
			}
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				limit := f.Limit
				f.Limit++ // one more, to tell whether there are more
				dls, err := c.DeadLetters(ctx, f)
				if err != nil {
					return err
				}
				more := len(dls) > limit
				if more {
					dls = dls[:limit]
				}
				if asJSON {
					return writeJSON(e.stdout, dls)
				}
				if len(dls) == 0 {
					_, err := fmt.Fprintln(e.stdout, "No dead letters.")
					return err
				}
				tw := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "SEQ\tSTREAM\tCONSUMER\tSUBJECT\tDELIVERIES\tSIZE\tDEAD-LETTERED\tREASON")
				for _, d := range dls {
					subject, size, reason := d.Subject, formatBytes(uint64(d.Size)), d.Reason
					if d.PayloadLost != "" {
						size, reason = "-", reason+" (payload lost)"
					}
					fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", d.Seq, d.Stream, d.Consumer, orDefault(subject, "-"),
						d.Deliveries, size, formatTime(d.Time), reason)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				if more {
					_, err = fmt.Fprintf(e.stdout, "More dead letters follow: semaq dlq ls --after %d\n", dls[len(dls)-1].Seq)
				}
				return err
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Stream, "stream", "", "only the dead letters of stream `NAME`")
	fl.StringVar(&f.Consumer, "consumer", "", "only the dead letters of consumer `NAME`")
	fl.Uint64Var(&f.After, "after", 0, "start after dead letter `SEQ`")
	fl.IntVar(&f.Limit, "limit", 100, "list at most `N`")
	fl.BoolVar(&asJSON, "json", false, "print the dead letters as a JSON array (without payloads)")
	e.addServerFlag(cmd)
	return cmd
}

func newDLQShowCmd(e *env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "show SEQ",
		Example: `  semaq dlq show 3`,
		Short:   "Show one dead letter: why, where from, headers and payload",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			seq, err := parseSeq(args[0])
			if err != nil {
				return err
			}
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				d, err := c.DeadLetter(ctx, seq)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(e.stdout, d)
				}
				return writeDeadLetter(e.stdout, d)
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the dead letter as JSON (payload in base64)")
	e.addServerFlag(cmd)
	return cmd
}

func newDLQReplayCmd(e *env) *cobra.Command {
	var (
		stream string
		all    bool
		asJSON bool
		extend time.Duration
	)
	cmd := &cobra.Command{
		Use:   "replay SEQ | --stream NAME --all",
		Short: "Send dead letters back to their original subjects",
		Long: `Replay publishes a dead letter's payload, with its original headers, to its
original subject through the broker, and removes it from the queue once the
stream has stored it. Every consumer of that stream gets it again. With
--stream NAME --all it replays every dead letter of the stream, oldest first;
those that cannot be replayed (payload lost, no stream captures the subject)
stay in the queue, are listed, and make the command exit 1.

A replayed message keeps its AI-Deadline: one whose deadline has passed is
reported so, as a work queue expires it straight back into the dead-letter
queue. --extend-deadline D replays with the deadline moved to now+D (and
AI-Timeout, already spent, dropped).`,
		Example: `  semaq dlq replay 3
  semaq dlq replay 3 --extend-deadline 5m
  semaq dlq replay --stream AI --all`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 1 && (all || stream != ""):
				return fmt.Errorf("give a dead letter SEQ or --stream NAME --all, not both")
			case len(args) == 0 && !all:
				return fmt.Errorf("name a dead letter SEQ, or replay a stream's with --stream NAME --all")
			case all && stream == "":
				return fmt.Errorf("--all needs --stream NAME")
			}
			var opts []client.ReplayOption
			if cmd.Flags().Changed("extend-deadline") {
				if extend <= 0 || extend > semaq.DLQMaxExtendDeadline {
					return fmt.Errorf("--extend-deadline %s: want more than 0, at most %s", extend, semaq.DLQMaxExtendDeadline)
				}
				opts = append(opts, client.ReplayExtendDeadline(extend))
			}
			var seq uint64
			if len(args) == 1 {
				var err error
				if seq, err = parseSeq(args[0]); err != nil {
					return err
				}
			}
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				var err error
				var res *semaq.DLQReplayResponse
				if all {
					res, err = c.ReplayAll(ctx, stream, opts...)
				} else {
					var r *semaq.DLQReplayed
					if r, err = c.Replay(ctx, seq, opts...); err == nil {
						res = &semaq.DLQReplayResponse{Replayed: []semaq.DLQReplayed{*r}}
					}
				}
				if err != nil && res == nil {
					return err
				}
				if asJSON {
					if jerr := writeJSON(e.stdout, res); jerr != nil {
						return jerr
					}
				} else {
					passed := 0
					for _, r := range res.Replayed {
						note := ""
						if r.Duplicate {
							note = " (duplicate: an earlier replay stored it)"
						}
						switch {
						case r.DeadlinePassed:
							passed++
							note += fmt.Sprintf("; its deadline %s passed %s ago, so a work queue expires it straight back into the dead-letter queue: replay that with --extend-deadline D",
								formatTime(r.Deadline), time.Since(r.Deadline).Round(time.Second))
						case extend > 0 && !r.Deadline.IsZero():
							note += "; deadline " + formatTime(r.Deadline)
						}
						fmt.Fprintf(e.stdout, "Replayed dead letter %d to %s: stream %s seq %d%s\n", r.Seq, r.Subject, r.Stream, r.StreamSeq, note)
					}
					if all && passed > 0 {
						fmt.Fprintf(e.stdout, "%d replayed with a deadline that had passed\n", passed)
					}
					for _, s := range res.Skipped {
						fmt.Fprintf(e.stdout, "Skipped dead letter %d: %s\n", s.Seq, oneLine(s.Reason))
					}
					if all {
						fmt.Fprintf(e.stdout, "%d replayed, %d skipped\n", len(res.Replayed), len(res.Skipped))
					}
				}
				if err != nil {
					return err
				}
				if len(res.Skipped) > 0 {
					return &exitError{code: 1, msg: fmt.Sprintf("%d dead letters of stream %s could not be replayed", len(res.Skipped), stream)}
				}
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&stream, "stream", "", "with --all: the stream whose dead letters to replay")
	f.BoolVar(&all, "all", false, "replay every dead letter of --stream")
	f.BoolVar(&asJSON, "json", false, "print the outcome as JSON")
	f.DurationVar(&extend, "extend-deadline", 0, "replay with AI-Deadline moved to now+`D` (AI-Timeout dropped), for messages whose deadline passed")
	e.addServerFlag(cmd)
	return cmd
}

func newDLQRmCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "rm SEQ",
		Example: `  semaq dlq rm 3`,
		Aliases: []string{"delete"},
		Short:   "Remove one dead letter without replaying it",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			seq, err := parseSeq(args[0])
			if err != nil {
				return err
			}
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				if err := c.DeleteDeadLetter(ctx, seq); err != nil {
					return err
				}
				_, err = fmt.Fprintf(e.stdout, "Dead letter %d removed\n", seq)
				return err
			})
		},
	}
	e.addServerFlag(cmd)
	return cmd
}

func newDLQPurgeCmd(e *env) *cobra.Command {
	var (
		stream, consumer string
		all              bool
	)
	cmd := &cobra.Command{
		Use:   "purge --stream NAME [--consumer NAME] | --consumer NAME | --all",
		Short: "Remove dead letters without replaying them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch {
			case all && (stream != "" || consumer != ""):
				return fmt.Errorf("--all removes every dead letter; drop --stream and --consumer, or --all")
			case !all && stream == "" && consumer == "":
				return fmt.Errorf("name what to purge: --stream NAME, --consumer NAME, or --all")
			}
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				n, err := c.PurgeDeadLetters(ctx, stream, consumer)
				if err != nil {
					return err
				}
				_, err = fmt.Fprintf(e.stdout, "Purged %d dead letters\n", n)
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&stream, "stream", "", "remove the dead letters of stream `NAME`")
	f.StringVar(&consumer, "consumer", "", "remove the dead letters of consumer `NAME`")
	f.BoolVar(&all, "all", false, "remove every dead letter")
	e.addServerFlag(cmd)
	return cmd
}

func parseSeq(s string) (uint64, error) {
	seq, err := strconv.ParseUint(s, 10, 64)
	if err != nil || seq == 0 {
		return 0, fmt.Errorf("dead letter %q: want a sequence number (1 or more), as dlq ls shows", s)
	}
	return seq, nil
}

// writeDeadLetter prints a dead letter for people: what happened, the
// original headers sorted by name, and the payload (base64 when not UTF-8).
func writeDeadLetter(w io.Writer, d *semaq.DeadLetter) error {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "Dead letter %d\n", d.Seq)
	fmt.Fprintf(tw, "  Reason:\t%s\n", d.Reason)
	fmt.Fprintf(tw, "  Stream:\t%s seq %d\n", d.Stream, d.StreamSeq)
	fmt.Fprintf(tw, "  Subject:\t%s\n", orDefault(d.Subject, "- (unknown)"))
	fmt.Fprintf(tw, "  Consumer:\t%s\n", d.Consumer)
	fmt.Fprintf(tw, "  Deliveries:\t%d\n", d.Deliveries)
	fmt.Fprintf(tw, "  Stored:\t%s\n", formatTime(d.Stored))
	fmt.Fprintf(tw, "  Dead-lettered:\t%s\n", formatTime(d.Time))
	if d.PayloadLost != "" {
		fmt.Fprintf(tw, "  Payload lost:\t%s\n", d.PayloadLost)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(d.Headers) > 0 {
		b.WriteString("Headers:\n")
		names := make([]string, 0, len(d.Headers))
		for k := range d.Headers {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			for _, v := range d.Headers[k] {
				fmt.Fprintf(&b, "  %s: %s\n", k, v)
			}
		}
	}
	switch {
	case d.PayloadLost != "":
	case len(d.Data) == 0:
		b.WriteString("(empty payload)\n")
	case utf8.Valid(d.Data):
		fmt.Fprintf(&b, "Payload (%s):\n", formatBytes(uint64(len(d.Data))))
		b.Write(d.Data)
		if d.Data[len(d.Data)-1] != '\n' {
			b.WriteByte('\n')
		}
	default:
		fmt.Fprintf(&b, "Payload (%d bytes, not UTF-8; base64):\n%s\n", len(d.Data), base64.StdEncoding.EncodeToString(d.Data))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
