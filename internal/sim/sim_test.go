package sim

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/internal/worker/upstream"
)

func request(prompt string, max int) *openai.ChatRequest {
	r := &openai.ChatRequest{Model: "sim", Messages: []openai.Message{{Role: "user", Content: []byte(`"` + prompt + `"`)}}}
	if max > 0 {
		r.MaxTokens = &max
	}
	return r
}

func TestGenerateDeterministic(t *testing.T) {
	m, err := New(Config{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	collect := func(prompt string, max int) (string, upstream.Outcome) {
		var b strings.Builder
		out, err := m.Generate(context.Background(), request(prompt, max), func(p upstream.Piece) error {
			b.WriteString(p.Text)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return b.String(), out
	}
	a1, out := collect("hello there", 0)
	a2, _ := collect("hello there", 0)
	b1, _ := collect("hello where", 0)
	if a1 != a2 || a1 == b1 {
		t.Fatalf("answers not deterministic per prompt: %q %q %q", a1, a2, b1)
	}
	prompt := request("hello there", 0).Prompt()
	if !strings.HasPrefix(a1, FirstToken(prompt)) || a1 != Answer(prompt, 16, 7) {
		t.Fatalf("answer %q does not start with the checksum token %q or differs from Answer", a1, FirstToken(prompt))
	}
	if out.FinishReason != "stop" || out.Usage.Completion != 16 || out.Usage.Total != out.Usage.Prompt+16 {
		t.Fatalf("outcome %+v", out)
	}
	_, out = collect("x", 5)
	if out.FinishReason != "length" || out.Usage.Completion != 5 {
		t.Fatalf("max_tokens outcome %+v", out)
	}
}

func TestGeneratePacingAndCancel(t *testing.T) {
	m, _ := New(Config{TTFT: 30 * time.Millisecond, TokensPerSec: 200, Tokens: 5})
	start := time.Now()
	var first time.Duration
	_, err := m.Generate(context.Background(), request("p", 0), func(p upstream.Piece) error {
		if first == 0 {
			first = time.Since(start)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// 4 tokens after the first at 200/s is 20ms.
	if first < 30*time.Millisecond || time.Since(start) < 50*time.Millisecond {
		t.Fatalf("first token after %s, all after %s: pacing not applied", first, time.Since(start))
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, err = m.Generate(ctx, request("p", 1000), func(upstream.Piece) error {
		if n++; n == 2 {
			cancel()
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) || n != 2 {
		t.Fatalf("after cancel: err=%v tokens=%d", err, n)
	}
}

// The HTTP face works with the official OpenAI client, streamed and not.
func TestHandlerWithOpenAIClient(t *testing.T) {
	m, _ := New(Config{Tokens: 8})
	srv := httptest.NewServer(Handler(m, "sim-a", "sim-b"))
	t.Cleanup(srv.Close)
	c := oa.NewClient(option.WithBaseURL(srv.URL+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	params := oa.ChatCompletionNewParams{Model: "sim-a", Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage("hi")}}
	resp, err := c.Chat.Completions.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	want := Answer("user: hi", 8, 0)
	if resp.Choices[0].Message.Content != want || resp.Usage.CompletionTokens != 8 || resp.Choices[0].FinishReason != "stop" {
		t.Fatalf("non-streamed: %+v", resp)
	}

	params.StreamOptions = oa.ChatCompletionStreamOptionsParam{IncludeUsage: oa.Bool(true)}
	st := c.Chat.Completions.NewStreaming(ctx, params)
	acc := oa.ChatCompletionAccumulator{}
	for st.Next() {
		acc.AddChunk(st.Current())
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Choices[0].Message.Content != want || acc.Usage.TotalTokens != acc.Usage.PromptTokens+8 {
		t.Fatalf("streamed: %q usage %+v", acc.Choices[0].Message.Content, acc.Usage)
	}

	models, err := c.Models.List(ctx)
	if err != nil || len(models.Data) != 2 || models.Data[1].ID != "sim-b" {
		t.Fatalf("models: %+v %v", models, err)
	}
}
