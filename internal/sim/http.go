package sim

import (
	"encoding/json"
	"io"
	"net/http"
	"time"

	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/internal/sse"
	"github.com/semaq/semaq/internal/worker/upstream"
)

// Handler serves the model as an OpenAI-compatible API:
// POST /v1/chat/completions (streamed or not) and GET /v1/models, which
// lists models. Any model name is answered.
func Handler(m *Model, models ...string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		list := openai.ModelList{Object: "list", Data: []openai.Model{}}
		for _, id := range models {
			list.Data = append(list.Data, openai.Model{ID: id, Object: "model", Created: 0, OwnedBy: "semaq-sim"})
		}
		writeJSON(w, http.StatusOK, list)
	})
	mux.HandleFunc("POST /v1/chat/completions", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, openai.MaxRequestBytes))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, openai.ErrorBody{Error: &openai.Error{Message: err.Error(), Type: openai.TypeInvalidRequest}})
			return
		}
		req, err := openai.ParseChatRequest(body)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, openai.ErrorBody{Error: err.(*openai.Error)})
			return
		}
		id := "chatcmpl-sim-" + Checksum(string(body))
		if req.Stream {
			serveStream(w, r, m, req, id)
			return
		}
		var (
			text  []byte
			calls []openai.ToolCall
		)
		out, err := m.Generate(r.Context(), req, func(p upstream.Piece) error {
			if p.Func == nil {
				text = append(text, p.Text...)
				return nil
			}
			if p.Func.Name != "" {
				calls = append(calls, openai.ToolCall{ID: p.Func.ID, Type: "function", Function: openai.FunctionCall{Name: p.Func.Name}})
			}
			if len(calls) > 0 {
				calls[len(calls)-1].Function.Arguments += p.Func.Arguments
			}
			return nil
		})
		if err != nil {
			return // the client left
		}
		msg := openai.ResponseMessage{Role: "assistant", ToolCalls: calls}
		if calls == nil {
			msg.Content = openai.Str(string(text))
		}
		writeJSON(w, http.StatusOK, openai.ChatCompletion{
			ID: id, Object: "chat.completion", Created: time.Now().Unix(), Model: req.Model,
			Choices: []openai.Choice{{Index: 0, Message: msg, FinishReason: out.FinishReason}},
			Usage:   &openai.Usage{PromptTokens: out.Usage.Prompt, CompletionTokens: out.Usage.Completion, TotalTokens: out.Usage.Total},
		})
	})
	return mux
}

func serveStream(w http.ResponseWriter, r *http.Request, m *Model, req *openai.ChatRequest, id string) {
	flusher, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	created := time.Now().Unix()
	var buf []byte
	send := func(c openai.ChatCompletionChunk) error {
		c.ID, c.Object, c.Created, c.Model = id, "chat.completion.chunk", created, req.Model
		b, _ := json.Marshal(c)
		buf = sse.AppendEvent(buf[:0], sse.Event{Data: string(b)})
		if _, err := w.Write(buf); err != nil {
			return err
		}
		if flusher != nil {
			flusher.Flush()
		}
		return nil
	}
	first := true
	out, err := m.Generate(r.Context(), req, func(p upstream.Piece) error {
		d := openai.Delta{}
		if first {
			d.Role, first = "assistant", false
		}
		if p.Func != nil {
			d.ToolCalls = []openai.ToolCallDelta{{Index: p.Func.Index, ID: p.Func.ID,
				Function: openai.FunctionCallDelta{Name: p.Func.Name, Arguments: p.Func.Arguments}}}
			if p.Func.Name != "" {
				d.ToolCalls[0].Type = "function"
			}
		} else {
			d.Content = openai.Str(p.Text)
		}
		return send(openai.ChatCompletionChunk{Choices: []openai.ChunkChoice{{Delta: d}}})
	})
	if err != nil {
		return
	}
	if send(openai.ChatCompletionChunk{Choices: []openai.ChunkChoice{{Delta: openai.Delta{}, FinishReason: openai.Str(out.FinishReason)}}}) != nil {
		return
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		u := &openai.Usage{PromptTokens: out.Usage.Prompt, CompletionTokens: out.Usage.Completion, TotalTokens: out.Usage.Total}
		if send(openai.ChatCompletionChunk{Choices: []openai.ChunkChoice{}, Usage: u}) != nil {
			return
		}
	}
	_, _ = w.Write([]byte("data: [DONE]\n\n"))
	if flusher != nil {
		flusher.Flush()
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
