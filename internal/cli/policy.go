package cli

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// newPolicyCmd is `semaq policy`: stored rules that redact PII and apply
// a content policy at the ingress and on token streams.
func newPolicyCmd(e *env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Redact PII and apply a content policy: add, ls, get, rm, test, restore",
		Long: `Policy rules act where they are attached: at the ingress of --subjects or
--streams, before the schema check, and on token streams (--streams tokens) as
workers write them. --redact finds PII (email, phone, cn-id, card, iban, ssn,
ip, secret) and masks, hashes, tokenizes or blocks it; --words, --block-words
and --patterns are a content policy that masks, stops the stream or flags.
Changes are in force on every node when the command returns. See
docs/policy.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(
		newPolicyAddCmd(e),
		newPolicyLsCmd(e),
		newPolicyGetCmd(e),
		removal{
			use:     "rm NAME",
			example: "  semaq policy rm pii-in",
			aliases: []string{"remove", "delete"},
			short:   "Remove a policy rule",
			done:    "Policy %s removed.",
			remove:  (*client.Client).DeletePolicy,
		}.command(e),
		newPolicyTestCmd(e),
		newPolicyRestoreCmd(e),
	)
	return cmd
}

// piiTypes and the actions are what the flags accept, checked here so
// that a typo names its flag before anything dials.
var (
	piiTypes       = []string{semaq.PIIEmail, semaq.PIIPhone, semaq.PIICNID, semaq.PIICard, semaq.PIIIBAN, semaq.PIISSN, semaq.PIIIP, semaq.PIISecret}
	piiActions     = []string{semaq.PIIMask, semaq.PIIHash, semaq.PIITokenize, semaq.PIIBlock}
	contentActions = []string{semaq.ContentMask, semaq.ContentStop, semaq.ContentFlag}
)

// ruleFlags are the flags that say what a rule does: shared by add and by
// test of an unsaved rule.
type ruleFlags struct {
	redact     []string
	action     string
	actionFor  []string
	paths      []string
	blockWords string
	words      []string
	patterns   []string
	onMatch    string
}

func (fl *ruleFlags) add(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringSliceVar(&fl.redact, "redact", nil, "PII `TYPES` to find: "+strings.Join(piiTypes, ", "))
	f.StringVar(&fl.action, "action", "", "what is done to each entity found: mask (default), hash, tokenize or block")
	f.StringArrayVar(&fl.actionFor, "action-for", nil, "another action for one type, `TYPE=ACTION` (repeatable)")
	f.StringSliceVar(&fl.paths, "paths", nil, "JSON `PATHS` searched, dotted with * for any key or index (messages.*.content); default every string")
	f.StringVar(&fl.blockWords, "block-words", "", "`FILE` of words and phrases, one a line ('#' comments and blank lines skipped)")
	f.StringSliceVar(&fl.words, "words", nil, "words and phrases `W1,W2` of the content policy, matched whole and in any case")
	f.StringArrayVar(&fl.patterns, "patterns", nil, "an RE2 pattern `RE` of the content policy (repeatable)")
	f.StringVar(&fl.onMatch, "on-match", "", "what a word or pattern match does: mask (default, ***), stop (ends a token stream) or flag (an event)")
}

// changed says whether any of the rule's flags was given.
func (fl *ruleFlags) changed(cmd *cobra.Command) bool {
	for _, name := range []string{"redact", "action", "action-for", "paths", "block-words", "words", "patterns", "on-match"} {
		if cmd.Flags().Changed(name) {
			return true
		}
	}
	return false
}

// fill checks the flags and sets what the rule does. Errors name the flag.
func (fl *ruleFlags) fill(r *semaq.PolicyRule) error {
	for _, t := range fl.redact {
		if !slices.Contains(piiTypes, t) {
			return fmt.Errorf("--redact: %q is not a PII type; use %s", t, strings.Join(piiTypes, ", "))
		}
		if slices.Contains(r.Redact, t) {
			return fmt.Errorf("--redact names %s twice", t)
		}
		r.Redact = append(r.Redact, t)
	}
	if fl.action != "" {
		if len(r.Redact) == 0 {
			return errors.New("--action needs --redact: name the PII types it acts on")
		}
		if !slices.Contains(piiActions, fl.action) {
			return fmt.Errorf("--action %q: use %s", fl.action, strings.Join(piiActions, ", "))
		}
		r.Action = fl.action
	}
	for _, kv := range fl.actionFor {
		t, a, ok := strings.Cut(kv, "=")
		switch {
		case !ok:
			return fmt.Errorf("--action-for %q: want TYPE=ACTION, as card=block", kv)
		case !slices.Contains(r.Redact, t):
			return fmt.Errorf("--action-for %q: %s is not among the --redact types", kv, t)
		case !slices.Contains(piiActions, a):
			return fmt.Errorf("--action-for %q: action %q: use %s", kv, a, strings.Join(piiActions, ", "))
		}
		if r.Actions == nil {
			r.Actions = make(map[string]string)
		}
		if _, dup := r.Actions[t]; dup {
			return fmt.Errorf("--action-for names %s twice", t)
		}
		r.Actions[t] = a
	}
	for _, p := range fl.paths {
		if p = strings.TrimSpace(p); p == "" || strings.HasPrefix(p, ".") || strings.HasSuffix(p, ".") || strings.Contains(p, "..") {
			return fmt.Errorf("--paths: %q is not a dotted path such as messages.*.content", p)
		}
		r.Paths = append(r.Paths, p)
	}
	if len(r.Paths) > semaq.MaxPolicyPaths {
		return fmt.Errorf("--paths: %d paths, more than a rule may have (%d)", len(r.Paths), semaq.MaxPolicyPaths)
	}
	if fl.blockWords != "" {
		words, err := readWords(fl.blockWords)
		if err != nil {
			return fmt.Errorf("--block-words: %w", err)
		}
		r.Words = append(r.Words, words...)
	}
	for _, w := range fl.words {
		if w = strings.TrimSpace(w); w == "" {
			return errors.New("--words: an empty word")
		}
		r.Words = append(r.Words, w)
	}
	if len(r.Words) > semaq.MaxPolicyWords {
		return fmt.Errorf("--words and --block-words: %d words, more than a rule may have (%d)", len(r.Words), semaq.MaxPolicyWords)
	}
	for _, p := range fl.patterns {
		if _, err := regexp.Compile(p); err != nil {
			return fmt.Errorf("--patterns %q: %w", p, err)
		}
		r.Patterns = append(r.Patterns, p)
	}
	if len(r.Patterns) > semaq.MaxPolicyPatterns {
		return fmt.Errorf("--patterns: %d patterns, more than a rule may have (%d)", len(r.Patterns), semaq.MaxPolicyPatterns)
	}
	if fl.onMatch != "" {
		if len(r.Words) == 0 && len(r.Patterns) == 0 {
			return errors.New("--on-match needs --words, --block-words or --patterns")
		}
		if !slices.Contains(contentActions, fl.onMatch) {
			return fmt.Errorf("--on-match %q: use %s", fl.onMatch, strings.Join(contentActions, ", "))
		}
		r.OnMatch = fl.onMatch
	}
	if len(r.Redact) == 0 && len(r.Words) == 0 && len(r.Patterns) == 0 {
		return errors.New("the rule does nothing: give --redact TYPES, --words, --block-words FILE or --patterns RE")
	}
	return nil
}

// readWords reads a word list: one word or phrase a line, '#' comments and
// blank lines skipped. A file past the bound on a rule's words is refused
// before it is read whole.
func readWords(name string) ([]string, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, semaq.MaxPolicyWordBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(b) > semaq.MaxPolicyWordBytes {
		return nil, fmt.Errorf("%s is larger than a rule's words may be (%s)", name, formatBytes(semaq.MaxPolicyWordBytes))
	}
	var words []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), semaq.MaxPolicyWordBytes+1)
	for sc.Scan() {
		w := strings.TrimSpace(sc.Text())
		if w == "" || strings.HasPrefix(w, "#") {
			continue
		}
		words = append(words, w)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(words) == 0 {
		return nil, fmt.Errorf("%s holds no words", name)
	}
	return words, nil
}

func newPolicyAddCmd(e *env) *cobra.Command {
	var (
		r       semaq.PolicyRule
		fl      ruleFlags
		replace bool
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "add NAME (--subjects P,... | --streams S,...) [--tenant T] [--redact TYPES [--action A] [--action-for TYPE=A]... [--paths P,...]] [--words W,... | --block-words FILE | --patterns RE... [--on-match mask|stop|flag]] [--replace]",
		Short: "Add a policy rule",
		Long: `Add a rule. It applies to the messages published on --subjects (patterns) or
stored by --streams at their ingress, before the schema check; --streams tokens
applies it to token streams as workers write them. --tenant limits it to one
tenant's messages and streams.

--redact finds PII of the types named; --action says what is done to each
(mask: [EMAIL]; hash: [EMAIL:3f9a0c41d2b7], keyed and stable; tokenize:
<EMAIL_1>, restorable by the sender's tenant with 'policy restore'; block:
the message is refused, naming the type and where), --action-for another
action for one type. --paths limits the search to JSON paths. --words,
--block-words (a file, one word or phrase a line) and --patterns are the
content policy: a match is masked (***), stops the token stream
(finish_reason content_filter) or is flagged (an event), by --on-match.`,
		Example: `  semaq policy add pii-in --subjects 'ai.inference.>' --redact email,phone,card --action tokenize --action-for card=block
  semaq policy add no-secrets-out --streams tokens --redact secret,email --action mask
  semaq policy add brand-safety --streams tokens --block-words words.txt --on-match stop`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r.Name = args[0]
			if len(r.Subjects) == 0 && len(r.Streams) == 0 {
				return errors.New("name where the rule applies: --subjects PATTERNS or --streams STREAMS (tokens for token streams)")
			}
			for _, s := range r.Subjects {
				if err := semaq.CheckSubject(s, true); err != nil {
					return fmt.Errorf("--subjects %q: %w", s, err)
				}
			}
			for _, s := range r.Streams {
				if s == semaq.PolicyStreamTokens {
					continue
				}
				if err := semaq.CheckStreamName(s); err != nil {
					return fmt.Errorf("--streams %q: %w", s, err)
				}
			}
			if cmd.Flags().Changed("tenant") && r.Tenant == "" {
				return errors.New("--tenant: empty value")
			}
			if err := fl.fill(&r); err != nil {
				return err
			}
			var opts []client.PolicyOption
			if replace {
				opts = append(opts, client.WithPolicyReplace())
			}
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				info, err := c.AddPolicy(ctx, r, opts...)
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(e.stdout, info)
				}
				_, err = fmt.Fprintf(e.stdout, "Policy %s added: %s: %s\n", info.Name, policyWhere(&info.PolicyRule), policyWhat(&info.PolicyRule))
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringSliceVar(&r.Subjects, "subjects", nil, "publish subject `PATTERNS` the rule applies to at the ingress (wildcards allowed)")
	f.StringSliceVar(&r.Streams, "streams", nil, "`STREAMS` whose ingress the rule applies to; tokens for token streams")
	f.StringVar(&r.Tenant, "tenant", "", "apply the rule to one tenant's messages and streams only")
	fl.add(cmd)
	f.BoolVar(&replace, "replace", false, "replace a rule of the same name")
	f.BoolVar(&asJSON, "json", false, "print the stored rule as JSON")
	e.addServerFlag(cmd)
	return cmd
}

// policyWhere is where a rule applies, on one line.
func policyWhere(r *semaq.PolicyRule) string {
	var parts []string
	if len(r.Subjects) > 0 {
		parts = append(parts, strings.Join(r.Subjects, ","))
	}
	if len(r.Streams) > 0 {
		parts = append(parts, "streams "+strings.Join(r.Streams, ","))
	}
	if r.Tenant != "" {
		parts = append(parts, "tenant "+r.Tenant)
	}
	return strings.Join(parts, " ")
}

// policyWhat is what a rule does, on one line.
func policyWhat(r *semaq.PolicyRule) string {
	var parts []string
	if len(r.Redact) > 0 {
		s := "redact " + strings.Join(r.Redact, ",") + " " + orDefault(r.Action, semaq.PIIMask)
		for _, t := range slices.Sorted(maps.Keys(r.Actions)) {
			s += fmt.Sprintf(" (%s %s)", t, r.Actions[t])
		}
		if len(r.Paths) > 0 {
			s += " in " + strings.Join(r.Paths, ",")
		}
		parts = append(parts, s)
	}
	if len(r.Words) > 0 || len(r.Patterns) > 0 {
		var s []string
		if len(r.Words) > 0 {
			s = append(s, fmt.Sprintf("%d %s", len(r.Words), plural(len(r.Words), "word", "words")))
		}
		if len(r.Patterns) > 0 {
			s = append(s, fmt.Sprintf("%d %s", len(r.Patterns), plural(len(r.Patterns), "pattern", "patterns")))
		}
		parts = append(parts, strings.Join(s, ", ")+" "+orDefault(r.OnMatch, semaq.ContentMask))
	}
	return strings.Join(parts, "; ")
}

// foundText is a rule's findings by type: email=3 content=1.
func foundText(found map[string]uint64) string {
	if len(found) == 0 {
		return "0"
	}
	var parts []string
	for _, t := range slices.Sorted(maps.Keys(found)) {
		parts = append(parts, fmt.Sprintf("%s=%d", t, found[t]))
	}
	return strings.Join(parts, ",")
}

func newPolicyLsCmd(e *env) *cobra.Command {
	return listing[semaq.PolicyInfo]{
		short:    "List policy rules by name, with this node's counters",
		noun:     "policies",
		jsonHelp: "print the rules with their counters as a JSON array",
		header:   []string{"NAME", "WHERE", "WHAT", "REV", "FOUND", "BLOCKED", "STOPPED", "ERROR"},
		fetch:    (*client.Client).Policies,
		row: func(p semaq.PolicyInfo) []string {
			return []string{p.Name, policyWhere(&p.PolicyRule), policyWhat(&p.PolicyRule), fmt.Sprint(p.Revision),
				foundText(p.Stats.Found), fmt.Sprint(p.Stats.Blocked), fmt.Sprint(p.Stats.Stopped), orDefault(oneLine(p.Error), "-")}
		},
	}.command(e)
}

func newPolicyGetCmd(e *env) *cobra.Command {
	return showing[*semaq.PolicyInfo]{
		use:      "get NAME",
		short:    "Show a policy rule and this node's counters",
		example:  "  semaq policy get pii-in --json",
		jsonHelp: "print the rule with its counters as JSON",
		fetch:    (*client.Client).Policy,
		write: func(e *env, p *semaq.PolicyInfo) error {
			return writePolicy(e.stdout, p)
		},
	}.command(e)
}

// writePolicy prints a rule for people, one field a line.
func writePolicy(w io.Writer, p *semaq.PolicyInfo) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s:\t%s\n", k, v)
		}
	}
	row("Policy", p.Name)
	row("Revision", fmt.Sprint(p.Revision))
	row("Created", formatTime(p.Created))
	row("Subjects", strings.Join(p.Subjects, ", "))
	row("Streams", strings.Join(p.Streams, ", "))
	row("Tenant", p.Tenant)
	if len(p.Redact) > 0 {
		row("Redact", strings.Join(p.Redact, ", "))
		row("Action", orDefault(p.Action, semaq.PIIMask))
		for _, t := range slices.Sorted(maps.Keys(p.Actions)) {
			row("Action for "+t, p.Actions[t])
		}
		row("Paths", strings.Join(p.Paths, ", "))
	}
	if len(p.Words) > 0 || len(p.Patterns) > 0 {
		if len(p.Words) > 0 {
			row("Words", fmt.Sprint(len(p.Words)))
		}
		for _, re := range p.Patterns {
			row("Pattern", re)
		}
		row("On match", orDefault(p.OnMatch, semaq.ContentMask))
	}
	s := p.Stats
	row("Messages", fmt.Sprint(s.Messages))
	row("Found", foundText(s.Found))
	row("Blocked", fmt.Sprint(s.Blocked))
	row("Stopped", fmt.Sprint(s.Stopped))
	row("Flagged", fmt.Sprint(s.Flagged))
	row("Error", oneLine(p.Error))
	return tw.Flush()
}

// maxSample bounds what policy test and restore read: more than a message
// may hold on a default broker.
const maxSample = 8 << 20

// readSample reads FILE, or stdin for -.
func (e *env) readSample(file string) ([]byte, error) {
	name, r := file, io.Reader(nil)
	if file == "-" {
		name, r = "stdin", e.stdin
	} else {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxSample+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(b) > maxSample {
		return nil, fmt.Errorf("%s is larger than %s", name, formatBytes(maxSample))
	}
	return b, nil
}

func newPolicyTestCmd(e *env) *cobra.Command {
	var (
		fl     ruleFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "test (NAME | --redact TYPES ... | --words W,... ...) FILE|-",
		Short: "Show what a rule would do to a sample, without storing anything (exit 0 passed, 1 blocked or stopped, 2 error)",
		Long: `Run a stored rule (NAME), or one given by the flags of 'policy add', on the
JSON or text in FILE (- reads stdin), without storing anything or writing the
vault. Prints each finding (type, JSON path, action; never the value) and the
sample as the rule leaves it: tokenize shows the placeholders it would assign.
Exits 0 when the message would pass, 1 when the rule would refuse it (block)
or stop its token stream, 2 when the test could not run.`,
		Example: `  semaq policy test pii-in sample.json
  echo '{"to":"ada@example.com"}' | semaq policy test --redact email --action tokenize -`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.RangeArgs(1, 2)(cmd, args); err != nil {
				return &exitError{code: 2, msg: err.Error()}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := func() (*semaq.PolicyTestResponse, error) {
				var req semaq.PolicyTestRequest
				switch {
				case len(args) == 2 && fl.changed(cmd):
					return nil, errors.New("test the stored rule NAME or a rule given by flags, not both")
				case len(args) == 2:
					req.Name = args[0]
				case !fl.changed(cmd):
					return nil, errors.New("name a stored rule (policy test NAME FILE) or give one with --redact, --words, --block-words or --patterns")
				default:
					// An unsaved rule is named for its findings only.
					r := semaq.PolicyRule{Name: "test"}
					if err := fl.fill(&r); err != nil {
						return nil, err
					}
					req.Rule = &r
				}
				var err error
				if req.Data, err = e.readSample(args[len(args)-1]); err != nil {
					return nil, err
				}
				ctx := cmd.Context()
				c, err := e.connect(ctx)
				if err != nil {
					return nil, err
				}
				defer c.Close()
				return c.TestPolicy(ctx, req)
			}()
			if err != nil {
				return &exitError{code: 2, msg: err.Error()}
			}
			if asJSON {
				err = writeJSON(e.stdout, res)
			} else {
				err = writePolicyTest(e.stdout, res)
			}
			if err != nil {
				return &exitError{code: 2, msg: err.Error()}
			}
			switch {
			case res.Blocked != "":
				return &exitError{code: 1, msg: "the message would be refused: " + res.Blocked}
			case res.Stopped != "":
				return &exitError{code: 1, msg: "the token stream would be stopped: " + res.Stopped}
			}
			return nil
		},
	}
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: 2, msg: err.Error()} })
	fl.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the outcome as JSON")
	e.addServerFlag(cmd)
	return cmd
}

// writePolicyTest prints the findings as a table, then the sample as the
// rule leaves it.
func writePolicyTest(w io.Writer, res *semaq.PolicyTestResponse) error {
	if len(res.Findings) == 0 {
		fmt.Fprintln(w, "No findings.")
	} else {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "TYPE\tPATH\tACTION\tRULE")
		for _, f := range res.Findings {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", f.Type, orDefault(f.Path, "-"), f.Action, orDefault(f.Rule, "-"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	switch {
	case res.Blocked != "":
		_, err := fmt.Fprintf(w, "Blocked: %s\n", oneLine(res.Blocked))
		return err
	case res.Stopped != "":
		fmt.Fprintf(w, "Stopped: %s\n", oneLine(res.Stopped))
	}
	if _, err := fmt.Fprintf(w, "Result:\n%s", res.Data); err != nil {
		return err
	}
	if len(res.Data) == 0 || res.Data[len(res.Data)-1] != '\n' {
		_, err := fmt.Fprintln(w)
		return err
	}
	return nil
}

func newPolicyRestoreCmd(e *env) *cobra.Command {
	var req semaq.PolicyRestoreRequest
	cmd := &cobra.Command{
		Use:   "restore --scope S [--tenant T] TEXT|-",
		Short: "Put back the values a tokenize action replaced in a text",
		Long: `Restore replaces the placeholders (<EMAIL_1>) in TEXT (- reads stdin) with the
values they stand for, from the vault scope of the message they came from: its
AI-PII-Scope header, s.<session>, r.<Nats-Msg-Id> or m.<id>. Only the tenant
whose message it was gets them back; --tenant names it for admins and
services. Placeholders the scope does not hold are left as they are.`,
		Example: `  semaq policy restore --scope r.req-1 'Mail <EMAIL_1> today'
  cat answer.txt | semaq policy restore --scope s.chat-42 --tenant acme -`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if req.Scope == "" {
				return errors.New("--scope: name the vault scope (the message's AI-PII-Scope header, as r.req-1)")
			}
			if cmd.Flags().Changed("tenant") && req.Tenant == "" {
				return errors.New("--tenant: empty value")
			}
			if args[0] == "-" {
				b, err := e.readSample("-")
				if err != nil {
					return err
				}
				req.Text = string(b)
			} else {
				req.Text = args[0]
			}
			return e.withClient(cmd, func(ctx context.Context, c *client.Client) error {
				res, err := c.RestorePII(ctx, req)
				if err != nil {
					return err
				}
				if _, err := io.WriteString(e.stdout, res.Text); err != nil {
					return err
				}
				if !strings.HasSuffix(res.Text, "\n") {
					_, err = fmt.Fprintln(e.stdout)
				}
				return err
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&req.Scope, "scope", "", "the vault `SCOPE`: the message's AI-PII-Scope header")
	f.StringVar(&req.Tenant, "tenant", "", "the tenant whose values to restore (admins and services; others get their own)")
	e.addServerFlag(cmd)
	return cmd
}
