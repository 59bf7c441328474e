package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/internal/sim"
	"github.com/semaq/semaq/internal/worker"
	"github.com/semaq/semaq/semaq"
)

// sessionHeader is a request's headers naming session id, with more
// header name-value pairs.
func sessionHeader(id string, kv ...string) http.Header {
	h := http.Header{}
	h.Set(semaq.HdrHTTPSession, id)
	for i := 0; i+1 < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

// turn sends one user message and returns the answer's text and headers;
// anything but a whole answer fails the test.
func (e *env) turn(t *testing.T, ctx context.Context, model, msg string, stream bool, hdr http.Header) (string, http.Header) {
	t.Helper()
	resp := e.post(t, ctx, chatBody(model, msg, stream, ""), hdr)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		raw, _ := io.ReadAll(resp.Body)
		t.Fatalf("%q: status %d: %s", msg, resp.StatusCode, raw)
	}
	if stream {
		s := readStream(t, resp.Body)
		if !s.done || s.err != nil {
			t.Fatalf("%q: stream done %v, error %+v", msg, s.done, s.err)
		}
		return s.text, resp.Header
	}
	var out openai.ChatCompletion
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Choices) != 1 || out.Choices[0].Message.Content == nil {
		t.Fatalf("%q: answer %+v: %v", msg, out, err)
	}
	return *out.Choices[0].Message.Content, resp.Header
}

// waitRounds returns ref's session once it holds n rounds: the gateway
// writes a round after its answer was sent.
func waitRounds(t *testing.T, ctx context.Context, c *client.Client, ref semaq.SessionRef, n int) *semaq.Session {
	t.Helper()
	for {
		s, err := c.GetSession(ctx, ref, -1)
		switch {
		case err == nil && len(s.Rounds) >= n:
			return s
		case err == nil:
			// Woken by the next change, or at the wait's end.
			_, err = c.SessionDeltas(ctx, semaq.SessionDeltasRequest{SessionRef: ref, After: s.Revision, Wait: 5 * time.Second})
		case errors.Is(err, semaq.ErrSessionNotFound):
			// Nothing to wait on before the session exists: poll.
			select {
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
			}
			err = nil
		}
		if ctx.Err() != nil {
			t.Fatalf("session %+v: %d rounds not reached: %v", ref, n, ctx.Err())
		}
		if err != nil {
			t.Fatalf("session %+v: %v", ref, err)
		}
	}
}

// conversation is the prompt the simulated model builds from messages
// (openai.ChatRequest.Prompt): "role: text" lines.
type conversation []string

func (c *conversation) add(role, text string) { *c = append(*c, role+": "+text) }
func (c conversation) prompt() string         { return strings.Join(c, "\n") }

// A stateless client (the official OpenAI client) names a session and
// sends each turn's new message only: the model sees the whole
// conversation each time, streamed turns and not, and the session holds
// one round per turn.
func TestSessionConversation(t *testing.T) {
	e := setup(t)
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"gpt-sim"}, Sim: sim.Config{Tokens: 12, Seed: 5}})
	c := oa.NewClient(option.WithBaseURL(e.base+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0),
		option.WithHeader(semaq.HdrHTTPSession, "s-42"), option.WithHeader(semaq.HdrHTTPTenant, "acme"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	turns := []struct {
		msg    string
		stream bool
	}{{"my name is Ada", false}, {"what is my name?", true}, {"spell it", false}, {"thanks", true}}
	var conv conversation
	var answers []string
	for i, turn := range turns {
		params := oa.ChatCompletionNewParams{Model: "gpt-sim", Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage(turn.msg)}}
		var resp *http.Response
		var got string
		if turn.stream {
			params.StreamOptions = oa.ChatCompletionStreamOptionsParam{IncludeUsage: oa.Bool(true)}
			st := c.Chat.Completions.NewStreaming(ctx, params, option.WithResponseInto(&resp))
			acc := oa.ChatCompletionAccumulator{}
			for st.Next() {
				acc.AddChunk(st.Current())
			}
			if err := st.Err(); err != nil {
				t.Fatalf("turn %d: %v", i+1, err)
			}
			got = acc.Choices[0].Message.Content
		} else {
			out, err := c.Chat.Completions.New(ctx, params, option.WithResponseInto(&resp))
			if err != nil {
				t.Fatalf("turn %d: %v", i+1, err)
			}
			got = out.Choices[0].Message.Content
		}
		conv.add("user", turn.msg)
		if want := sim.Answer(conv.prompt(), 12, 5); got != want {
			t.Fatalf("turn %d: answer %q, want %q: the model did not see the conversation\n%s", i+1, got, want, conv.prompt())
		}
		conv.add("assistant", got)
		answers = append(answers, got)
		state := string(semaq.SessionActive)
		if i == 0 {
			state = "new"
		}
		if resp.Header.Get(semaq.HdrHTTPSessionState) != state || resp.Header.Get(semaq.HdrHTTPSessionRevision) != strconv.Itoa(i) {
			t.Fatalf("turn %d: session state %q revision %q, want %s %d", i+1,
				resp.Header.Get(semaq.HdrHTTPSessionState), resp.Header.Get(semaq.HdrHTTPSessionRevision), state, i)
		}
	}

	s := waitRounds(t, ctx, e.c, semaq.SessionRef{ID: "s-42", Tenant: "acme"}, len(turns))
	if len(s.Rounds) != len(turns) || s.Revision != uint64(len(turns)) {
		t.Fatalf("session has %d rounds at revision %d, want %d", len(s.Rounds), s.Revision, len(turns))
	}
	for i, r := range s.Rounds {
		m := r.Messages
		if len(m) != 2 || m[0] != (semaq.SessionMessage{Role: "user", Content: turns[i].msg}) ||
			m[1] != (semaq.SessionMessage{Role: "assistant", Content: answers[i]}) {
			t.Fatalf("round %d: %+v", i+1, m)
		}
		// Its own size: the message's estimate and the answer's 12 tokens.
		if own := (len("user") + len(turns[i].msg) + 6 + 3) / 4; r.Tokens != own+12 {
			t.Fatalf("round %d: %d tokens, want %d", i+1, r.Tokens, own+12)
		}
	}
	scrape(t, e.base, fmt.Sprintf(`semaq_gateway_session_rounds_total{outcome="stored"} %d`, len(turns)))
}

// The history is the session's summary, then its newest rounds within
// the budget (X-SemaQ-Session-Budget, else the gateway's); a bad budget or
// session id is the client's mistake.
func TestSessionBudgetAndSummary(t *testing.T) {
	e := setup(t)
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"sim-b"}, Sim: sim.Config{Tokens: 8}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ref := semaq.SessionRef{ID: "s-budget"}
	if _, err := e.c.PutSession(ctx, semaq.SessionPutRequest{SessionRef: ref, Data: json.RawMessage(`{"summary":"Ada likes tea.","n":1}`)}); err != nil {
		t.Fatal(err)
	}
	// Rounds of 205 tokens each ((4+396+6 + 9+396+6) bytes / 4); the
	// summary's system message is 15.
	pad := func(s string) string { return s + strings.Repeat(".", 396-len(s)) }
	summary := "system: Conversation so far (summary): Ada likes tea."
	var rounds conversation
	for i := 1; i <= 3; i++ {
		q, a := pad(fmt.Sprintf("question %d", i)), pad(fmt.Sprintf("answer %d", i))
		if _, err := e.c.AddRound(ctx, semaq.SessionRoundAddRequest{SessionRef: ref,
			Messages: []semaq.SessionMessage{{Role: "user", Content: q}, {Role: "assistant", Content: a}}}); err != nil {
			t.Fatal(err)
		}
		rounds.add("user", q)
		rounds.add("assistant", a)
	}

	// 450 tokens: the summary and the two newest rounds (425).
	got, _ := e.turn(t, ctx, "sim-b", "and now?", false, sessionHeader("s-budget", semaq.HdrHTTPSessionBudget, "450"))
	want := conversation{summary}
	want = append(want, rounds[2:]...)
	want.add("user", "and now?")
	if got != sim.Answer(want.prompt(), 8, 0) {
		t.Fatalf("budget 450: the model did not see the summary and the last two rounds:\n%s", want.prompt())
	}
	rounds.add("user", "and now?")
	rounds.add("assistant", got)

	// 1 token: nothing fits, not even the summary.
	got, _ = e.turn(t, ctx, "sim-b", "alone?", true, sessionHeader("s-budget", semaq.HdrHTTPSessionBudget, "1"))
	if got != sim.Answer("user: alone?", 8, 0) {
		t.Fatal("budget 1: the model saw history")
	}
	rounds.add("user", "alone?")
	rounds.add("assistant", got)

	// The default, 4096: all of it, the turns through the gateway
	// included.
	got, h := e.turn(t, ctx, "sim-b", "all?", false, sessionHeader("s-budget"))
	want = conversation{summary}
	want = append(want, rounds...)
	want.add("user", "all?")
	if got != sim.Answer(want.prompt(), 8, 0) {
		t.Fatalf("default budget: the model did not see the whole conversation:\n%s", want.prompt())
	}
	if h.Get(semaq.HdrHTTPSessionRevision) != "6" { // put, three rounds, two turns
		t.Fatalf("revision %q, want 6", h.Get(semaq.HdrHTTPSessionRevision))
	}

	for _, tc := range []struct{ header, value string }{
		{semaq.HdrHTTPSessionBudget, "0"},
		{semaq.HdrHTTPSessionBudget, "-5"},
		{semaq.HdrHTTPSessionBudget, "many"},
		{semaq.HdrHTTPSessionBudget, "1e3"},
		{semaq.HdrHTTPSessionBudget, strconv.Itoa(semaq.MaxSessionBytes/semaq.CharsPerToken + 1)},
		{semaq.HdrHTTPSessionBudget, strings.Repeat("9", 4000)},
		{semaq.HdrHTTPSession, "a.b"},
		{semaq.HdrHTTPSession, "s/1"},
		{semaq.HdrHTTPSession, strings.Repeat("s", 129)},
	} {
		hdr := sessionHeader("s-budget")
		hdr.Set(tc.header, tc.value)
		resp := e.post(t, ctx, chatBody("sim-b", "x", false, ""), hdr)
		oe := errorOf(t, resp)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || oe.Param == nil || *oe.Param != tc.header || oe.Type != openai.TypeInvalidRequest {
			t.Fatalf("%s: %.20s: %d %+v, want 400 naming the header", tc.header, tc.value, resp.StatusCode, oe)
		}
	}
	if s := waitRounds(t, ctx, e.c, ref, 6); len(s.Rounds) != 6 {
		t.Fatalf("%d rounds, want 6: a refused request wrote one", len(s.Rounds))
	}
}

// A degraded session: proceed answers as usual, warn too and says why,
// refuse answers 409 session_degraded and asks no model. Every answer
// says the session's state.
func TestSessionDegradedPolicy(t *testing.T) {
	for _, policy := range []string{"proceed", "warn", "refuse"} {
		t.Run(policy, func(t *testing.T) {
			srv := brokertest.Start(t, func(c *broker.Config) { c.GatewayDegradedPolicy = policy })
			e := &env{srv: srv, base: "http://" + srv.HTTPAddr(), c: brokertest.Connect(t, srv)}
			e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"sim-d"}, Sim: sim.Config{Tokens: 5}})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ref := semaq.SessionRef{ID: "s-deg"}
			if _, err := e.c.AddRound(ctx, semaq.SessionRoundAddRequest{SessionRef: ref, Create: true,
				Messages: []semaq.SessionMessage{{Role: "user", Content: "hi"}, {Role: "assistant", Content: "hello"}}}); err != nil {
				t.Fatal(err)
			}
			var info *semaq.SessionInfo
			for range semaq.DefaultSessionLowStreak {
				var err error
				if info, err = e.c.ReportSession(ctx, ref, 0.1); err != nil {
					t.Fatal(err)
				}
			}
			if info.State != semaq.SessionDegraded || info.Reason == "" {
				t.Fatalf("after %d low reports: %+v", semaq.DefaultSessionLowStreak, info)
			}

			resp := e.post(t, ctx, chatBody("sim-d", "still there?", false, ""), sessionHeader("s-deg"))
			defer resp.Body.Close()
			if st := resp.Header.Get(semaq.HdrHTTPSessionState); st != string(semaq.SessionDegraded) {
				t.Fatalf("%s: %q", semaq.HdrHTTPSessionState, st)
			}
			warning := resp.Header.Get(semaq.HdrHTTPSessionWarning)
			if policy == "refuse" {
				oe := errorOf(t, resp)
				if resp.StatusCode != http.StatusConflict || oe.Code == nil || *oe.Code != "session_degraded" || !strings.Contains(oe.Message, info.Reason) {
					t.Fatalf("%d %+v, want 409 session_degraded naming %q", resp.StatusCode, oe, info.Reason)
				}
				q, err := e.c.QueueInfo(ctx, semaq.InferQueue("sim-d"))
				if err != nil || q.Status.Counters.Admitted != 0 {
					t.Fatalf("queue admitted %+v %v", q.Status.Counters, err)
				}
				s, err := e.c.GetSession(ctx, ref, -1)
				if err != nil || s.Revision != info.Revision || s.State != semaq.SessionDegraded {
					t.Fatalf("the refused request changed the session: %+v %v", s, err)
				}
				return
			}
			var out openai.ChatCompletion
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d: %v", resp.StatusCode, err)
			}
			if got, want := *out.Choices[0].Message.Content, sim.Answer("user: hi\nassistant: hello\nuser: still there?", 5, 0); got != want {
				t.Fatalf("answer %q, want %q (with the history)", got, want)
			}
			if (policy == "warn") != strings.Contains(warning, info.Reason) {
				t.Fatalf("%s %q with policy %s", semaq.HdrHTTPSessionWarning, warning, policy)
			}
			// The kept answer makes the session active again.
			if s := waitRounds(t, ctx, e.c, ref, 2); s.State != semaq.SessionActive {
				t.Fatalf("after a new round the session is %s", s.State)
			}
		})
	}
}

// With a key map, a session is its key's tenant's: another tenant naming
// the same session id neither reads nor writes it, even when it asks for
// the first tenant by header.
func TestSessionTenantsApart(t *testing.T) {
	srv := brokertest.Start(t, func(c *broker.Config) { c.GatewayAPIKeys = map[string]string{"key-a": "acme", "key-b": "globex"} })
	e := &env{srv: srv, base: "http://" + srv.HTTPAddr(), c: brokertest.Connect(t, srv)}
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"sim-t"}, Sim: sim.Config{Tokens: 6}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	acme, globex := semaq.SessionRef{ID: "s-42", Tenant: "acme"}, semaq.SessionRef{ID: "s-42", Tenant: "globex"}
	a := sessionHeader("s-42", "Authorization", "Bearer key-a")
	b := sessionHeader("s-42", "Authorization", "Bearer key-b", semaq.HdrHTTPTenant, "acme")

	a1, _ := e.turn(t, ctx, "sim-t", "acme's secret", false, a)
	waitRounds(t, ctx, e.c, acme, 1)
	b1, h := e.turn(t, ctx, "sim-t", "who else is here?", true, b)
	if b1 != sim.Answer("user: who else is here?", 6, 0) || h.Get(semaq.HdrHTTPSessionState) != "new" || h.Get(semaq.HdrHTTPSessionRevision) != "0" {
		t.Fatalf("globex read acme's session: answer %q, state %q", b1, h.Get(semaq.HdrHTTPSessionState))
	}
	a2, _ := e.turn(t, ctx, "sim-t", "and mine?", false, a)
	if a2 != sim.Answer("user: acme's secret\nassistant: "+a1+"\nuser: and mine?", 6, 0) {
		t.Fatal("acme's second turn did not see its first alone")
	}
	if s := waitRounds(t, ctx, e.c, acme, 2); len(s.Rounds) != 2 || s.Rounds[1].Messages[0].Content != "and mine?" {
		t.Fatalf("acme's session: %+v", s.Rounds)
	}
	if s := waitRounds(t, ctx, e.c, globex, 1); len(s.Rounds) != 1 || s.Rounds[0].Messages[0].Content != "who else is here?" {
		t.Fatalf("globex's session: %+v", s.Rounds)
	}
}

// With --auth the session is read and written with the key's rights, in
// its user's tenant.
func TestSessionWithAuth(t *testing.T) {
	srv := brokertest.Start(t, brokertest.WithAuth)
	adminKey := brokertest.AdminKey(t, srv)
	e := &env{srv: srv, base: "http://" + srv.HTTPAddr(), c: brokertest.ConnectKey(t, srv, adminKey)}
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"sim-auth"}, Sim: sim.Config{Tokens: 6}}, client.WithKey(adminKey))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := func(tenant string) http.Header {
		k := e.addUser(t, semaq.UserAddRequest{Name: tenant + "-app", Tenant: tenant, Role: semaq.RoleService, Subjects: []string{"ai.infer.>"}})
		return sessionHeader("s-1", "Authorization", "Bearer "+k, semaq.HdrHTTPTenant, "acme")
	}
	acme, globex := key("acme"), key("globex")

	a1, _ := e.turn(t, ctx, "sim-auth", "acme one", false, acme)
	waitRounds(t, ctx, e.c, semaq.SessionRef{ID: "s-1", Tenant: "acme"}, 1)
	if g1, h := e.turn(t, ctx, "sim-auth", "globex one", true, globex); g1 != sim.Answer("user: globex one", 6, 0) || h.Get(semaq.HdrHTTPSessionState) != "new" {
		t.Fatalf("globex read acme's session: %q", g1)
	}
	if a2, _ := e.turn(t, ctx, "sim-auth", "acme two", true, acme); a2 != sim.Answer("user: acme one\nassistant: "+a1+"\nuser: acme two", 6, 0) {
		t.Fatal("acme's second turn did not see its first alone")
	}
	waitRounds(t, ctx, e.c, semaq.SessionRef{ID: "s-1", Tenant: "acme"}, 2)
	if s := waitRounds(t, ctx, e.c, semaq.SessionRef{ID: "s-1", Tenant: "globex"}, 1); len(s.Rounds) != 1 {
		t.Fatalf("globex's session: %+v", s.Rounds)
	}
}

// A request that fails or whose client leaves keeps nothing: the next
// turn starts the conversation.
func TestSessionFailedTurnKeepsNothing(t *testing.T) {
	e := setup(t)
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"slow"}, Sim: sim.Config{TTFT: 3 * time.Second}})
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"fast"}, Sim: sim.Config{Tokens: 6}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, stream := range []bool{false, true} {
		resp := e.post(t, ctx, chatBody("slow", "timed out", stream, ""), sessionHeader("s-f", semaq.HdrHTTPTimeout, "300ms"))
		resp.Body.Close()
		if resp.StatusCode != http.StatusGatewayTimeout {
			t.Fatalf("stream %v: status %d, want 504", stream, resp.StatusCode)
		}
	}
	// The client leaves before the answer.
	leave, stop := context.WithTimeout(ctx, 300*time.Millisecond)
	req, _ := http.NewRequestWithContext(leave, http.MethodPost, e.base+"/v1/chat/completions", strings.NewReader(string(chatBody("slow", "left", true, ""))))
	req.Header = sessionHeader("s-f")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("status %d before the answer could start", resp.StatusCode)
	}
	stop()

	got, h := e.turn(t, ctx, "fast", "second", false, sessionHeader("s-f"))
	if got != sim.Answer("user: second", 6, 0) || h.Get(semaq.HdrHTTPSessionRevision) != "0" {
		t.Fatalf("the next turn saw history: %q, revision %q", got, h.Get(semaq.HdrHTTPSessionRevision))
	}
	if s := waitRounds(t, ctx, e.c, semaq.SessionRef{ID: "s-f"}, 1); len(s.Rounds) != 1 || s.Rounds[0].Messages[0].Content != "second" {
		t.Fatalf("rounds %+v", s.Rounds)
	}
}

// A round the session cannot take (past its size bound) is logged and
// counted; the answer, already sent, stands.
func TestSessionRoundRefusedAnswerStands(t *testing.T) {
	e := setup(t)
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"sim-r"}, Sim: sim.Config{Tokens: 4}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ref := semaq.SessionRef{ID: "s-full"}
	fill := fmt.Sprintf(`{"fill":%q}`, strings.Repeat("x", semaq.MaxSessionBytes-64<<10))
	if _, err := e.c.PutSession(ctx, semaq.SessionPutRequest{SessionRef: ref, Data: json.RawMessage(fill)}); err != nil {
		t.Fatal(err)
	}
	msg := strings.Repeat("y", 100<<10)
	got, h := e.turn(t, ctx, "sim-r", msg, true, sessionHeader("s-full"))
	if got != sim.Answer("user: "+msg, 4, 0) || h.Get(semaq.HdrHTTPSessionRevision) != "1" {
		t.Fatalf("answer %.40q, revision %q", got, h.Get(semaq.HdrHTTPSessionRevision))
	}
	scrape(t, e.base, `semaq_gateway_session_rounds_total{outcome="failed"} 1`)
	if s, err := e.c.GetSession(ctx, ref, -1); err != nil || len(s.Rounds) != 0 || s.Revision != 1 {
		t.Fatalf("session %+v %v", s, err)
	}
}

// A history that makes the request larger than the broker's message
// limit is refused with 413 naming the budget that lets less through.
func TestSessionHistoryTooLarge(t *testing.T) {
	srv := brokertest.Start(t, func(c *broker.Config) { c.MaxPayload = 32 << 10 })
	e := &env{srv: srv, base: "http://" + srv.HTTPAddr(), c: brokertest.Connect(t, srv)}
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"sim-l"}, Sim: sim.Config{Tokens: 4}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ref := semaq.SessionRef{ID: "s-large"}
	// Two rounds of 12 KiB (3,076 tokens each): 24 KiB of history, which
	// with a 10 KiB message is over the limit.
	question, msg := strings.Repeat("q", 12<<10), strings.Repeat("m", 10<<10)
	for range 2 {
		if _, err := e.c.AddRound(ctx, semaq.SessionRoundAddRequest{SessionRef: ref, Create: true,
			Messages: []semaq.SessionMessage{{Role: "user", Content: question}}}); err != nil {
			t.Fatal(err)
		}
	}
	resp := e.post(t, ctx, chatBody("sim-l", msg, false, ""), sessionHeader("s-large", semaq.HdrHTTPSessionBudget, "131072"))
	oe := errorOf(t, resp)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(oe.Message, semaq.HdrHTTPSessionBudget) {
		t.Fatalf("%d %+v, want 413 naming %s", resp.StatusCode, oe, semaq.HdrHTTPSessionBudget)
	}
	// The default budget, 4096 tokens, takes the newest round only.
	if got, _ := e.turn(t, ctx, "sim-l", msg, false, sessionHeader("s-large")); got != sim.Answer("user: "+question+"\nuser: "+msg, 4, 0) {
		t.Fatalf("answer %q", got)
	}
}
