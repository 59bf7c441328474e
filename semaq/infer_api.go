package semaq

import (
	"fmt"
	"hash/fnv"
	"strings"
)

// Inference requests of the OpenAI-compatible gateway (docs/gateway.md,
// docs/worker.md). Each model has a work queue of its own, so a request
// only ever reaches a worker serving its model: queue InferQueue(model) on
// subject InferSubject(model). Workers create the queues of their models
// and announce themselves in the agent registry with intent InferIntent
// and capability CapModels, which is how the gateway knows the models
// served by live workers.
const (
	// InferSubjectPrefix starts the subject of every inference request.
	InferSubjectPrefix = "ai.infer."
	// InferQueuePrefix starts the name of every model's queue.
	InferQueuePrefix = "INFER_"
	// InferIntent is the intent workers announce.
	InferIntent = "openai.chat.completions"
	// CapModels is the agent capability listing a worker's models,
	// comma-separated; CapAdapters its adapters.
	CapModels   = "models"
	CapAdapters = "adapters"
)

// HTTP headers the gateway reads besides OpenAI's.
const (
	HdrHTTPTenant   = "X-SemaQ-Tenant"
	HdrHTTPPriority = "X-SemaQ-Priority"
	HdrHTTPAdapter  = "X-SemaQ-Adapter"
	HdrHTTPSession  = "X-SemaQ-Session"
	HdrHTTPTimeout  = "X-SemaQ-Timeout"
	// HdrHTTPSessionBudget bounds, in tokens, the session history the
	// gateway puts before a request's own messages.
	HdrHTTPSessionBudget = "X-SemaQ-Session-Budget"
	// HdrHTTPRequestID is set on every gateway answer: the request id,
	// which is also the id of its token stream.
	HdrHTTPRequestID = "X-SemaQ-Request-Id"
	// HdrHTTPSessionState and HdrHTTPSessionRevision are set on the
	// answer to a request that names a session: the session's state and
	// revision as the gateway read them ("new" and 0 when it did not
	// exist yet).
	HdrHTTPSessionState    = "X-SemaQ-Session-State"
	HdrHTTPSessionRevision = "X-SemaQ-Session-Revision"
	// HdrHTTPSessionWarning says why a session is degraded, on the answer
	// of a gateway whose degraded policy is warn.
	HdrHTTPSessionWarning = "X-SemaQ-Session-Warning"
)

// modelToken turns a model name into one subject token and queue-name
// suffix (NameToken, cut at 96 bytes).
func modelToken(model string) string { return NameToken(model, 96) }

// NameToken turns any string into a string that is safe as one NATS subject
// token and as part of a JetStream stream or consumer name: letters,
// digits, '-' and '_' are kept, anything else becomes '_', and when
// anything was replaced (or s is longer than max bytes, and then cut) an
// FNV-1a hash of the whole of s is appended, so distinct inputs stay
// distinct.
func NameToken(s string, max int) string {
	b := make([]byte, 0, min(len(s), max)+9)
	changed := false
	for i := 0; i < len(s); i++ {
		if i == max {
			changed = true
			break
		}
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b = append(b, c)
			continue
		}
		b = append(b, '_')
		changed = true
	}
	if changed {
		h := fnv.New32a()
		h.Write([]byte(s))
		b = fmt.Appendf(b, "-%08x", h.Sum32())
	}
	return string(b)
}

// CheckModel accepts model names: 1 to 256 printable ASCII bytes without
// spaces or quotes.
func CheckModel(model string) error {
	if model == "" {
		return fmt.Errorf("model name is empty")
	}
	if len(model) > 256 {
		return fmt.Errorf("model name %.40q... is longer than 256 bytes", model)
	}
	for i := 0; i < len(model); i++ {
		if c := model[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '\\' || c == ',' {
			return fmt.Errorf("model name %q has %q at byte %d", model, c, i)
		}
	}
	return nil
}

// InferQueue is the queue of model's requests.
func InferQueue(model string) string { return InferQueuePrefix + modelToken(model) }

// InferSubject is the subject model's requests are published on.
func InferSubject(model string) string { return InferSubjectPrefix + modelToken(model) }

// SplitList splits a comma-separated capability value, dropping blanks.
func SplitList(s string) []string {
	var out []string
	for p := range strings.SplitSeq(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
