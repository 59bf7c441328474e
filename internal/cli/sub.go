package cli

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// subFlags are the flags of `semaq sub`.
type subFlags struct {
	durable      string
	deliver      string
	count        int
	timeout      time.Duration
	json         bool
	filter       string
	filterPlugin string
	group        string
	key          string
	member       string
}

func newSubCmd(e *env) *cobra.Command {
	var fl subFlags
	cmd := &cobra.Command{
		Use:   "sub SUBJECT",
		Short: "Receive and acknowledge the messages stored on a subject",
		Long: `Receive the messages stored on SUBJECT (wildcards allowed within one stream),
print each one and acknowledge it. By default it starts at the first stored
message and then waits for new ones; --deliver new starts with the next one
published. A --durable subscription keeps its position: run it again to
resume after the last acknowledged message.

--filter EXPR (CEL, see docs/expressions.md) makes the broker send only the
messages that match; the rest are acknowledged by the broker. A durable keeps
its filter: run it again without --filter to resume with it.

--group G --group-key KEY joins the key-shared group G: the group's members share
the messages by key (session, tenant or a CEL key expression), each key's
messages going to one member at a time in order (docs/key-shared.md). Run
it in several terminals to scale out; --key may be left out to join an
existing group.

With --count N it exits 0 after N messages, or non-zero if --timeout passes
first. Without --count, --timeout bounds the run; SIGINT ends it (exit 130).`,
		Example: `  semaq sub 'ai.>' --count 10 --timeout 30s
  semaq sub ai.inference.llm --durable worker --json
  semaq sub ai.scores --filter 'payload.confidence > 0.85' --durable confident
  semaq sub ai.chat --group chat-workers --group-key session`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			opts, err := fl.options(cmd)
			if err != nil {
				return err
			}
			return e.sub(cmd.Context(), args[0], fl, opts)
		},
	}
	f := cmd.Flags()
	f.StringVar(&fl.durable, "durable", "", "durable subscription `NAME`: the broker keeps its position")
	f.StringVar(&fl.deliver, "deliver", "all", "where a new subscription starts: all (first stored message) or new")
	f.IntVar(&fl.count, "count", 0, "exit after `N` messages")
	f.DurationVar(&fl.timeout, "timeout", 0, "give up after this long (with --count: exit non-zero)")
	f.BoolVar(&fl.json, "json", false, "print one JSON object per message")
	f.StringVar(&fl.filter, "filter", "", "server-side filter: only messages matching the CEL `EXPR` are sent")
	f.StringVar(&fl.filterPlugin, "filter-plugin", "", "server-side filter by the filter-stage plugin `NAME` (semaq plugin add): only what it keeps is sent")
	f.StringVar(&fl.group, "group", "", "join the key-shared group `G` (with --key)")
	f.StringVar(&fl.key, "group-key", "", "what a key-shared group's messages are keyed by: session, tenant or a CEL key `EXPR`")
	f.StringVar(&fl.member, "member", "", "this member's `NAME` in a key-shared group (default: picked by the broker)")
	e.addServerFlag(cmd)
	return cmd
}

// options turns the flags into subscribe options. Errors name the flag.
func (fl *subFlags) options(cmd *cobra.Command) ([]client.SubscribeOption, error) {
	f := cmd.Flags()
	var opts []client.SubscribeOption
	if f.Changed("durable") {
		if err := semaq.CheckConsumerName(fl.durable); err != nil {
			return nil, fmt.Errorf("--durable: %w", err)
		}
		opts = append(opts, client.WithDurable(fl.durable))
	}
	if f.Changed("filter") {
		if strings.TrimSpace(fl.filter) == "" {
			return nil, errors.New("--filter: the expression is empty")
		}
		opts = append(opts, client.WithFilter(fl.filter))
	}
	if f.Changed("filter-plugin") {
		if strings.TrimSpace(fl.filterPlugin) == "" {
			return nil, errors.New("--filter-plugin: the plugin name is empty")
		}
		opts = append(opts, client.WithFilterPlugin(fl.filterPlugin))
	}
	if err := fl.groupOptions(cmd, &opts); err != nil {
		return nil, err
	}
	switch strings.ToLower(fl.deliver) {
	case "all":
		opts = append(opts, client.WithDeliver(client.DeliverAll))
	case "new":
		opts = append(opts, client.WithDeliver(client.DeliverNew))
	default:
		return nil, fmt.Errorf("--deliver %q: use all or new", fl.deliver)
	}
	if f.Changed("count") {
		if fl.count < 1 {
			return nil, fmt.Errorf("--count %d: want at least 1", fl.count)
		}
		// Pull no more than N, so a durable run leaves nothing in flight and
		// the next run resumes at once instead of after the ack wait.
		opts = append(opts, client.WithMaxMessages(fl.count), client.WithPrefetch(min(fl.count, 128)))
	}
	if f.Changed("timeout") && fl.timeout <= 0 {
		return nil, fmt.Errorf("--timeout: %s is not positive", fl.timeout)
	}
	return opts, nil
}

func (e *env) sub(ctx context.Context, subject string, fl subFlags, opts []client.SubscribeOption) error {
	// runCtx bounds the whole run; ctx alone ends with SIGINT.
	runCtx, cancel := ctx, context.CancelFunc(func() {})
	if fl.timeout > 0 {
		runCtx, cancel = context.WithTimeout(ctx, fl.timeout)
	}
	defer cancel()

	c, err := e.connect(runCtx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // interrupted
		}
		return err
	}
	defer c.Close()
	var sub *client.Subscription
	if fl.group != "" {
		sub, err = c.SubscribeKeyShared(runCtx, subject, fl.group, opts...)
	} else {
		sub, err = c.Subscribe(runCtx, subject, opts...)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer func() {
		_ = sub.Close()
		if st, ok := sub.FilterStats(); ok {
			fmt.Fprintf(e.stderr, "filter: %d matched, %d skipped, %d errors (%d lacked a field the filter reads)\n", st.Matched, st.Skipped, st.Errors, st.MissingField)
		}
	}()
	desc := ""
	if fl.durable != "" {
		desc = ", durable " + fl.durable
	}
	if fl.group != "" {
		desc = ", key-shared group " + fl.group
	}
	fmt.Fprintf(e.stderr, "Subscribed to %s on stream %s%s\n", subject, sub.Stream(), desc)
	for _, w := range sub.FilterWarnings() {
		fmt.Fprintf(e.stderr, "warning: %s\n", w)
	}

	// Acks outlive SIGINT and --timeout: a message that was printed is
	// acknowledged (bounded by the client's default timeout).
	ackCtx := context.WithoutCancel(ctx)
	received := 0
	for {
		msg, err := sub.Next(runCtx)
		switch {
		case errors.Is(err, client.ErrSubscriptionDone):
			return nil
		case err != nil && ctx.Err() != nil:
			return nil // interrupted
		case err != nil && runCtx.Err() != nil:
			if fl.count > 0 {
				return fmt.Errorf("received %d of %d messages before --timeout %s", received, fl.count, fl.timeout)
			}
			return nil
		case err != nil:
			return err
		}
		received++
		if err := e.printMsg(msg, fl.json); err != nil {
			return err
		}
		if err := msg.Ack(ackCtx); err != nil {
			return fmt.Errorf("acknowledging %s seq %d: %w", msg.Stream, msg.Seq, err)
		}
	}
}

func (e *env) printMsg(msg *client.Msg, asJSON bool) error {
	if asJSON {
		// Unescaped, as Msg.MarshalJSON writes it: json.Marshal would turn
		// a placeholder's <EMAIL_1> into \u003cEMAIL_1\u003e.
		enc := json.NewEncoder(e.stdout)
		enc.SetEscapeHTML(false)
		return enc.Encode(msg)
	}
	return writeMsg(e.stdout, msg)
}

// writeMsg prints a message for people: a title line, the headers sorted by
// name, the payload (base64 when it is not UTF-8) and a blank line.
func writeMsg(w io.Writer, msg *client.Msg) error {
	var b strings.Builder
	fmt.Fprintf(&b, "[#%d] %s (stream %s, %s)\n", msg.Seq, msg.Subject, msg.Stream, msg.Time.UTC().Format(time.RFC3339Nano))
	names := make([]string, 0, len(msg.Header))
	for k := range msg.Header {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		for _, v := range msg.Header[k] {
			fmt.Fprintf(&b, "  %s: %s\n", k, v)
		}
	}
	switch {
	case len(msg.Data) == 0:
		b.WriteString("(empty payload)\n")
	case utf8.Valid(msg.Data):
		b.Write(msg.Data)
		if msg.Data[len(msg.Data)-1] != '\n' {
			b.WriteByte('\n')
		}
	default:
		fmt.Fprintf(&b, "(%d bytes, not UTF-8; base64) %s\n", len(msg.Data), base64.StdEncoding.EncodeToString(msg.Data))
	}
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}
