package plugin

import (
	"fmt"

	"github.com/semaq/semaq/internal/plugin/wire"
)

// Stage names a point of the broker where a plugin runs.
type Stage string

const (
	// StageIngress judges a message the ingress takes: pass, reject, rewrite, or emit other messages instead.
	StageIngress Stage = "ingress"
	// StageFilter decides whether a subscription sees a message.
	StageFilter Stage = "filter"
	// StageTokens judges each chunk of a token stream: pass, rewrite, stop the stream, or flag it.
	StageTokens Stage = "tokens"
)

// Stages lists every stage, in the order docs/plugins.md describes them.
var Stages = []Stage{StageIngress, StageFilter, StageTokens}

// export is the name of the stage's function in a module, and bit its bit in semaq_stages.
func (s Stage) export() string { return "semaq_" + string(s) }

func (s Stage) bit() uint32 {
	switch s {
	case StageIngress:
		return wire.StageIngress
	case StageFilter:
		return wire.StageFilter
	case StageTokens:
		return wire.StageTokens
	}
	return 0
}

// ParseStage returns the stage named s, or an error naming the stages there are.
func ParseStage(s string) (Stage, error) {
	for _, st := range Stages {
		if string(st) == s {
			return st, nil
		}
	}
	return "", fmt.Errorf("unknown plugin stage %q: the stages are ingress, filter and tokens", s)
}

// Message is what the ingress and filter stages see, and what an ingress stage emits.
type Message struct {
	Subject string
	Header  map[string][]string
	Data    []byte
}

// IngressAction is an ingress stage's verdict.
type IngressAction uint8

const (
	IngressPass    IngressAction = iota // the message goes on unchanged
	IngressReject                       // refuse it; Reason says why
	IngressRewrite                      // replace its headers and payload with Header and Data
	IngressEmit                         // publish Messages instead of it, all or none (none: drop it)
)

func (a IngressAction) String() string {
	switch a {
	case IngressPass:
		return "pass"
	case IngressReject:
		return "reject"
	case IngressRewrite:
		return "rewrite"
	case IngressEmit:
		return "emit"
	}
	return fmt.Sprintf("IngressAction(%d)", uint8(a))
}

// IngressResult is an ingress stage's answer. Everything in it is the host's own copy.
type IngressResult struct {
	Action   IngressAction
	Reason   string              // IngressReject
	Header   map[string][]string // IngressRewrite: the whole new header
	Data     []byte              // IngressRewrite
	Messages []Message           // IngressEmit: at most wire.MaxMessages
}

// TokensAction is a tokens stage's verdict on a chunk.
type TokensAction uint8

const (
	TokensPass    TokensAction = iota // the chunk goes on unchanged
	TokensRewrite                     // replace its text with Text
	TokensStop                        // end the stream with finish_reason "content_filter"; Reason says why
	TokensFlag                        // the chunk goes on; Reason is recorded against the stream
)

func (a TokensAction) String() string {
	switch a {
	case TokensPass:
		return "pass"
	case TokensRewrite:
		return "rewrite"
	case TokensStop:
		return "stop"
	case TokensFlag:
		return "flag"
	}
	return fmt.Sprintf("TokensAction(%d)", uint8(a))
}

// TokensResult is a tokens stage's answer on one chunk.
type TokensResult struct {
	Action TokensAction
	Text   string // TokensRewrite
	Reason string // TokensStop, TokensFlag
}
