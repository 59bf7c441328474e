package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/semaq"
)

// keepalive is how often an idle response stream gets a comment line, so
// proxies keep it open while a model thinks.
const keepalive = 15 * time.Second

// stream answers a request with stream true: chat.completion.chunk events
// ending with data: [DONE]. The status line waits for the first token, so
// a request that fails before it (deadline, upstream error, lost worker)
// gets a proper error status; later failures are an error event, as
// OpenAI sends them. It reports whether the request ran to its end.
func (g *Gateway) stream(ctx context.Context, w http.ResponseWriter, req *openai.ChatRequest, id string, rd *client.TokenReader) bool {
	flusher, _ := w.(http.Flusher)
	created := time.Now().Unix()
	started := false
	var buf []byte
	send := func(c *openai.ChatCompletionChunk) error {
		c.ID, c.Object, c.Created, c.Model = id, "chat.completion.chunk", created, req.Model
		b, err := json.Marshal(c)
		if err != nil {
			return err
		}
		buf = append(append(append(buf[:0], "data: "...), b...), '\n', '\n')
		_, err = w.Write(buf)
		return err
	}
	start := func() {
		if started {
			return
		}
		started = true
		h := w.Header()
		h.Set("Content-Type", "text/event-stream")
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
	}
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	role := "assistant"
	for {
		wait, stopWait := context.WithTimeout(ctx, keepalive)
		c, err := rd.Next(wait)
		stopWait()
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			if started {
				if _, err := io.WriteString(w, ": keepalive\n\n"); err != nil {
					return false
				}
				flush()
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
			if !started {
				writeJSON(w, status, openai.ErrorBody{Error: oe})
				return terminal
			}
			b, _ := json.Marshal(openai.ErrorBody{Error: oe})
			_, _ = w.Write(append(append([]byte("data: "), b...), '\n', '\n'))
			flush()
			return terminal
		}
		start()
		if c.Final != nil {
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
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
			flush()
			return true
		}
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
			d.Content = openai.Str(c.Text)
		}
		if err := send(&openai.ChatCompletionChunk{Choices: []openai.ChunkChoice{{Delta: d}}}); err != nil {
			return false // the client left
		}
		flush()
	}
}
