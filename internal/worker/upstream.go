package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/internal/sim"
	"github.com/semaq/semaq/internal/sse"
	"github.com/semaq/semaq/internal/worker/upstream"
	"github.com/semaq/semaq/semaq"
)

// Upstream is a model server the worker calls. Chat answers one request,
// calling emit for each token in order, and returns how it finished. It
// must stop soon after ctx ends, returning ctx's error. Implementations
// are safe for concurrent use. The tokens and the outcome are the
// worker's types (package upstream), which an implementation imports.
type Upstream interface {
	Chat(ctx context.Context, body []byte, req *openai.ChatRequest, emit func(upstream.Piece) error) (upstream.Outcome, error)
}

// UpstreamError is a failure of the model server: its HTTP status (0 when
// it was not reached), what went wrong in full for the worker's log, and
// what the client may read. Public never holds the upstream's address:
// an upstream is often an internal host, and its error pages and
// transport errors name it.
type UpstreamError struct {
	Status  int
	Message string
	Public  string
}

func (e *UpstreamError) Error() string {
	if e.Status == 0 || e.Status == http.StatusOK { // not reached, or failed mid-stream
		return withPrefix("upstream: ", e.Message)
	}
	return fmt.Sprintf("upstream answered %d: %s", e.Status, e.Message)
}

// withPrefix is prefix+msg, unless msg already says it: an upstream that
// is itself a SemaQ gateway (or any proxy) often starts its messages with
// "upstream", and "upstream: upstream error: ..." reads like a stutter.
func withPrefix(prefix, msg string) string {
	if strings.HasPrefix(strings.ToLower(msg), strings.ToLower(strings.TrimRight(prefix, ": "))) {
		return msg
	}
	return prefix + msg
}

// PublicMessage is what a client is told about err, an error of
// Upstream.Chat: never the upstream's URL or host.
func PublicMessage(err error) string {
	if ue, ok := errors.AsType[*UpstreamError](err); ok {
		if ue.Public != "" {
			return ue.Public
		}
		if ue.Status != 0 {
			return fmt.Sprintf("upstream error: status %d", ue.Status)
		}
	}
	return "upstream error: the model server failed"
}

// RedactURL is s with the password (or a lone user name, often a token)
// of its userinfo replaced by xxxxx, for logs and error messages. A string
// that is not a URL loses everything that could be userinfo.
func RedactURL(s string) string {
	u, err := url.Parse(s)
	if err == nil {
		if u.User != nil {
			if _, ok := u.User.Password(); !ok {
				u.User = url.User("xxxxx")
			}
		}
		return u.Redacted()
	}
	rest, scheme := s, ""
	if i := strings.Index(s, "://"); i >= 0 {
		scheme, rest = s[:i+3], s[i+3:]
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		rest = "xxxxx@" + rest[at+1:]
	}
	return scheme + rest
}

// The built-in simulated model is an upstream: the worker wires it for
// Upstream "sim".
var _ Upstream = (*sim.Model)(nil)

// httpUpstream is any OpenAI-compatible server: it is always asked to
// stream, with usage, whatever the client asked; the gateway turns the
// tokens into the answer the client wants.
type httpUpstream struct {
	endpoint string // .../chat/completions
	models   string // .../models, for health checks (health.go)
	apiKey   string
	hc       *http.Client
	scrub    *strings.Replacer // takes the upstream's address out of what a client reads
}

// newHTTPUpstream takes the base URL an OpenAI client would use
// (http://host:8000/v1); a URL without a path gets /v1.
func newHTTPUpstream(base, apiKey string, hc *http.Client) (*httpUpstream, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("worker: upstream %q is not an http(s) URL (or \"sim\")", RedactURL(base))
	}
	p := strings.TrimSuffix(u.Path, "/")
	if p == "" {
		p = "/v1"
	}
	mu := *u
	mu.Path = p + "/models"
	u.Path = p + "/chat/completions"
	if hc == nil {
		hc = &http.Client{}
	}
	// Longest first: the endpoint, then the address in its spellings.
	bare := *u
	bare.User = nil
	var pairs []string
	for _, a := range []string{bare.String(), u.Scheme + "://" + u.Host, u.Host, u.Hostname()} {
		if len(a) < 4 {
			continue // a one-letter host name would scrub every such letter
		}
		for _, v := range []string{a, strings.ToLower(a), strings.ToUpper(a)} {
			pairs = append(pairs, v, "<upstream>")
		}
	}
	return &httpUpstream{endpoint: u.String(), models: mu.String(), apiKey: apiKey, hc: hc, scrub: strings.NewReplacer(pairs...)}, nil
}

// public is msg for a client: without the upstream's address, at most
// 512 bytes.
func (h *httpUpstream) public(status int, msg string) string {
	p := "upstream error"
	if status != 0 {
		p += fmt.Sprintf(": status %d", status)
	}
	if msg = h.scrub.Replace(msg); msg != "" {
		if len(msg) > 512 {
			msg = msg[:512] + "..."
		}
		if status == 0 {
			return withPrefix(p+": ", msg)
		}
		p += ": " + msg
	}
	return p
}

func (h *httpUpstream) Chat(ctx context.Context, body []byte, req *openai.ChatRequest, emit func(upstream.Piece) error) (upstream.Outcome, error) {
	fields := map[string]json.RawMessage{}
	if err := json.Unmarshal(body, &fields); err != nil {
		return upstream.Outcome{}, fmt.Errorf("worker: request body: %w", err)
	}
	// The model forwarded is the one the request was queued and accounted
	// as (the worker checked the body against its queue), whatever else
	// the body held.
	fields["model"], _ = json.Marshal(req.Model)
	fields["stream"] = json.RawMessage("true")
	fields["stream_options"] = json.RawMessage(`{"include_usage":true}`)
	out, _ := json.Marshal(fields)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, h.endpoint, bytes.NewReader(out))
	if err != nil {
		return upstream.Outcome{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "text/event-stream")
	if h.apiKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+h.apiKey)
	}
	resp, err := h.hc.Do(hreq)
	if err != nil {
		if ctx.Err() != nil {
			return upstream.Outcome{}, ctx.Err()
		}
		return upstream.Outcome{}, &UpstreamError{Message: err.Error(), Public: "upstream error: the model server could not be reached"}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		var eb openai.ErrorBody
		msg, public := strings.TrimSpace(string(b)), ""
		if json.Unmarshal(b, &eb) == nil && eb.Error != nil && eb.Error.Message != "" {
			// An OpenAI-shaped error is meant for the client (a context
			// too long, a bad parameter); an error page is not.
			msg, public = eb.Error.Message, eb.Error.Message
		}
		return upstream.Outcome{}, &UpstreamError{Status: resp.StatusCode, Message: msg, Public: h.public(resp.StatusCode, public)}
	}
	var (
		res       upstream.Outcome
		sawUsage  bool
		completed int
		r         = sse.NewReader(resp.Body, 4<<20)
	)
	for {
		ev, err := r.Next()
		if err != nil {
			if ctx.Err() != nil {
				return upstream.Outcome{}, ctx.Err()
			}
			if errors.Is(err, io.EOF) {
				if res.FinishReason == "" {
					return upstream.Outcome{}, &UpstreamError{Status: resp.StatusCode, Message: "stream ended without a finish reason",
						Public: "upstream error: the model server's stream ended without a finish reason"}
				}
				break // [DONE] is optional for some servers
			}
			return upstream.Outcome{}, &UpstreamError{Status: resp.StatusCode, Message: "reading the stream: " + err.Error(),
				Public: "upstream error: the model server's stream broke off"}
		}
		if ev.Data == "[DONE]" {
			break
		}
		var chunk struct {
			openai.ChatCompletionChunk
			Error *openai.Error `json:"error"`
		}
		if err := json.Unmarshal([]byte(ev.Data), &chunk); err != nil {
			return upstream.Outcome{}, &UpstreamError{Status: resp.StatusCode, Message: "event is not a chat.completion.chunk: " + err.Error(),
				Public: "upstream error: the model server sent an event that is not a chat.completion.chunk"}
		}
		if chunk.Error != nil {
			return upstream.Outcome{}, &UpstreamError{Status: resp.StatusCode, Message: chunk.Error.Message, Public: h.public(0, chunk.Error.Message)}
		}
		if u := chunk.Usage; u != nil {
			res.Usage = semaq.TokenUsage{Prompt: u.PromptTokens, Completion: u.CompletionTokens, Total: u.TotalTokens}
			sawUsage = true
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue
			}
			if c := ch.Delta.Content; c != nil && *c != "" {
				completed++
				if err := emit(upstream.Piece{Text: *c}); err != nil {
					return upstream.Outcome{}, err
				}
			}
			for _, tc := range ch.Delta.ToolCalls {
				completed++
				f := &semaq.FunctionCallFragment{Index: tc.Index, ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments}
				if err := emit(upstream.Piece{Func: f}); err != nil {
					return upstream.Outcome{}, err
				}
			}
			if ch.FinishReason != nil && *ch.FinishReason != "" {
				res.FinishReason = *ch.FinishReason
			}
		}
	}
	if !sawUsage {
		// The server ignored include_usage: count what came.
		p := upstream.PromptTokens(req.Prompt())
		res.Usage = semaq.TokenUsage{Prompt: p, Completion: completed, Total: p + completed}
	}
	if res.FinishReason == "" {
		res.FinishReason = "stop"
	}
	return res, nil
}
