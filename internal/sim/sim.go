// Package sim is a deterministic simulated language model for demos, tests
// and benchmarks: it answers after a configurable time to first token, at
// a configurable rate, with tokens drawn from a seeded generator, and its
// first token echoes a checksum of the prompt so a caller can tell that
// its request, not another, was answered. It runs in process (Model, an
// upstream of the worker: it speaks the worker's types, package
// internal/worker/upstream) and as an OpenAI-compatible HTTP server
// (Handler).
package sim

import (
	"context"
	"fmt"
	"hash/crc32"
	"strings"
	"time"

	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/internal/worker/upstream"
	"github.com/semaq/semaq/semaq"
)

// Config sets the model's behaviour. The zero value answers at once, as
// fast as the caller takes tokens, 16 tokens per answer.
type Config struct {
	// TTFT is the time from the request to the first token.
	TTFT time.Duration
	// TokensPerSec paces the tokens after the first; 0 means no pacing.
	TokensPerSec float64
	// Tokens is the answer length of a request without max_tokens
	// (default 16). A request's max_tokens wins and ends with "length".
	Tokens int
	// Seed varies the generated words; the same seed, prompt and length
	// give the same answer.
	Seed uint64
}

// Validate reports a setting out of range.
func (c Config) Validate() error {
	switch {
	case c.TTFT < 0:
		return fmt.Errorf("sim: ttft %s is negative", c.TTFT)
	case c.TokensPerSec < 0:
		return fmt.Errorf("sim: tokens/s %g is negative", c.TokensPerSec)
	case c.Tokens < 0 || c.Tokens > 1<<24:
		return fmt.Errorf("sim: tokens %d is outside 0..%d", c.Tokens, 1<<24)
	}
	return nil
}

// Model is the simulated model. It is safe for concurrent use.
type Model struct{ cfg Config }

// New returns a model; cfg must be valid.
func New(cfg Config) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Tokens == 0 {
		cfg.Tokens = 16
	}
	return &Model{cfg: cfg}, nil
}

// Checksum is the prompt checksum the first token carries: CRC-32 (IEEE)
// of the prompt text, as 8 hex digits.
func Checksum(prompt string) string { return fmt.Sprintf("%08x", crc32.ChecksumIEEE([]byte(prompt))) }

// FirstToken is the first token of every text answer to prompt.
func FirstToken(prompt string) string { return "sum=" + Checksum(prompt) }

// ToolTrigger in the last message asks for a function call instead of
// text: "/tool NAME" makes the model call NAME with arguments
// {"checksum":"<prompt checksum>","n":<tokens>}, sent in small fragments.
const ToolTrigger = "/tool "

var words = []string{
	" the", " model", " streams", " tokens", " through", " a", " broker", " and", " every", " reader",
	" sees", " them", " in", " order", " while", " workers", " come", " go", " queues", " fill",
	" drain", " semantic", " envelope", " carries", " tenant", " priority", " deadline", " trace",
}

// Generate answers req, calling emit for each token in order. It stops
// with ctx's error when ctx ends, and with emit's error when emit fails.
func (m *Model) Generate(ctx context.Context, req *openai.ChatRequest, emit func(upstream.Piece) error) (upstream.Outcome, error) {
	prompt := req.Prompt()
	n, reason := m.cfg.Tokens, "stop"
	if l := req.Limit(); l > 0 {
		n, reason = l, "length"
	}
	out := upstream.Outcome{FinishReason: reason, Usage: semaq.TokenUsage{Prompt: upstream.PromptTokens(prompt), Completion: n}}
	out.Usage.Total = out.Usage.Prompt + out.Usage.Completion

	start := time.Now()
	if err := sleepUntil(ctx, start.Add(m.cfg.TTFT)); err != nil {
		return upstream.Outcome{}, err
	}
	first := time.Now()
	pace := func(i int) error {
		if m.cfg.TokensPerSec <= 0 || i == 0 {
			return ctx.Err()
		}
		return sleepUntil(ctx, first.Add(time.Duration(float64(i)/m.cfg.TokensPerSec*1e9)))
	}

	if name, ok := toolCall(req); ok {
		args := fmt.Sprintf(`{"checksum":%q,"n":%d}`, Checksum(prompt), n)
		frags := splitArgs(args, 4)
		for i, a := range frags {
			if err := pace(i); err != nil {
				return upstream.Outcome{}, err
			}
			f := &semaq.FunctionCallFragment{Index: 0, Arguments: a}
			if i == 0 {
				f.ID, f.Name = "call_"+Checksum(prompt), name
			}
			if err := emit(upstream.Piece{Func: f}); err != nil {
				return upstream.Outcome{}, err
			}
		}
		out.FinishReason = "tool_calls"
		out.Usage.Completion = len(frags)
		out.Usage.Total = out.Usage.Prompt + out.Usage.Completion
		return out, nil
	}

	x := m.cfg.Seed ^ uint64(crc32.ChecksumIEEE([]byte(prompt)))
	for i := range n {
		if err := pace(i); err != nil {
			return upstream.Outcome{}, err
		}
		text := ""
		if i == 0 {
			text = FirstToken(prompt)
		} else {
			x = splitmix(x)
			text = words[x%uint64(len(words))]
		}
		if err := emit(upstream.Piece{Text: text}); err != nil {
			return upstream.Outcome{}, err
		}
	}
	return out, nil
}

// Chat answers req as Generate does: it makes the model an upstream of the
// worker, which also hands it the request body (not needed here).
func (m *Model) Chat(ctx context.Context, _ []byte, req *openai.ChatRequest, emit func(upstream.Piece) error) (upstream.Outcome, error) {
	return m.Generate(ctx, req, emit)
}

// Answer is the whole text answer to a prompt of n tokens with seed, as
// Generate produces it: for tests.
func Answer(prompt string, n int, seed uint64) string {
	var b strings.Builder
	x := seed ^ uint64(crc32.ChecksumIEEE([]byte(prompt)))
	for i := range n {
		if i == 0 {
			b.WriteString(FirstToken(prompt))
			continue
		}
		x = splitmix(x)
		b.WriteString(words[x%uint64(len(words))])
	}
	return b.String()
}

func toolCall(req *openai.ChatRequest) (string, bool) {
	if len(req.Messages) == 0 {
		return "", false
	}
	t := req.Messages[len(req.Messages)-1].Text()
	i := strings.Index(t, ToolTrigger)
	if i < 0 {
		return "", false
	}
	name := strings.Fields(t[i+len(ToolTrigger):])
	if len(name) == 0 {
		return "", false
	}
	return name[0], true
}

func splitArgs(s string, size int) []string {
	var out []string
	for len(s) > size {
		out = append(out, s[:size])
		s = s[size:]
	}
	return append(out, s)
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// sleepUntil waits until t or ctx ends. Waits under 100µs are skipped:
// timers are not that precise, and at high rates the pacing catches up.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d < 100*time.Microsecond {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
