package gateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/semaq"
)

// round is a round of a user message and an answer, each of n bytes.
func round(n int, user, answer string) semaq.SessionRound {
	pad := func(s string) string { return s + strings.Repeat(".", n-len(s)) }
	return semaq.SessionRound{Messages: []semaq.SessionMessage{{Role: "user", Content: pad(user)}, {Role: "assistant", Content: pad(answer)}}}
}

// The history is the summary, then the newest rounds that fit the budget
// with it, oldest first.
func TestHistory(t *testing.T) {
	// Each round: (4+96+6 + 9+96+6) = 217 bytes, 55 tokens.
	rounds := []semaq.SessionRound{round(96, "u1", "a1"), round(96, "u2", "a2"), round(96, "u3", "a3")}
	const summary = `{"summary":"Ada likes tea."}` // 6+45+6 = 57 bytes, 15 tokens
	toolRound := semaq.SessionRound{Messages: []semaq.SessionMessage{{Role: "tool", Content: "42"}, {Role: "user", Content: "ok"}}}
	cases := []struct {
		name   string
		s      *semaq.Session
		budget int
		want   []string // the contents' first two bytes
		tokens int
	}{
		{"no session", nil, 4096, nil, 0},
		{"all fit", &semaq.Session{Rounds: rounds}, 4096, []string{"u1", "a1", "u2", "a2", "u3", "a3"}, 165},
		{"oldest dropped", &semaq.Session{Rounds: rounds}, 110, []string{"u2", "a2", "u3", "a3"}, 110},
		{"none fits", &semaq.Session{Rounds: rounds}, 54, nil, 0},
		{"summary first", &semaq.Session{Data: json.RawMessage(summary), Rounds: rounds}, 4096, []string{"Co", "u1", "a1", "u2", "a2", "u3", "a3"}, 180},
		{"summary counts", &semaq.Session{Data: json.RawMessage(summary), Rounds: rounds}, 125, []string{"Co", "u2", "a2", "u3", "a3"}, 125},
		{"summary counts, one short", &semaq.Session{Data: json.RawMessage(summary), Rounds: rounds}, 124, []string{"Co", "u3", "a3"}, 70},
		{"summary over the budget", &semaq.Session{Data: json.RawMessage(summary), Rounds: rounds}, 14, nil, 0},
		{"summary not a string", &semaq.Session{Data: json.RawMessage(`{"summary":{"a":1}}`), Rounds: rounds[2:]}, 4096, []string{"u3", "a3"}, 55},
		{"a round too big stops older ones", &semaq.Session{Rounds: []semaq.SessionRound{rounds[0], round(4000, "big", "big"), rounds[2]}}, 200, []string{"u3", "a3"}, 55},
		{"tool results skipped", &semaq.Session{Rounds: []semaq.SessionRound{toolRound}}, 4096, []string{"ok"}, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			msgs, tokens := history(tc.s, tc.budget)
			var got []string
			for _, m := range msgs {
				got = append(got, m.Content[:2])
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") || tokens != tc.tokens {
				t.Fatalf("history %v (%d tokens), want %v (%d)", got, tokens, tc.want, tc.tokens)
			}
			if len(msgs) > 0 && msgs[0].Content[:2] == "Co" && (msgs[0].Role != "system" || msgs[0].Content != summaryPrefix+"Ada likes tea.") {
				t.Fatalf("summary message %+v", msgs[0])
			}
			if tokens > tc.budget {
				t.Fatalf("%d tokens over the budget %d", tokens, tc.budget)
			}
		})
	}
}

// Only the messages change: the other fields, and the request's own
// messages, go to the model as the client sent them.
func TestWithHistoryKeepsTheRest(t *testing.T) {
	body := `{"model":"m","temperature":0.2,"tools":[{"type":"function","function":{"name":"f"}}],"x-custom":{"a":[1,2]},` +
		`"messages":[{"role":"user","content":[{"type":"text","text":"a <b> & c"}],"name":"ada"}],"stream":true}`
	out, err := withHistory([]byte(body), []semaq.SessionMessage{{Role: "system", Content: "s <1>"}, {Role: "user", Content: "u"}})
	if err != nil {
		t.Fatal(err)
	}
	var got, sent map[string]json.RawMessage
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal([]byte(body), &sent)
	for k, v := range sent {
		if k != "messages" && string(got[k]) != string(v) {
			t.Errorf("%s: %s, sent %s", k, got[k], v)
		}
	}
	if len(got) != len(sent) {
		t.Errorf("fields %d, sent %d", len(got), len(sent))
	}
	want := `[{"role":"system","content":"s <1>"},{"role":"user","content":"u"},{"role":"user","content":[{"type":"text","text":"a <b> & c"}],"name":"ada"}]`
	if string(got["messages"]) != want {
		t.Errorf("messages\n %s\nwant\n %s", got["messages"], want)
	}
	req, err := openai.ParseChatRequest(out)
	if err != nil || len(req.Messages) != 3 || !req.Stream {
		t.Fatalf("the rewritten body does not parse as it should: %+v %v", req, err)
	}
}

// A round keeps the text of the messages a replay can carry.
func TestOwnMessages(t *testing.T) {
	req, err := openai.ParseChatRequest([]byte(`{"model":"m","messages":[{"role":"system","content":"be brief"},` +
		`{"role":"tool","content":"42","tool_call_id":"c1"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
		`{"role":"user","content":[{"type":"text","text":"one"},{"type":"text","text":"two"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	msgs, tokens := ownMessages(req)
	want := []semaq.SessionMessage{{Role: "system", Content: "be brief"}, {Role: "user", Content: "one\ntwo"}}
	if len(msgs) != len(want) || msgs[0] != want[0] || msgs[1] != want[1] {
		t.Fatalf("own messages %+v, want %+v", msgs, want)
	}
	// (6+8+6) + (4+7+6) = 37 bytes: 10 tokens.
	if tokens != 10 {
		t.Fatalf("tokens %d", tokens)
	}
}

// Options.Validate names what is out of range.
func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{}, ""},
		{Options{SessionBudget: 1, MaxSessionBudget: 10, DegradedPolicy: DegradedRefuse}, ""},
		{Options{SessionBudget: 11, MaxSessionBudget: 10}, "session budget 11"},
		{Options{SessionBudget: -1}, "session budget -1"},
		{Options{MaxSessionBudget: DefaultMaxSessionBudget + 1}, "maximum session budget"},
		{Options{DegradedPolicy: "ignore"}, `"ignore" is not one of proceed, warn, refuse`},
	} {
		err := tc.o.Validate()
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.o, err, tc.want)
		}
	}
}
