// Package upstream is what the worker and the model servers it calls
// (its upstreams) exchange: the tokens an answer streams (Piece), how it
// ends (Outcome), and how prompt tokens are counted when a server does not
// say. The worker owns it; an upstream implementation such as the
// simulated model (internal/sim) imports it, never the worker. It is a
// leaf: it imports only the wire types.
package upstream

import (
	"strings"

	"github.com/semaq/semaq/semaq"
)

// Piece is one generated token: text, or a fragment of a function call.
type Piece struct {
	Text string
	Func *semaq.FunctionCallFragment
}

// Outcome ends an answer.
type Outcome struct {
	FinishReason string
	Usage        semaq.TokenUsage
}

// PromptTokens estimates the prompt's size: its whitespace-separated words.
func PromptTokens(prompt string) int { return len(strings.Fields(prompt)) }
