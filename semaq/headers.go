package semaq

// Canonical envelope header names. Header names are matched without regard to
// case on the way in and rewritten to these spellings by the ingress.
const (
	HdrModel        = "AI-Model"
	HdrModelVersion = "AI-Model-Version"
	HdrAdapter      = "AI-Adapter"
	HdrPriority     = "AI-Priority"
	HdrTenant       = "AI-Tenant"
	HdrIntent       = "AI-Intent"
	HdrTimeout      = "AI-Timeout"
	HdrDeadline     = "AI-Deadline"
	HdrSession      = "AI-Session"
	HdrPromptTokens = "AI-Prompt-Tokens"
	HdrSchemaID     = "AI-Schema-Id"
	HdrTraceParent  = "traceparent"
	HdrTraceState   = "tracestate"

	// HdrReceived is stamped by the ingress: the time the broker accepted the
	// message, RFC 3339 with nanoseconds, UTC. A value sent by a client is
	// replaced.
	HdrReceived = "AI-Received"

	// HdrOriginSubject is set by the ingress when a route rule stores a
	// message under another subject: the subject it was published to.
	HdrOriginSubject = "AI-Origin-Subject"

	// JetStream headers the ingress understands and passes through.
	HdrMsgID = "Nats-Msg-Id"
	HdrTTL   = "Nats-TTL"
)

// Aliases used by earlier AI gateways and the articles SemaQ grew from. They
// are accepted on every front door and rewritten to the canonical name.
const (
	AliasModelVersion = "X-Model-Version"
	AliasAdapter      = "X-Lora-Adapter-ID"
	AliasIntent       = "X-AI-Intent"
	AliasTimeout      = "X-AI-Timeout"
	AliasTraceID      = "X-Trace-ID"
)

// Limits on envelope values. They keep headers small enough to sit in every
// index and log line, and bound what a hostile client can make the broker parse.
const (
	// MaxEnvelopeValue is the longest value accepted for an envelope header.
	MaxEnvelopeValue = 256
	// DefaultMaxHeaderBytes bounds the whole header block of one message
	// (names, values and separators). The server makes it configurable.
	DefaultMaxHeaderBytes = 16 * 1024
	// MaxTimeout is the longest AI-Timeout accepted.
	MaxTimeout = 7 * 24 * 3600e9
	// MaxPromptTokens bounds AI-Prompt-Tokens.
	MaxPromptTokens = 100_000_000
)
