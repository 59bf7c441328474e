package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/internal/sse"
	"github.com/semaq/semaq/internal/worker"
	"github.com/semaq/semaq/semaq"
)

// echoUpstream is an OpenAI-compatible server that answers "echo: " and
// the last message's text, streamed in pieces of three bytes (so a
// placeholder is split across chunks), and keeps the prompts it got.
type echoUpstream struct {
	srv     *httptest.Server
	mu      sync.Mutex
	prompts []string
}

func newEchoUpstream(t *testing.T, model string) *echoUpstream {
	t.Helper()
	up := &echoUpstream{}
	up.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			b, _ := json.Marshal(openai.ModelList{Object: "list", Data: []openai.Model{{ID: model, Object: "model"}}})
			_, _ = w.Write(b)
			return
		}
		body, _ := io.ReadAll(r.Body)
		req, err := openai.ParseChatRequest(body)
		if err != nil || len(req.Messages) == 0 {
			http.Error(w, `{"error":{"message":"bad request","type":"invalid_request_error"}}`, http.StatusBadRequest)
			return
		}
		prompt := req.Messages[len(req.Messages)-1].Text()
		up.mu.Lock()
		up.prompts = append(up.prompts, prompt)
		up.mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		send := func(c openai.ChatCompletionChunk) {
			c.ID, c.Object, c.Model = "chatcmpl-echo", "chat.completion.chunk", req.Model
			b, _ := json.Marshal(c)
			_, _ = w.Write(sse.AppendEvent(nil, sse.Event{Data: string(b)}))
			w.(http.Flusher).Flush()
		}
		answer := "echo: " + prompt
		for i := 0; i < len(answer); i += 3 {
			send(openai.ChatCompletionChunk{Choices: []openai.ChunkChoice{{Delta: openai.Delta{Content: openai.Str(answer[i:min(i+3, len(answer))])}}}})
		}
		send(openai.ChatCompletionChunk{Choices: []openai.ChunkChoice{{FinishReason: openai.Str("stop")}}})
		n := (len(answer) + 2) / 3
		send(openai.ChatCompletionChunk{Choices: []openai.ChunkChoice{}, Usage: &openai.Usage{PromptTokens: 1, CompletionTokens: n, TotalTokens: n + 1}})
		_, _ = w.Write([]byte("data: [DONE]\n\n"))
	}))
	t.Cleanup(up.srv.Close)
	return up
}

func (up *echoUpstream) last() string {
	up.mu.Lock()
	defer up.mu.Unlock()
	if len(up.prompts) == 0 {
		return ""
	}
	return up.prompts[len(up.prompts)-1]
}

// addPolicy adds a rule through the management API.
func (e *env) addPolicy(t *testing.T, ctx context.Context, r semaq.PolicyRule) {
	t.Helper()
	body, _ := json.Marshal(semaq.PolicyAddRequest{PolicyRule: r})
	m, err := e.c.Conn().RequestWithContext(ctx, semaq.APIPolicyAdd, body)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(m.Data), `"error"`) {
		t.Fatalf("add policy %s: %s", r.Name, m.Data)
	}
}

// chatAs asks the gateway as tenant and returns the answer's text and
// finish reason, streamed or not.
func (e *env) chatAs(t *testing.T, ctx context.Context, tenant, model, prompt string, stream bool) (text, finish string) {
	t.Helper()
	resp := e.post(t, ctx, chatBody(model, prompt, stream, ""), http.Header{semaq.HdrHTTPTenant: {tenant}})
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if stream {
		s := readStream(t, resp.Body)
		if s.err != nil || !s.done {
			t.Fatalf("stream: error %+v, done %v", s.err, s.done)
		}
		return s.text, s.finish
	}
	var out openai.ChatCompletion
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || len(out.Choices) != 1 || out.Choices[0].Message.Content == nil {
		t.Fatalf("answer %+v: %v", out, err)
	}
	return *out.Choices[0].Message.Content, out.Choices[0].FinishReason
}

// A prompt's address reaches the worker as a placeholder and comes back
// to the tenant that sent it as the address; another tenant's answer
// keeps a placeholder it wrote itself. A token-stream stop rule ends the
// answer with finish reason content_filter.
func TestPolicyAtTheOpenAIDoor(t *testing.T) {
	e := setup(t)
	up := newEchoUpstream(t, "echo")
	e.startWorker(t, worker.Config{Upstream: up.srv.URL + "/v1", Models: []string{"echo"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e.addPolicy(t, ctx, semaq.PolicyRule{Name: "prompt-pii", Subjects: []string{semaq.InferSubjectPrefix + ">"},
		Redact: []string{semaq.PIIEmail}, Action: semaq.PIITokenize})
	e.addPolicy(t, ctx, semaq.PolicyRule{Name: "no-fruit", Streams: []string{semaq.PolicyStreamTokens},
		Words: []string{"forbidden fruit"}, OnMatch: semaq.ContentStop})

	for _, stream := range []bool{false, true} {
		name := map[bool]string{false: "whole", true: "streamed"}[stream]
		t.Run(name, func(t *testing.T) {
			text, finish := e.chatAs(t, ctx, "acme", "echo", "write to ann@example.com today", stream)
			if p := up.last(); p != "write to <EMAIL_1> today" {
				t.Fatalf("the worker got %q", p)
			}
			if text != "echo: write to ann@example.com today" || finish != "stop" {
				t.Fatalf("acme read %q (finish %q)", text, finish)
			}

			text, _ = e.chatAs(t, ctx, "globex", "echo", "what is <EMAIL_1>?", stream)
			if text != "echo: what is <EMAIL_1>?" {
				t.Fatalf("globex read %q", text)
			}

			text, finish = e.chatAs(t, ctx, "acme", "echo", "tell me of the forbidden fruit and more", stream)
			if finish != semaq.FinishContentFilter || strings.Contains(text, "fruit") || !strings.HasPrefix(text, "echo: tell me of the") {
				t.Fatalf("read %q (finish %q), want it stopped before the phrase with %s", text, finish, semaq.FinishContentFilter)
			}
		})
	}
}
