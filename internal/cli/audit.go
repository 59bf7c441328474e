package cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// newAuditCmd is `semaq audit`: the record of admin changes.
func newAuditCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Show the record of admin changes: ls",
		Long: `Every change to streams, queues, schemas, routes, users, keys and dead letters
is recorded by the broker with who asked, when, what it was before and after,
and whether it was made or refused. Records never hold a key. With --auth only
an admin may read them (--key or $SEMAQ_KEY); see docs/security.md, Audit.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newAuditLsCmd(e))
	return cmd
}

func newAuditLsCmd(e *env) *cobra.Command {
	var (
		since string
		r     semaq.AuditListRequest
	)
	cmd := listing[semaq.AuditRecord]{
		short:    "List audit records, oldest first",
		noun:     "audit records",
		jsonHelp: "print the records as JSON, with their before and after",
		header:   []string{"TIME", "PRINCIPAL", "TENANT", "OP", "TARGET", "OUTCOME"},
		fetch: func(c *client.Client, ctx context.Context) ([]semaq.AuditRecord, error) {
			req := r
			var err error
			if req.Since, err = parseSince(since, time.Now()); err != nil {
				return nil, err
			}
			resp, err := c.Audit(ctx, req)
			if err != nil {
				return nil, err
			}
			if resp.More {
				fmt.Fprintf(e.stderr, "Older records match too; narrow with --since, --user or --op, or raise --limit (at most %d).\n", semaq.AuditListMax)
			}
			return resp.Records, nil
		},
		row: func(a semaq.AuditRecord) []string {
			outcome := a.Outcome
			if a.Error != "" {
				outcome += ": " + clip(a.Error, 60)
			}
			return []string{a.Time.Local().Format("2006-01-02 15:04:05"), a.Principal.Name(), dash(a.Principal.Tenant),
				a.Op, dash(clip(a.Target, 40)), outcome}
		},
	}.command(e)
	cmd.Example = `  semaq audit ls
  semaq audit ls --since 1h --op stream.create
  semaq audit ls --user alice --op user --json`
	f := cmd.Flags()
	f.StringVar(&since, "since", "", "only records from this long ago (1h, 30m) or this time (RFC 3339) on")
	f.StringVar(&r.User, "user", "", "only changes asked by this user (or node, anonymous)")
	f.StringVar(&r.Op, "op", "", "only this operation ("+strings.Join(semaq.AuditOps, ", ")+") or family (stream, user, ...)")
	f.IntVar(&r.Limit, "limit", semaq.AuditListDefault, fmt.Sprintf("show the newest N records that match (1..%d)", semaq.AuditListMax))
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if r.Limit < 1 || r.Limit > semaq.AuditListMax {
			return fmt.Errorf("--limit %d: want 1..%d", r.Limit, semaq.AuditListMax)
		}
		_, err := parseSince(since, time.Now())
		return err
	}
	return cmd
}

// parseSince reads --since: a duration back from now, or an RFC 3339
// time; "" is the zero time (from the first record).
func parseSince(v string, now time.Time) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("--since %s: want a positive duration", v)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since %q: want a duration (1h, 30m) or an RFC 3339 time (2026-01-02T15:04:05Z)", v)
	}
	return t, nil
}

// clip is s on one line, cut at n runes.
func clip(s string, n int) string {
	s = oneLine(s)
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
