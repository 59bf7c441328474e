package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/semaq"
)

// Conversations (docs/gateway.md, "Conversations"): a request that names
// a session (X-SemaQ-Session) is sent to the model after the session's
// history, its summary and its newest rounds within a token budget, and
// its answer, once it ended well, becomes the session's next round. So a
// client that keeps no state sends each turn's new messages only.

// Degraded-session policies (Options.DegradedPolicy): what a request does
// with a session whose context cannot be trusted.
const (
	// DegradedProceed answers as usual.
	DegradedProceed = "proceed"
	// DegradedWarn answers as usual and says why the session is degraded
	// in X-SemaQ-Session-Warning.
	DegradedWarn = "warn"
	// DegradedRefuse answers 409 session_degraded without asking the
	// model.
	DegradedRefuse = "refuse"
)

const (
	// DefaultSessionBudget is Options.SessionBudget's default, in tokens.
	DefaultSessionBudget = 4096
	// DefaultMaxSessionBudget is as much history as a session can hold.
	DefaultMaxSessionBudget = semaq.MaxSessionBytes / semaq.CharsPerToken
	// sessionNew is the X-SemaQ-Session-State of a session that does not
	// exist yet: the first turn makes it.
	sessionNew = "new"
	// summaryPrefix starts the system message that carries a session's
	// summary.
	summaryPrefix = "Conversation so far (summary): "
	// roundTimeout bounds the write of a round after its answer was sent.
	roundTimeout = 10 * time.Second
	// maxWarning bounds the reason quoted in X-SemaQ-Session-Warning.
	maxWarning = 512
)

// sessionBudget reads X-SemaQ-Session-Budget: history tokens, from 1 to
// Options.MaxSessionBudget.
func (g *Gateway) sessionBudget(r *http.Request) (int, error) {
	v := r.Header.Get(semaq.HdrHTTPSessionBudget)
	if v == "" {
		return g.o.SessionBudget, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > g.o.MaxSessionBudget {
		return 0, fmt.Errorf("%s %.32q is not a number of tokens from 1 to %d", semaq.HdrHTTPSessionBudget, v, g.o.MaxSessionBudget)
	}
	return n, nil
}

// turn is a request's part in its session's conversation: the history
// read before the request is queued and the round written after its
// answer. The methods of a nil *turn (no session named) do nothing. It is
// used by the request's handler only.
type turn struct {
	g   *Gateway
	c   *client.Client
	ref semaq.SessionRef
	// own are the request's messages as the round keeps them; ownTokens
	// their estimate.
	own       []semaq.SessionMessage
	ownTokens int
	// The answer as it arrives: its text, the tokens the stream counted,
	// the final record's usage. tooLarge: the text outgrew a session.
	text     strings.Builder
	tokens   int
	tooLarge bool
}

// openTurn reads the session ref with caller's client c and returns the
// body to queue, with the session's history before the request's own
// messages, and the history's tokens. It sets X-SemaQ-Session-State and
// -Revision. ok false: it answered the request itself (an error, or a
// degraded session refused).
func (g *Gateway) openTurn(ctx context.Context, w http.ResponseWriter, c *client.Client, ref semaq.SessionRef,
	req *openai.ChatRequest, body []byte, budget int) (t *turn, out []byte, historyTokens int, ok bool) {
	s, err := c.GetSession(ctx, ref, -1)
	switch {
	case errors.Is(err, semaq.ErrSessionNotFound):
		s = nil // the first turn
	case err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded):
		writeError(w, http.StatusGatewayTimeout, openai.TypeTimeout, "timeout", "The request timed out while reading its session.")
		return nil, nil, 0, false
	case err != nil && ctx.Err() != nil:
		return nil, nil, 0, false // the client left
	case errors.Is(err, semaq.ErrForbidden):
		writeError(w, http.StatusForbidden, openai.TypeInvalidRequest, "permission_denied",
			fmt.Sprintf("The key may not use the session `%s`: %v.", ref.ID, err))
		return nil, nil, 0, false
	case errors.Is(err, semaq.ErrBadSession):
		badParam(w, semaq.HdrHTTPSession, "invalid_header", fmt.Sprintf("The session `%s` cannot be read: %v.", ref.ID, err))
		return nil, nil, 0, false
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, openai.TypeServer, "unavailable", fmt.Sprintf("reading the session `%s`: %v", ref.ID, err))
		return nil, nil, 0, false
	}
	state, rev := sessionNew, uint64(0)
	if s != nil {
		state, rev = string(s.State), s.Revision
	}
	w.Header().Set(semaq.HdrHTTPSessionState, state)
	w.Header().Set(semaq.HdrHTTPSessionRevision, strconv.FormatUint(rev, 10))
	if s != nil && s.State == semaq.SessionDegraded {
		switch g.o.DegradedPolicy {
		case DegradedRefuse:
			e := &openai.Error{Message: fmt.Sprintf("The session `%s` is degraded (%s): its history may no longer hold. "+
				"Write to the session (or delete it) to make it active again.", ref.ID, orUnknown(s.Reason)),
				Type: openai.TypeInvalidRequest, Param: openai.Str(semaq.HdrHTTPSession), Code: openai.Str("session_degraded")}
			writeJSON(w, http.StatusConflict, openai.ErrorBody{Error: e})
			return nil, nil, 0, false
		case DegradedWarn:
			w.Header().Set(semaq.HdrHTTPSessionWarning, headerSafe("session "+ref.ID+" is degraded: "+orUnknown(s.Reason), maxWarning))
		}
	}
	t = &turn{g: g, c: c, ref: ref}
	t.own, t.ownTokens = ownMessages(req)
	hist, historyTokens := history(s, budget)
	if len(hist) == 0 {
		return t, body, 0, true
	}
	out, err = withHistory(body, hist)
	if err != nil {
		// The body was parsed already; this cannot be the client's.
		writeError(w, http.StatusInternalServerError, openai.TypeServer, "", "putting the session's history in the request: "+err.Error())
		return nil, nil, 0, false
	}
	return t, out, historyTokens, true
}

// history is what the model reads before a request's own messages: the
// session's summary (its data's string field "summary"), then its newest
// rounds, oldest first, as many as fit budget tokens with the summary; a
// summary that alone is over the budget is left out. Messages whose role
// a replay cannot carry (tool results lack their call ids) are skipped.
// It returns the messages and their tokens.
func history(s *semaq.Session, budget int) ([]semaq.SessionMessage, int) {
	if s == nil {
		return nil, 0
	}
	var out []semaq.SessionMessage
	used := 0
	if sum := summaryOf(s.Data); sum != "" {
		m := semaq.SessionMessage{Role: "system", Content: summaryPrefix + sum}
		if n := messageTokens([]semaq.SessionMessage{m}); n <= budget {
			out, used = append(out, m), n
		}
	}
	// Newest first, then put in order.
	var rounds [][]semaq.SessionMessage
	for i := len(s.Rounds) - 1; i >= 0; i-- {
		msgs := slices.DeleteFunc(slices.Clone(s.Rounds[i].Messages), func(m semaq.SessionMessage) bool { return !replayable(m.Role) })
		n := messageTokens(msgs)
		if used+n > budget {
			break
		}
		rounds, used = append(rounds, msgs), used+n
	}
	for i := len(rounds) - 1; i >= 0; i-- {
		out = append(out, rounds[i]...)
	}
	return out, used
}

// summaryOf is a session data's string field "summary", "" if none.
func summaryOf(data json.RawMessage) string {
	var d struct {
		Summary json.RawMessage `json:"summary"`
	}
	var sum string
	if json.Unmarshal(data, &d) != nil || json.Unmarshal(d.Summary, &sum) != nil {
		return ""
	}
	return sum
}

// replayable reports whether a kept message of role can be sent to a
// model again: tool and function results cannot, without the call ids a
// round does not keep.
func replayable(role string) bool {
	switch role {
	case "system", "developer", "user", "assistant":
		return true
	}
	return false
}

// messageTokens estimates messages' tokens as estimateTokens does a
// request's: about CharsPerToken bytes a token, rounded up, each message
// counting its role, its content as a JSON string and a few bytes more.
func messageTokens(msgs []semaq.SessionMessage) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Role) + len(m.Content) + 6
	}
	return (n + semaq.CharsPerToken - 1) / semaq.CharsPerToken
}

// ownMessages are a request's messages as a round keeps them: the text
// of those a replay can carry (replayable), with their tokens.
func ownMessages(req *openai.ChatRequest) ([]semaq.SessionMessage, int) {
	var out []semaq.SessionMessage
	for i := range req.Messages {
		m := &req.Messages[i]
		if text := m.Text(); text != "" && replayable(m.Role) {
			out = append(out, semaq.SessionMessage{Role: m.Role, Content: text})
		}
	}
	return out, messageTokens(out)
}

// withHistory returns body with hist before its messages. Only
// "messages" changes: every other field keeps the value the client sent,
// and the request's own messages are kept as they came (names, tool
// calls, content parts).
func withHistory(body []byte, hist []semaq.SessionMessage) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, err
	}
	var own []json.RawMessage
	if err := json.Unmarshal(fields["messages"], &own); err != nil {
		return nil, err
	}
	msgs := make([]any, 0, len(hist)+len(own))
	for _, m := range hist {
		msgs = append(msgs, m)
	}
	for _, m := range own {
		msgs = append(msgs, m)
	}
	b, err := marshal(msgs)
	if err != nil {
		return nil, err
	}
	fields["messages"] = b
	return marshal(fields)
}

// marshal is json.Marshal without HTML escapes: text goes to the model
// as the client wrote it.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// add takes a piece of the answer: its text and the tokens it counts.
func (t *turn) add(text string, tokens int) {
	if t == nil || t.tooLarge {
		return
	}
	if t.text.Len()+len(text) > semaq.MaxSessionBytes {
		// No session could keep it; do not hold it either.
		t.tooLarge = true
		t.text.Reset()
		return
	}
	t.text.WriteString(text)
	t.tokens += tokens
}

// answered keeps the turn as the session's next round, when the answer
// ended well (fin), before the client sees the end: whichever node a
// client's next turn reaches, it reads the session with this answer in
// it. It waits for the broker (up to roundTimeout, even if the client
// leaves meanwhile: the model answered). A failure is logged and
// counted; the answer stands.
func (t *turn) answered(ctx context.Context, fin semaq.TokenFinal) {
	if t == nil || fin.FinishReason == "error" {
		return
	}
	g, ref := t.g, t.ref
	if t.tooLarge {
		g.o.Metrics.GatewaySessionRound(false)
		g.log.Warn("an answer too large for its session was not kept", "session", ref.ID, "tenant", ref.Tenant, "max_bytes", semaq.MaxSessionBytes)
		return
	}
	msgs := t.own
	if text := t.text.String(); text != "" {
		msgs = append(msgs[:len(msgs):len(msgs)], semaq.SessionMessage{Role: "assistant", Content: text})
	}
	if len(msgs) == 0 {
		return // nothing a round could carry (tool calls and results only)
	}
	// The round's size is its own messages and the answer: the model's
	// prompt count would include the history again.
	completion := t.tokens
	if fin.Usage != nil && fin.Usage.Completion > 0 {
		completion = fin.Usage.Completion
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), roundTimeout)
	defer cancel()
	_, err := t.c.AddRound(ctx, semaq.SessionRoundAddRequest{SessionRef: ref, Messages: msgs, Tokens: t.ownTokens + completion, Create: true})
	g.o.Metrics.GatewaySessionRound(err == nil)
	if err != nil {
		g.log.Warn("keeping an answer in its session", "session", ref.ID, "tenant", ref.Tenant, "err", err)
	}
}

// orUnknown is reason, or a word for none.
func orUnknown(reason string) string {
	if reason == "" {
		return "no reason given"
	}
	return reason
}

// headerSafe makes s a header value: control bytes become spaces, and it
// is cut at max bytes.
func headerSafe(s string, max int) string {
	if len(s) > max {
		s = s[:max]
	}
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
}
