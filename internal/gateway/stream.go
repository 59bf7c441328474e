package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/internal/sse"
	"github.com/semaq/semaq/semaq"
)

// stream answers a request with stream true: chat.completion.chunk events
// ending with data: [DONE]. The status line waits for the first token, so
// a request that fails before it (deadline, upstream error, lost worker)
// gets a proper error status; later failures are an error event, as
// OpenAI sends them. It reports whether the request ran to its end. An
// answer sent to its [DONE] is kept in t's session.
func (g *Gateway) stream(ctx context.Context, w http.ResponseWriter, req *openai.ChatRequest, id string, rd *client.TokenReader, t *turn, rs *restorer) bool {
	// The status line waits for the first token: es starts with the
	// first write. No write deadline: the gateway bounds its own waits,
	// and the front door sets none on its paths.
	es := sse.NewStream(w, 0)
	created := time.Now().Unix()
	var buf []byte
	send := func(c *openai.ChatCompletionChunk) error {
		c.ID, c.Object, c.Created, c.Model = id, "chat.completion.chunk", created, req.Model
		b, err := json.Marshal(c)
		if err != nil {
			return err
		}
		buf = append(append(append(buf[:0], "data: "...), b...), '\n', '\n')
		return es.Write(buf)
	}
	role := "assistant"
	for {
		wait, stopWait := context.WithTimeout(ctx, sse.KeepAlive)
		c, err := rd.Next(wait)
		stopWait()
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			if es.Started() && es.KeepAlive() != nil {
				return false
			}
			continue
		}
		if err != nil {
			if clientLeft(ctx) {
				return false
			}
			status, oe := failure(ctx, err)
			_, terminal := errors.AsType[*semaq.TokenError](err)
			terminal = terminal || endCause(ctx) != nil
			if !es.Started() {
				writeJSON(w, status, openai.ErrorBody{Error: oe})
				return terminal
			}
			b, _ := json.Marshal(openai.ErrorBody{Error: oe})
			_ = es.Write(append(append([]byte("data: "), b...), '\n', '\n'))
			return terminal
		}
		es.Start()
		if c.Final != nil {
			// Kept before the client can see the end, so its next turn
			// reads the session with this answer in it.
			t.answered(ctx, *c.Final)
			if rest := rs.flush(ctx); rest != "" {
				if err := send(&openai.ChatCompletionChunk{Choices: []openai.ChunkChoice{{Delta: openai.Delta{Role: role, Content: openai.Str(rest)}}}}); err != nil {
					return true
				}
				role = ""
			}
			reason := c.Final.FinishReason
			if err := send(&openai.ChatCompletionChunk{Choices: []openai.ChunkChoice{{Delta: openai.Delta{Role: role}, FinishReason: &reason}}}); err != nil {
				return true
			}
			if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
				u := &openai.Usage{}
				if fu := c.Final.Usage; fu != nil {
					u = &openai.Usage{PromptTokens: fu.Prompt, CompletionTokens: fu.Completion, TotalTokens: fu.Total}
				}
				if err := send(&openai.ChatCompletionChunk{Choices: []openai.ChunkChoice{}, Usage: u}); err != nil {
					return true
				}
			}
			_ = es.Write([]byte("data: [DONE]\n\n"))
			return true
		}
		t.add(c.Text, c.N)
		d := openai.Delta{Role: role}
		role = ""
		if f := c.Func; f != nil {
			td := openai.ToolCallDelta{Index: f.Index, ID: f.ID, Function: openai.FunctionCallDelta{Name: f.Name, Arguments: f.Arguments}}
			if f.Name != "" || f.ID != "" {
				td.Type = "function"
			}
			d.ToolCalls = []openai.ToolCallDelta{td}
		}
		if c.Text != "" || c.Func == nil {
			d.Content = openai.Str(rs.chunk(ctx, c.Text))
		}
		if err := send(&openai.ChatCompletionChunk{Choices: []openai.ChunkChoice{{Delta: d}}}); err != nil {
			return false // the client left
		}
	}
}
