package semaq

import "time"

// Filtered subscriptions. A client asks the broker to run a filter over a
// subject: the broker consumes the stream, evaluates the CEL expression on
// each message, acknowledges the ones that do not match and forwards the
// ones that do to the client's deliver subject, with the message's JetStream
// ack subject in header HdrFilterAck, so the client acknowledges straight to
// JetStream. (NATS refuses a $JS.ACK reply subject on a client's publish.)
// See docs/filtering.md.
const (
	APIFilterStart = "$SQ.API.FILTER.START"   // FilterStartRequest -> FilterStartResponse
	APIFilterPingT = "$SQ.API.FILTER.PING.%s" // (empty) -> FilterStats; keeps filter %s alive
	APIFilterStopT = "$SQ.API.FILTER.STOP.%s" // (empty) -> FilterStats; ends filter %s

	// HdrFilterAck carries a forwarded match's JetStream ack subject
	// ($JS.ACK....): publish +ACK, -NAK, +WPI or +TERM there.
	HdrFilterAck = "Semaq-Ack"

	// MetadataFilter is the consumer metadata key holding a filtered
	// consumer's CEL source: a durable keeps its filter across restarts.
	MetadataFilter = "semaq.filter"
)

// ErrFilterGone matches a ping or stop for a filter the broker does not run.
var ErrFilterGone = &APIError{Code: 404, ErrCode: ErrCodeFilterGone, Description: "filter not running"}

// FilterStartRequest starts a filtered subscription.
type FilterStartRequest struct {
	// Subject is the public subject (wildcards allowed within one stream).
	Subject string `json:"subject"`
	// Filter is the CEL expression (docs/expressions.md). Empty resumes a
	// durable with the filter it was created with.
	Filter string `json:"filter,omitempty"`
	// Plugin names a filter-stage plugin (docs/plugins.md) that judges each
	// message the expression matched; with it Filter may be empty (every
	// message goes to the plugin). A durable resumed with a plugin names
	// it again.
	Plugin string `json:"plugin,omitempty"`
	// Durable names a consumer that keeps its position and filter.
	Durable string `json:"durable,omitempty"`
	// Deliver is "all" (default) or "new"; StartSeq overrides it.
	Deliver  string `json:"deliver,omitempty"`
	StartSeq uint64 `json:"start_seq,omitempty"`
	// DeliverSubject is where matches go, as DeliverSubject + "." +
	// the message's subject. The client subscribes to DeliverSubject + ".>".
	DeliverSubject string `json:"deliver_subject"`
	// MaxAckPending bounds the matches delivered and not yet acknowledged
	// (default 1000). It applies when the consumer is created.
	MaxAckPending int `json:"max_ack_pending,omitempty"`
	// AckWait is how long JetStream waits for an ack before it redelivers
	// (default 30s). It applies when the consumer is created.
	AckWait time.Duration `json:"ack_wait,omitempty"`
}

// FilterStartResponse describes a running filter.
type FilterStartResponse struct {
	ID       string `json:"id"`
	Stream   string `json:"stream"`
	Consumer string `json:"consumer"`
	Filter   string `json:"filter"`
	// Heartbeat is how often the client must ping; the broker ends a filter
	// that has not been pinged for three heartbeats.
	Heartbeat time.Duration `json:"heartbeat"`
	// Warnings are problems found in the filter that do not stop it, such
	// as a payload field the JSON schema bound to the subject does not
	// declare (a misspelling matches nothing).
	Warnings []string `json:"warnings,omitempty"`
}

// FilterStats count what a filter did with the messages it evaluated.
// Redeliveries are counted again.
type FilterStats struct {
	Matched uint64 `json:"matched"`
	Skipped uint64 `json:"skipped"`
	// Errors counts messages whose evaluation failed (type mismatch,
	// missing field, payload not JSON): they are skipped too, and counted
	// in Skipped as well.
	Errors uint64 `json:"errors"`
	// MissingField counts the errors for a payload field or header the
	// message lacks ("no such key"): often a misspelled field.
	MissingField uint64 `json:"missing_field"`
}
