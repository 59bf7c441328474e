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

	// HdrCancelToken is a secret of the publisher's choosing (16 to 128
	// visible ASCII characters) that may cancel the request later
	// (CancelRequest.Token): the ingress keeps only its SHA-256, as
	// HdrCancelSum, and drops it. The SDK sets one on every publish and
	// returns it in PubAck.CancelToken.
	HdrCancelToken = "AI-Cancel-Token"
	// HdrCancelSum is stamped by the ingress: the SHA-256 (base64url) of
	// the request's HdrCancelToken. A client may not set it.
	HdrCancelSum = "AI-Cancel-Sum"
	// HdrPublisher is stamped by the ingress with auth on: the store user
	// that published the message. A client may not set it.
	HdrPublisher = "AI-Publisher"

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

	// JetStream's optimistic-concurrency conditions, checked by JetStream
	// when it stores the message. The ingress validates them and rewrites
	// them to these spellings: JetStream matches names case-sensitively.
	HdrExpectedStream          = "Nats-Expected-Stream"
	HdrExpectedLastSeq         = "Nats-Expected-Last-Sequence"
	HdrExpectedLastSubjSeq     = "Nats-Expected-Last-Subject-Sequence"
	HdrExpectedLastSubjSeqSubj = "Nats-Expected-Last-Subject-Sequence-Subject"
	HdrExpectedLastMsgID       = "Nats-Expected-Last-Msg-Id"
)

// Headers of an exactly-once processor's outputs (client.ProcessExactlyOnce,
// docs/exactly-once.md): the input each output was made from, and the
// processor that made it. A processor resumes from the last output it
// wrote, by these.
const (
	HdrSourceStream = "Semaq-Source-Stream" // the input's stream
	HdrSourceSeq    = "Semaq-Source-Seq"    // the input's stream sequence
	HdrProcessor    = "Semaq-Processor"     // the processor's name
)

// Reserved headers. A client may not set these (any case): the ingress
// refuses the message. Every other Nats- header is reserved too (see
// IsReservedHeader and docs/envelope.md).
const (
	// HdrStatus and HdrDescription are what nats.go makes of a status line
	// ("NATS/1.0 409 Consumer Deleted"): a stored message carrying them reads
	// as a protocol status, which stops SDK and SSE readers at it.
	HdrStatus      = "Status"
	HdrDescription = "Description"
	// HdrKVOperation marks key-value deletes and purges.
	HdrKVOperation = "KV-Operation"
	// ReservedNatsPrefix is nats-server's namespace: every Nats- header other
	// than Nats-Msg-Id, Nats-TTL and the Nats-Expected-* conditions above.
	ReservedNatsPrefix = "Nats-"
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
	// MaxSchemaID bounds AI-Schema-Id.
	MaxSchemaID = 1<<31 - 1
	// MaxTTL is the longest Nats-TTL accepted: 10 years (3650 days).
	// JetStream keeps TTLs in seconds and converts them to nanoseconds in an
	// int64, which overflows past 292 years and makes a message expire at
	// once; ten years is far from that and longer than any real TTL.
	MaxTTL = 3650 * 24 * 3600e9
	// MaxExpectedSeq bounds the Nats-Expected-*-Sequence conditions: the
	// largest sequence JetStream parses.
	MaxExpectedSeq = 1<<63 - 1
)
