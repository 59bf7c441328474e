// Package openai holds the wire types of the OpenAI chat-completions API
// that SemaQ speaks: the gateway serves them, the worker adapter sends
// them to an upstream, the simulated model answers with them. Only the
// fields SemaQ reads or writes are typed; a request is forwarded to the
// upstream as it came, so fields not listed here still reach the model.
package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ChatRequest is the part of a chat-completions request SemaQ reads.
type ChatRequest struct {
	Model               string         `json:"model"`
	Messages            []Message      `json:"messages"`
	Stream              bool           `json:"stream,omitempty"`
	StreamOptions       *StreamOptions `json:"stream_options,omitempty"`
	MaxTokens           *int           `json:"max_tokens,omitempty"`
	MaxCompletionTokens *int           `json:"max_completion_tokens,omitempty"`
	N                   *int           `json:"n,omitempty"`
	User                string         `json:"user,omitempty"`
}

// StreamOptions of a streamed request.
type StreamOptions struct {
	IncludeUsage bool `json:"include_usage,omitempty"`
}

// Message is one chat message. Content is a string or an array of parts;
// Text flattens it.
type Message struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	Name       string          `json:"name,omitempty"`
	ToolCalls  []ToolCall      `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
}

// Text is the message's text: the string content, or the text parts of
// an array content joined by newlines.
func (m *Message) Text() string {
	c := bytes.TrimSpace(m.Content)
	if len(c) == 0 || c[0] == 'n' {
		return ""
	}
	if c[0] == '"' {
		var s string
		_ = json.Unmarshal(c, &s)
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(c, &parts) != nil {
		return ""
	}
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.Text)
	}
	return b.String()
}

// MaxRequestBytes bounds a request body the gateway reads.
const MaxRequestBytes = 8 << 20

// ParseChatRequest decodes and checks a request body: a JSON object with
// a model and at least one message whose roles and content are well
// formed, and nothing that readers of other languages would read
// differently (checkStrict: duplicate keys, case variants of the keys
// SemaQ reads, oversized numbers, deep nesting). The error names the
// offending field, in OpenAI's words.
func ParseChatRequest(body []byte) (*ChatRequest, error) {
	if e := checkStrict(body); e != nil && e != errSyntax {
		return nil, e
	} else if e == errSyntax && json.Valid(body) {
		return nil, &Error{Message: "We could not parse the JSON body of your request.", Type: TypeInvalidRequest}
	}
	var r ChatRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&r); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return nil, &Error{Message: fmt.Sprintf("Invalid type for '%s': expected %s.", te.Field, te.Type), Type: TypeInvalidRequest, Param: Str(te.Field)}
		}
		return nil, &Error{Message: "We could not parse the JSON body of your request: " + err.Error(), Type: TypeInvalidRequest}
	}
	if dec.More() {
		return nil, &Error{Message: "The request body has data after its JSON object.", Type: TypeInvalidRequest}
	}
	if r.Model == "" {
		return nil, &Error{Message: "you must provide a model parameter", Type: TypeInvalidRequest, Param: Str("model")}
	}
	if len(r.Messages) == 0 {
		return nil, &Error{Message: "'messages' must contain at least one message.", Type: TypeInvalidRequest, Param: Str("messages")}
	}
	for i, m := range r.Messages {
		switch m.Role {
		case "system", "developer", "user", "assistant", "tool", "function":
		default:
			return nil, &Error{Message: fmt.Sprintf("Invalid value for 'messages[%d].role': %q.", i, m.Role), Type: TypeInvalidRequest, Param: Str(fmt.Sprintf("messages[%d].role", i))}
		}
		if c := bytes.TrimSpace(m.Content); len(c) > 0 && c[0] != '"' && c[0] != '[' && c[0] != 'n' {
			return nil, &Error{Message: fmt.Sprintf("Invalid type for 'messages[%d].content': expected a string or an array of parts.", i), Type: TypeInvalidRequest, Param: Str(fmt.Sprintf("messages[%d].content", i))}
		}
	}
	if r.N != nil && *r.N != 1 {
		return nil, &Error{Message: "Only n=1 is supported.", Type: TypeInvalidRequest, Param: Str("n")}
	}
	for _, mt := range []*int{r.MaxTokens, r.MaxCompletionTokens} {
		if mt != nil && *mt < 1 {
			return nil, &Error{Message: "max_tokens must be at least 1.", Type: TypeInvalidRequest, Param: Str("max_tokens")}
		}
	}
	return &r, nil
}

// Limit is the completion token limit the request asks for, 0 when none.
func (r *ChatRequest) Limit() int {
	switch {
	case r.MaxCompletionTokens != nil:
		return *r.MaxCompletionTokens
	case r.MaxTokens != nil:
		return *r.MaxTokens
	}
	return 0
}

// Prompt is the text of every message, one per line: what a model would
// read, for estimates and the simulated model's checksum.
func (r *ChatRequest) Prompt() string {
	var b strings.Builder
	for i := range r.Messages {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(r.Messages[i].Role)
		b.WriteString(": ")
		b.WriteString(r.Messages[i].Text())
	}
	return b.String()
}

// ToolCall is a complete tool call of a response message.
type ToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function FunctionCall `json:"function"`
}

// FunctionCall names a function and its JSON arguments.
type FunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// ChatCompletion is a whole (non-streamed) response.
type ChatCompletion struct {
	ID                string   `json:"id"`
	Object            string   `json:"object"` // "chat.completion"
	Created           int64    `json:"created"`
	Model             string   `json:"model"`
	Choices           []Choice `json:"choices"`
	Usage             *Usage   `json:"usage,omitempty"`
	SystemFingerprint string   `json:"system_fingerprint,omitempty"`
}

// Choice is one answer of a response.
type Choice struct {
	Index        int             `json:"index"`
	Message      ResponseMessage `json:"message"`
	FinishReason string          `json:"finish_reason"`
	Logprobs     *struct{}       `json:"logprobs"`
}

// ResponseMessage is the assistant's message.
type ResponseMessage struct {
	Role      string     `json:"role"`
	Content   *string    `json:"content"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	Refusal   *string    `json:"refusal"`
}

// Usage counts tokens.
type Usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// ChatCompletionChunk is one event of a streamed response.
type ChatCompletionChunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"` // "chat.completion.chunk"
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	Choices           []ChunkChoice `json:"choices"`
	Usage             *Usage        `json:"usage"`
	SystemFingerprint string        `json:"system_fingerprint,omitempty"`
}

// ChunkChoice is one choice's delta in a chunk.
type ChunkChoice struct {
	Index        int       `json:"index"`
	Delta        Delta     `json:"delta"`
	FinishReason *string   `json:"finish_reason"`
	Logprobs     *struct{} `json:"logprobs"`
}

// Delta is what a chunk adds to the message.
type Delta struct {
	Role      string          `json:"role,omitempty"`
	Content   *string         `json:"content,omitempty"`
	ToolCalls []ToolCallDelta `json:"tool_calls,omitempty"`
}

// ToolCallDelta is a fragment of a tool call in a chunk.
type ToolCallDelta struct {
	Index    int               `json:"index"`
	ID       string            `json:"id,omitempty"`
	Type     string            `json:"type,omitempty"`
	Function FunctionCallDelta `json:"function"`
}

// FunctionCallDelta is a fragment of a function call.
type FunctionCallDelta struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments,omitempty"`
}

// Model is one entry of GET /v1/models.
type Model struct {
	ID      string `json:"id"`
	Object  string `json:"object"` // "model"
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	// A model of SemaQ's registry (docs/models.md) also says which version
	// serves it, and its canary's share.
	ActiveVersion string  `json:"active_version,omitempty"`
	CanaryVersion string  `json:"canary_version,omitempty"`
	CanaryPercent float64 `json:"canary_percent,omitempty"`
}

// ModelList is the answer of GET /v1/models.
type ModelList struct {
	Object string  `json:"object"` // "list"
	Data   []Model `json:"data"`
}

// Error types of OpenAI's error object.
const (
	TypeInvalidRequest = "invalid_request_error"
	TypeNotFound       = "not_found_error"
	TypeRateLimit      = "rate_limit_error"
	TypeServer         = "server_error"
	TypeTimeout        = "timeout_error"
	TypeAuthentication = "authentication_error"
)

// Error is OpenAI's error object; ErrorBody wraps it on the wire.
type Error struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"-"`
	Code    *string `json:"-"`
}

func (e *Error) Error() string { return e.Message }

// MarshalJSON writes param and code as null when unset, as OpenAI does.
func (e *Error) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}{e.Message, e.Type, e.Param, e.Code})
}

// UnmarshalJSON reads an error object; a numeric code is kept as text.
func (e *Error) UnmarshalJSON(b []byte) error {
	var raw struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Param   *string         `json:"param"`
		Code    json.RawMessage `json:"code"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	e.Message, e.Type, e.Param = raw.Message, raw.Type, raw.Param
	if c := bytes.TrimSpace(raw.Code); len(c) > 0 && string(c) != "null" {
		var s string
		if json.Unmarshal(c, &s) != nil {
			s = string(c)
		}
		e.Code = &s
	}
	return nil
}

// ErrorBody is the body of an error answer: {"error":{...}}.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// Str returns a pointer to s, for the optional fields.
func Str(s string) *string { return &s }
