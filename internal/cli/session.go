package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// newSessionCmd is `semaq session`: conversation state kept by the broker.
func newSessionCmd(e *env) *cobra.Command {
	s := &sessionCmds{e: e}
	cmd := &cobra.Command{
		Use:   "session",
		Short: "Conversation state in the broker: put, get, patch, watch, history, round, trim, report, ls, rm, depend",
		Long: `A session is a JSON document and the rounds of a conversation, kept by the
broker under an ID and versioned by a revision that every content change raises
by one. Writers may compare-and-set on it (--revision N). Each change is kept
as a delta, so 'watch' replays them from any kept revision and then follows the
live ones. A session is active, stale (idle), or degraded (low confidence
reported, or a dependency moved); idle past its TTL it expires. See
docs/sessions.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.PersistentFlags().StringVar(&s.tenant, "tenant", "",
		"the tenant whose sessions to act on (admins, services and workers; others act in their own)")
	cmd.AddCommand(
		s.put(), s.get(), s.patch(), s.watch(), s.history(), s.round(), s.trim(), s.report(), s.ls(), s.depend(),
		removal{
			use:     "rm ID",
			short:   "Delete a session with its rounds and deltas",
			example: "  semaq session rm chat-42",
			done:    "Session %s removed.",
			aliases: []string{"remove", "delete"},
			remove: func(c *client.Client, ctx context.Context, id string) error {
				ref, err := s.ref(id)
				if err != nil {
					return err
				}
				return c.DeleteSession(ctx, ref)
			},
		}.command(e),
	)
	return cmd
}

// sessionCmds holds what the session commands share: the --tenant flag.
type sessionCmds struct {
	e      *env
	tenant string
}

// ref names session id in --tenant, checking the ID before anything dials.
func (s *sessionCmds) ref(id string) (semaq.SessionRef, error) {
	if err := semaq.CheckSessionID(id); err != nil {
		return semaq.SessionRef{}, err
	}
	return semaq.SessionRef{ID: id, Tenant: s.tenant}, nil
}

// revisionFlag is --revision, compare-and-set on a write.
type revisionFlag struct{ n uint64 }

func (r *revisionFlag) add(cmd *cobra.Command) {
	cmd.Flags().Uint64Var(&r.n, "revision", 0,
		"write only if the session is at revision `N` (0: only if it does not exist yet)")
}

// get is the request's Revision: nil when --revision was not given.
func (r *revisionFlag) get(cmd *cobra.Command) *uint64 {
	if !cmd.Flags().Changed("revision") {
		return nil
	}
	return client.Rev(r.n)
}

// writeInfo prints the outcome of a write: SessionInfo as JSON, or one
// line saying what was done and the revision now.
func (s *sessionCmds) writeInfo(info *semaq.SessionInfo, asJSON bool, what string) error {
	if asJSON {
		return writeJSON(s.e.stdout, info)
	}
	_, err := fmt.Fprintf(s.e.stdout, "Session %s %s: revision %d, %s\n", info.ID, what, info.Revision, stateText(info))
	return err
}

// stateText is a session's state, with why it is degraded.
func stateText(info *semaq.SessionInfo) string {
	if info.Reason != "" {
		return string(info.State) + " (" + info.Reason + ")"
	}
	return string(info.State)
}

func (s *sessionCmds) put() *cobra.Command {
	var (
		set     semaq.SessionSettings
		depends []string
		rev     revisionFlag
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "put ID FILE|- [--ttl D] [--stale-after D] [--low-confidence F] [--low-streak N] [--depends NAME=VERSION]... [--revision N]",
		Short: "Create a session or replace its data with a JSON object",
		Long: `Put creates session ID, or replaces its data, with the JSON object in FILE (- reads
stdin). The settings flags replace every setting of the session (one left out
takes its default); without any of them an existing session keeps its own.
--depends declares what the session's context was made from, by name and
version: 'semaq session depend NAME VERSION' degrades the sessions that declared
another version. --revision N writes only if the session is at revision N
(--revision 0: only if it does not exist yet).`,
		Example: `  semaq session put chat-42 context.json --ttl 2h --depends rag-index=v7
  echo '{"user":"ada"}' | semaq session put chat-42 - --revision 0`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := s.ref(args[0])
			if err != nil {
				return err
			}
			req := semaq.SessionPutRequest{SessionRef: ref, Revision: rev.get(cmd)}
			for _, kv := range depends {
				name, version, ok := strings.Cut(kv, "=")
				if !ok || name == "" {
					return fmt.Errorf("--depends %q: want NAME=VERSION", kv)
				}
				if set.Depends == nil {
					set.Depends = make(map[string]string)
				}
				if _, dup := set.Depends[name]; dup {
					return fmt.Errorf("--depends names %s twice", name)
				}
				set.Depends[name] = version
			}
			f := cmd.Flags()
			if f.Changed("ttl") || f.Changed("stale-after") || f.Changed("low-confidence") || f.Changed("low-streak") || len(depends) > 0 {
				// Checked on a copy: the broker fills the defaults itself.
				check := set
				if err := semaq.CheckSessionSettings(&check); err != nil {
					return err
				}
				req.Settings = &set
			}
			if req.Data, err = s.readObject(args[1]); err != nil {
				return err
			}
			return s.e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				info, err := c.PutSession(ctx, req)
				if err != nil {
					return err
				}
				return s.writeInfo(info, asJSON, "stored")
			})
		},
	}
	f := cmd.Flags()
	f.DurationVar(&set.TTL, "ttl", 0, "idle time after which the session expires and is deleted (default 24h)")
	f.DurationVar(&set.StaleAfter, "stale-after", 0, "idle time after which the session is stale (default 5m, at most the ttl)")
	f.Float64Var(&set.LowConfidence, "low-confidence", 0, "a reported confidence below `F` is low (default 0.65)")
	f.IntVar(&set.LowStreak, "low-streak", 0, "this many low reports in a row degrade the session (default 3)")
	f.StringArrayVar(&depends, "depends", nil, "a dependency `NAME=VERSION` of the session's context; repeat for more")
	rev.add(cmd)
	f.BoolVar(&asJSON, "json", false, "print the session's metadata as JSON")
	s.e.addServerFlag(cmd)
	return cmd
}

// readObject reads the JSON object of FILE (stdin for -), bounded by the
// broker's size limit so a wrong file is refused before it is sent.
func (s *sessionCmds) readObject(file string) (json.RawMessage, error) {
	name, r := file, io.Reader(nil)
	if file == "-" {
		name, r = "stdin", s.e.stdin
	} else {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, semaq.MaxSessionBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(b) > semaq.MaxSessionBytes {
		return nil, fmt.Errorf("%s is larger than a session may be (%s)", name, formatBytes(semaq.MaxSessionBytes))
	}
	if err := checkObject(b); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return b, nil
}

// checkObject accepts one JSON object, saying where the JSON goes wrong.
func checkObject(b []byte) error {
	t := bytes.TrimSpace(b)
	if len(t) == 0 {
		return errors.New("empty; want a JSON object")
	}
	if !json.Valid(t) {
		var v any
		err := json.Unmarshal(t, &v)
		if se, ok := errors.AsType[*json.SyntaxError](err); ok {
			return fmt.Errorf("not valid JSON at byte %d: %s", se.Offset, se.Error())
		}
		return fmt.Errorf("not valid JSON: %v", err)
	}
	if t[0] != '{' {
		return fmt.Errorf("a JSON %s; want an object", jsonKind(t[0]))
	}
	return nil
}

func jsonKind(c byte) string {
	switch c {
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

func (s *sessionCmds) get() *cobra.Command {
	var (
		rounds int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "get ID [--rounds N] [--json]",
		Short: "Show a session: its state, settings, data and last rounds",
		Example: `  semaq session get chat-42
  semaq session get chat-42 --rounds -1 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := s.ref(args[0])
			if err != nil {
				return err
			}
			if rounds < -1 {
				return fmt.Errorf("--rounds %d: want -1 (all), 0 (none) or a count", rounds)
			}
			return s.e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				sess, err := c.GetSession(ctx, ref, rounds)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(s.e.stdout, sess)
				}
				return writeSession(s.e.stdout, sess)
			})
		},
	}
	cmd.Flags().IntVar(&rounds, "rounds", 0, "show the last `N` rounds (-1: all)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the session as JSON")
	s.e.addServerFlag(cmd)
	return cmd
}

// writeSession prints a session for people: its metadata, its data
// indented, then the rounds asked for.
func writeSession(w io.Writer, s *semaq.Session) error {
	var b bytes.Buffer
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', 0)
	fmt.Fprintf(tw, "Session:\t%s\n", s.ID)
	fmt.Fprintf(tw, "Tenant:\t%s\n", dash(s.Tenant))
	fmt.Fprintf(tw, "Revision:\t%d\n", s.Revision)
	fmt.Fprintf(tw, "State:\t%s\n", stateText(&s.SessionInfo))
	if s.LowStreak > 0 {
		fmt.Fprintf(tw, "Low streak:\t%d of %d\n", s.LowStreak, s.Settings.LowStreak)
	}
	rounds := "none"
	if s.RoundCount > 0 {
		rounds = fmt.Sprintf("%d (%d to %d)", s.RoundCount, s.FirstRound, s.LastRound)
	}
	fmt.Fprintf(tw, "Rounds:\t%s\n", rounds)
	fmt.Fprintf(tw, "Size:\t%s\n", formatBytes(uint64(max(s.Bytes, 0))))
	st := s.Settings
	fmt.Fprintf(tw, "Settings:\tttl %s, stale after %s, degraded after %d reports below %g\n",
		st.TTL, st.StaleAfter, st.LowStreak, st.LowConfidence)
	if len(st.Depends) > 0 {
		deps := slices.Sorted(maps.Keys(st.Depends))
		for i, k := range deps {
			deps[i] = k + "=" + st.Depends[k]
		}
		fmt.Fprintf(tw, "Depends:\t%s\n", strings.Join(deps, ", "))
	}
	fmt.Fprintf(tw, "Created:\t%s\n", formatTime(s.CreatedAt))
	fmt.Fprintf(tw, "Updated:\t%s\n", formatTime(s.UpdatedAt))
	fmt.Fprintf(tw, "Active:\t%s\n", formatTime(s.ActiveAt))
	fmt.Fprintf(tw, "Expires:\t%s\n", formatTime(s.ExpiresAt))
	if err := tw.Flush(); err != nil {
		return err
	}
	b.WriteString("Data:\n")
	if err := json.Indent(&b, s.Data, "", "  "); err != nil || len(s.Data) == 0 {
		b.Write(s.Data)
	}
	b.WriteByte('\n')
	for _, r := range s.Rounds {
		writeRound(&b, r)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// writeRound prints one round: its number, time and tokens, then each
// message with its role, continuation lines indented.
func writeRound(b *bytes.Buffer, r semaq.SessionRound) {
	fmt.Fprintf(b, "Round %d  %s", r.Round, formatTime(r.At))
	if r.Tokens > 0 {
		fmt.Fprintf(b, "  %d tokens", r.Tokens)
	}
	b.WriteByte('\n')
	for _, m := range r.Messages {
		fmt.Fprintf(b, "  %s: %s\n", m.Role, strings.ReplaceAll(strings.TrimRight(m.Content, "\n"), "\n", "\n    "))
	}
}

func (s *sessionCmds) patch() *cobra.Command {
	var (
		rev    revisionFlag
		create bool
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "patch ID JSON|- [--revision N] [--create]",
		Short: "Apply a JSON merge patch (RFC 7396) to a session's data",
		Long: `Patch merges JSON (- reads stdin) into the session's data as RFC 7396 says: a
key set to null is removed, an object is merged key by key, anything else
replaces. It prints the session's new revision. --create makes a missing
session from an empty object first.`,
		Example: `  semaq session patch chat-42 '{"topic":"billing","draft":null}'
  semaq session patch chat-42 '{"step":3}' --revision 7`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := s.ref(args[0])
			if err != nil {
				return err
			}
			var p []byte
			if args[1] == "-" {
				if p, err = s.readObject("-"); err != nil {
					return err
				}
			} else {
				p = []byte(args[1])
				if len(p) > semaq.MaxSessionBytes {
					return fmt.Errorf("the patch is larger than a session may be (%s)", formatBytes(semaq.MaxSessionBytes))
				}
				if err := checkObject(p); err != nil {
					return fmt.Errorf("the patch: %w", err)
				}
			}
			req := semaq.SessionPatchRequest{SessionRef: ref, Patch: p, Revision: rev.get(cmd), Create: create}
			return s.e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				info, err := c.PatchSession(ctx, req)
				if err != nil {
					return err
				}
				return s.writeInfo(info, asJSON, "patched")
			})
		},
	}
	rev.add(cmd)
	cmd.Flags().BoolVar(&create, "create", false, "make the session (from {}) when it does not exist")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the session's metadata as JSON")
	s.e.addServerFlag(cmd)
	return cmd
}

func (s *sessionCmds) watch() *cobra.Command {
	var from uint64
	cmd := &cobra.Command{
		Use:   "watch ID [--from-revision N]",
		Short: "Print a session's changes as they happen, one JSON delta per line",
		Long: `Watch prints each content change of the session as one JSON line (a delta: its
revision, op put, patch, round or trim, and what changed). With --from-revision
N it first prints the kept deltas from revision N on; without it, only the
changes made from now. It runs until interrupted, or until the session is
deleted or expires, which it reports on stderr. A broker node lost meanwhile
costs no delta: the watch resumes after the last one it printed.`,
		Example: `  semaq session watch chat-42
  semaq session watch chat-42 --from-revision 1`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := s.ref(args[0])
			if err != nil {
				return err
			}
			fromSet := cmd.Flags().Changed("from-revision")
			if fromSet && from == 0 {
				return errors.New("--from-revision 0: revisions start at 1")
			}
			return s.e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				// The session must exist to be watched; its revision is
				// where a watch of new changes starts.
				cur, err := c.GetSession(ctx, ref, 0)
				if err != nil {
					return err
				}
				if !fromSet {
					from = cur.Revision + 1
				}
				fmt.Fprintf(s.e.stderr, "Watching session %s (at revision %d) from revision %d\n", ref.ID, cur.Revision, from)
				enc := json.NewEncoder(s.e.stdout)
				enc.SetEscapeHTML(false)
				w := c.WatchSession(ref, from)
				for {
					d, err := w.Next(ctx)
					switch {
					case err == nil:
					case ctx.Err() != nil:
						return nil // interrupted: the normal end
					case errors.Is(err, semaq.ErrSessionNotFound):
						_, err = fmt.Fprintf(s.e.stderr, "Session %s was deleted or expired after revision %d; the watch ends\n", ref.ID, w.Revision())
						return err
					default:
						return err
					}
					if err := enc.Encode(d); err != nil {
						return err
					}
				}
			})
		},
	}
	cmd.Flags().Uint64Var(&from, "from-revision", 0, "print the kept deltas from revision `N` on first (1: every kept delta)")
	s.e.addServerFlag(cmd)
	return cmd
}

func (s *sessionCmds) history() *cobra.Command {
	var (
		last, round int
		asJSON      bool
	)
	cmd := &cobra.Command{
		Use:   "history ID [--last N] [--round N] [--json]",
		Short: "Show a session's rounds, oldest first",
		Example: `  semaq session history chat-42 --last 5
  semaq session history chat-42 --round 12 --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := s.ref(args[0])
			if err != nil {
				return err
			}
			switch {
			case last < 0:
				return fmt.Errorf("--last %d: want a count of rounds", last)
			case round < 0:
				return fmt.Errorf("--round %d: rounds are numbered from 1", round)
			case last > 0 && round > 0:
				return errors.New("give --last N or --round N, not both")
			}
			return s.e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				resp, err := c.SessionRounds(ctx, semaq.SessionRoundsRequest{SessionRef: ref, Last: last, Round: round})
				if err != nil {
					return err
				}
				if asJSON {
					if resp.Rounds == nil {
						resp.Rounds = []semaq.SessionRound{}
					}
					return writeJSON(s.e.stdout, resp)
				}
				if len(resp.Rounds) == 0 {
					_, err := fmt.Fprintln(s.e.stdout, "No rounds.")
					return err
				}
				var b bytes.Buffer
				for _, r := range resp.Rounds {
					writeRound(&b, r)
				}
				_, err = s.e.stdout.Write(b.Bytes())
				return err
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&last, "last", 0, "only the last `N` rounds (0: every kept round)")
	f.IntVar(&round, "round", 0, "only round number `N`")
	f.BoolVar(&asJSON, "json", false, "print the rounds and the session's revision as JSON")
	s.e.addServerFlag(cmd)
	return cmd
}

func (s *sessionCmds) round() *cobra.Command {
	var (
		roles, contents []string
		req             semaq.SessionRoundAddRequest
		rev             revisionFlag
		asJSON          bool
	)
	cmd := &cobra.Command{
		Use:   "round ID --role R --content TEXT [--role R --content TEXT]... [--tokens N] [--round N] [--revision N] [--create]",
		Short: "Add a round (one turn of the conversation) to a session",
		Long: `Round adds one turn of a conversation: its messages, each a --role and the
--content after it, in order (the n-th --role goes with the n-th --content).
The round is numbered after the last one, or --round N inserts it at a number
between kept rounds that none has. --create makes a missing session.`,
		Example: `  semaq session round chat-42 --role user --content 'Where is my order?' --role assistant --content 'It shipped today.'
  semaq session round chat-42 --role user --content hi --create --tokens 3`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := s.ref(args[0])
			if err != nil {
				return err
			}
			switch {
			case len(roles) == 0:
				return errors.New("a round needs at least one message: --role R --content TEXT")
			case len(roles) != len(contents):
				return fmt.Errorf("%d --role and %d --content: give each message both, in order", len(roles), len(contents))
			case req.Round < 0:
				return fmt.Errorf("--round %d: rounds are numbered from 1", req.Round)
			case req.Tokens < 0:
				return fmt.Errorf("--tokens %d is negative", req.Tokens)
			}
			for i, role := range roles {
				if strings.TrimSpace(role) == "" {
					return fmt.Errorf("message %d: --role is empty", i+1)
				}
				req.Messages = append(req.Messages, semaq.SessionMessage{Role: role, Content: contents[i]})
			}
			req.SessionRef, req.Revision = ref, rev.get(cmd)
			return s.e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				info, err := c.AddRound(ctx, req)
				if err != nil {
					return err
				}
				n := req.Round
				if n == 0 {
					n = info.LastRound
				}
				return s.writeInfo(info, asJSON, "round "+strconv.Itoa(n)+" added")
			})
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&roles, "role", nil, "a message's role (user, assistant, system, tool); repeat per message")
	f.StringArrayVar(&contents, "content", nil, "a message's text; repeat per message, after its --role")
	f.IntVar(&req.Tokens, "tokens", 0, "the round's size in tokens, when known")
	f.IntVar(&req.Round, "round", 0, "the number to give the round (default: after the last)")
	f.BoolVar(&req.Create, "create", false, "make the session when it does not exist")
	rev.add(cmd)
	f.BoolVar(&asJSON, "json", false, "print the session's metadata as JSON")
	s.e.addServerFlag(cmd)
	return cmd
}

func (s *sessionCmds) trim() *cobra.Command {
	var (
		req    semaq.SessionTrimRequest
		rev    revisionFlag
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:     "trim ID --before-round N [--revision N]",
		Short:   "Drop a session's rounds numbered below N; the others keep their numbers",
		Example: `  semaq session trim chat-42 --before-round 20`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := s.ref(args[0])
			if err != nil {
				return err
			}
			if req.BeforeRound < 1 {
				return fmt.Errorf("--before-round %d: want a round number from 1", req.BeforeRound)
			}
			req.SessionRef, req.Revision = ref, rev.get(cmd)
			return s.e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				info, err := c.TrimSession(ctx, req)
				if err != nil {
					return err
				}
				kept := "no rounds kept"
				if info.RoundCount > 0 {
					kept = fmt.Sprintf("rounds %d to %d kept", info.FirstRound, info.LastRound)
				}
				return s.writeInfo(info, asJSON, "trimmed, "+kept)
			})
		},
	}
	cmd.Flags().IntVar(&req.BeforeRound, "before-round", 0, "drop the rounds numbered below `N` (required)")
	_ = cmd.MarkFlagRequired("before-round")
	rev.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the session's metadata as JSON")
	s.e.addServerFlag(cmd)
	return cmd
}

func (s *sessionCmds) report() *cobra.Command {
	var (
		confidence float64
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "report ID --confidence F",
		Short: "Report the confidence of a result made with a session's context",
		Long: `Report tells the broker how confident a result made with the session's context
was, from 0 to 1. A streak of reports below the session's low-confidence
threshold degrades the session; a report does not change its revision.`,
		Example: `  semaq session report chat-42 --confidence 0.4`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ref, err := s.ref(args[0])
			if err != nil {
				return err
			}
			if !(confidence >= 0 && confidence <= 1) {
				return fmt.Errorf("--confidence %v: want 0 to 1", confidence)
			}
			return s.e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				info, err := c.ReportSession(ctx, ref, confidence)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(s.e.stdout, info)
				}
				_, err = fmt.Fprintf(s.e.stdout, "Session %s: %s, low-confidence streak %d of %d (below %g)\n",
					info.ID, stateText(info), info.LowStreak, info.Settings.LowStreak, info.Settings.LowConfidence)
				return err
			})
		},
	}
	cmd.Flags().Float64Var(&confidence, "confidence", 0, "the result's confidence, `F` from 0 to 1 (required)")
	_ = cmd.MarkFlagRequired("confidence")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the session's metadata as JSON")
	s.e.addServerFlag(cmd)
	return cmd
}

func (s *sessionCmds) ls() *cobra.Command {
	var (
		req    semaq.SessionListRequest
		state  string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:     "ls [--state active|stale|degraded] [--after ID] [--limit N] [--json]",
		Aliases: []string{"list"},
		Short:   "List sessions by ID",
		Example: `  semaq session ls --state degraded`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch st := semaq.SessionState(state); st {
			case "", semaq.SessionActive, semaq.SessionStale, semaq.SessionDegraded:
				req.State = st
			default:
				return fmt.Errorf("--state %q: want active, stale or degraded", state)
			}
			if req.Limit < 1 || req.Limit > semaq.SessionListMax {
				return fmt.Errorf("--limit %d: want 1 to %d", req.Limit, semaq.SessionListMax)
			}
			req.Tenant = s.tenant
			return s.e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				resp, err := c.Sessions(ctx, req)
				if err != nil {
					return err
				}
				more := func(w io.Writer) error {
					if !resp.More || len(resp.Sessions) == 0 {
						return nil
					}
					_, err := fmt.Fprintf(w, "More sessions follow: semaq session ls --after %s\n", resp.Sessions[len(resp.Sessions)-1].ID)
					return err
				}
				if asJSON {
					if err := writeJSON(s.e.stdout, resp.Sessions); err != nil {
						return err
					}
					return more(s.e.stderr) // stdout stays one JSON value
				}
				if len(resp.Sessions) == 0 {
					_, err := fmt.Fprintln(s.e.stdout, "No sessions.")
					return err
				}
				tw := tabwriter.NewWriter(s.e.stdout, 0, 0, 2, ' ', 0)
				fmt.Fprintln(tw, "ID\tTENANT\tSTATE\tREVISION\tROUNDS\tSIZE\tUPDATED\tEXPIRES")
				for _, si := range resp.Sessions {
					fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", si.ID, dash(si.Tenant), si.State, si.Revision, si.RoundCount,
						formatBytes(uint64(max(si.Bytes, 0))), formatTime(si.UpdatedAt), formatTime(si.ExpiresAt))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				return more(s.e.stdout)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&state, "state", "", "only the sessions in this state: active, stale or degraded")
	f.StringVar(&req.After, "after", "", "start after session `ID`")
	f.IntVar(&req.Limit, "limit", 100, fmt.Sprintf("list at most `N` (1 to %d)", semaq.SessionListMax))
	f.BoolVar(&asJSON, "json", false, "print the sessions' metadata as a JSON array")
	s.e.addServerFlag(cmd)
	return cmd
}

func (s *sessionCmds) depend() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "depend NAME VERSION",
		Short: "Say a dependency moved to VERSION: sessions that declared another version are degraded",
		Long: `Depend tells the broker that dependency NAME (a RAG index, a document set, a
model as model:<name>) is now at VERSION. Every session of the tenant that
declared NAME at another version (semaq session put --depends) is degraded;
the command prints how many were.`,
		Example: `  semaq session depend rag-index v8
  semaq session depend model:llama3 3.1 --tenant acme`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := semaq.SessionDependencyRequest{Tenant: s.tenant, Name: args[0], Version: args[1]}
			if err := semaq.CheckSessionDependency(&req); err != nil {
				return err
			}
			return s.e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				n, err := c.MoveSessionDependency(ctx, req)
				if err != nil {
					return err
				}
				noun := "sessions"
				if n == 1 {
					noun = "session"
				}
				_, err = fmt.Fprintf(s.e.stdout, "Dependency %s moved to %s: %d %s degraded\n", req.Name, req.Version, n, noun)
				return err
			})
		},
	}
	s.e.addServerFlag(cmd)
	return cmd
}
