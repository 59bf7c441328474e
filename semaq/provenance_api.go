package semaq

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"time"
)

// Session chains (docs/provenance.md): a stream may chain the messages of
// each session — provenance (a hash chain, optionally signed) and strict
// session order (each message's AI-Timestamp, or AI-Seq, after the last).
// The broker serialises a session's messages through a head record kept in
// the stream itself, so the chain is the same whichever node stores them.
const (
	APIProvenanceHead = "$SQ.API.PROVENANCE.HEAD" // ProvenanceHeadRequest -> ProvenanceHead
	APIProvenanceKeys = "$SQ.API.PROVENANCE.KEYS" // (empty) -> ProvenanceKeys
)

// Provenance modes of a stream (StreamConfig.Provenance).
const (
	ProvenanceNone    = ""
	ProvenanceSession = "session" // a hash chain per session
	ProvenanceSigned  = "signed"  // the chain, each link signed by the node that stored it
)

// Session orders of a stream (StreamConfig.SessionOrder).
const (
	SessionOrderNone   = ""
	SessionOrderStrict = "strict" // each session's AI-Timestamp strictly increases
	// SessionOrderStrictSeq orders by the producer's own AI-Seq instead.
	SessionOrderStrictSeq = "strict-seq"
)

// The headers a strictly ordered session is ordered by.
const (
	// HdrTimestamp is the producer's time of a message, RFC 3339 (with up
	// to nanoseconds). Streams with SessionOrderStrict require it on every
	// message that names a session.
	HdrTimestamp = "AI-Timestamp"
	// HdrSeq is the producer's own sequence of a message in its session, a
	// decimal from 1 to MaxExpectedSeq, for SessionOrderStrictSeq.
	HdrSeq = "AI-Seq"
)

// ChainHeadPrefix starts the subjects of a chained stream's head records,
// as stored: ChainHeadPrefix + "<stream>.<key>", one per session (the last
// only: each replaces the one before). A consumer of the whole stream
// sees them; filter on the stream's own subjects to skip them.
const ChainHeadPrefix = "$chain."

// ChainHeadSubject is the stored subject of the head record of a session
// of stream: its key is the hex SHA-256 of tenant and session, so any
// session id fits a subject token.
func ChainHeadSubject(stream, key string) string {
	return ChainHeadPrefix + stream + "." + key
}

// ProvenanceHeadRequest names a session's chain. Tenant is the caller's
// own with auth on (a service or admin names any).
type ProvenanceHeadRequest struct {
	Stream  string `json:"stream"`
	Tenant  string `json:"tenant,omitempty"`
	Session string `json:"session"`
}

// ProvenanceHead is a session's chain as its head record says: the last
// link, how many there are, when the first and last were stored.
type ProvenanceHead struct {
	Stream  string `json:"stream"`
	Tenant  string `json:"tenant,omitempty"`
	Session string `json:"session"`
	// Hash is the last link's hash (empty when the stream only orders).
	Hash string `json:"hash,omitempty"`
	// Links is the number of messages in the chain.
	Links uint64 `json:"links"`
	// First is when the chain's first link was received; a reader of the
	// chain starts there.
	First time.Time `json:"first"`
	// Last is when its last link was received.
	Last time.Time `json:"last"`
	// Order is the last accepted AI-Timestamp or AI-Seq, in a strictly
	// ordered stream.
	Order string `json:"order,omitempty"`
	// Seq is the head record's stream sequence.
	Seq uint64 `json:"seq"`
	// Settling: the session's last batch is being stored, or its writer
	// stopped before it was; the head is what is stored of it so far
	// (docs/provenance.md, How a chain is written).
	Settling bool `json:"settling,omitempty"`
}

// ProvenanceKey is a node's signing key, as chains name it.
type ProvenanceKey struct {
	ID        string    `json:"id"`
	Node      string    `json:"node"`
	PublicKey []byte    `json:"public_key"` // Ed25519, 32 bytes
	Created   time.Time `json:"created"`
}

// ProvenanceKeys are the signing keys of the cluster's nodes.
type ProvenanceKeys struct {
	Keys []ProvenanceKey `json:"keys"`
}

// Head record headers (the rest is AI-Session, AI-Tenant and, for
// provenance, provenance.HdrHash).
const (
	HdrChainLinks = "AI-Chain-Links" // the number of links
	HdrChainFirst = "AI-Chain-First" // the first link's receipt, RFC 3339 nano
	HdrChainLast  = "AI-Chain-Last"  // the last link's receipt
	HdrChainOrder = "AI-Chain-Order" // the last accepted order value
)

// CheckProvenance checks a stream's provenance mode.
func CheckProvenance(mode string) error {
	switch mode {
	case ProvenanceNone, ProvenanceSession, ProvenanceSigned:
		return nil
	}
	return fmt.Errorf("provenance %q is not one of session, signed", mode)
}

// CheckSessionOrder checks a stream's session order.
func CheckSessionOrder(order string) error {
	switch order {
	case SessionOrderNone, SessionOrderStrict, SessionOrderStrictSeq:
		return nil
	}
	return fmt.Errorf("session order %q is not one of strict, strict-seq", order)
}

// OrderValue is a message's place in its strictly ordered session: a time
// (AI-Timestamp) or a sequence (AI-Seq), compared as numbers.
type OrderValue struct {
	Nanos int64  // AI-Timestamp as Unix nanoseconds
	Seq   uint64 // AI-Seq
	Text  string // as given, for errors
}

// ParseOrder reads the order value of a message of a stream ordered by
// order (SessionOrderStrict or SessionOrderStrictSeq) from its header
// value v.
func ParseOrder(order, v string) (OrderValue, error) {
	switch order {
	case SessionOrderStrictSeq:
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 || n > MaxExpectedSeq || strings.HasPrefix(v, "+") {
			return OrderValue{}, fmt.Errorf("%s %.64q is not a sequence from 1 to %d", HdrSeq, v, uint64(MaxExpectedSeq))
		}
		return OrderValue{Seq: n, Text: v}, nil
	default:
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return OrderValue{}, fmt.Errorf("%s %.64q is not an RFC 3339 time", HdrTimestamp, v)
		}
		if t.Year() < 1678 || t.Year() > 2261 {
			return OrderValue{}, fmt.Errorf("%s %.64q is outside the years 1678 to 2261", HdrTimestamp, v)
		}
		return OrderValue{Nanos: t.UnixNano(), Text: v}, nil
	}
}

// After reports whether o comes strictly after p.
func (o OrderValue) After(p OrderValue) bool {
	if o.Seq != 0 || p.Seq != 0 {
		return o.Seq > p.Seq
	}
	return o.Nanos > p.Nanos
}

// OrderHeader is the header a stream ordered by order reads.
func OrderHeader(order string) string {
	if order == SessionOrderStrictSeq {
		return HdrSeq
	}
	return HdrTimestamp
}

// Refusals of session chains.
var (
	// ErrSessionOrder: a message of a strictly ordered session that is not
	// after the session's last accepted one.
	ErrSessionOrder = &APIError{Code: 409, ErrCode: ErrCodeSessionOrder, Description: "session out of order"}
	// ErrChainNotFound: no chain for that stream, tenant and session.
	ErrChainNotFound = &APIError{Code: 404, ErrCode: ErrCodeChainNotFound, Description: "no such chain"}
	// ErrChainBusy: a session's chain holds too many messages, or lost its
	// race too often; retry.
	ErrChainBusy = &APIError{Code: 503, ErrCode: ErrCodeChainBusy, Description: "chain busy"}
)

// HdrAnswerOf, on a message of a session's chain, says it is the answer
// record of the request with that id (docs/provenance.md#answers): the
// broker appended it when the request's token stream ended.
const HdrAnswerOf = "AI-Answer-Of"

// AnswerMsgID is the Nats-Msg-Id of the answer record of request id of
// tenant ("" for none), so the record is stored once however often its
// writing is retried, and two tenants' request ids never collide.
func AnswerMsgID(tenant, id string) string { return "answer:" + tenant + ":" + id }

// MaxAnswerText bounds the text, and the function calls' arguments
// together, that an answer record carries; past it the record says it is
// truncated, and RecordsSHA256 still covers every record.
const MaxAnswerText = 256 << 10

// AnswerRecord is the payload of an answer record: what the token stream
// of request RequestID said, as stored in SQ_TOKENS when it ended.
type AnswerRecord struct {
	RequestID string `json:"request_id"`
	// Records and Tokens count the stream's records and tokens.
	Records int    `json:"records"`
	Tokens  uint64 `json:"tokens"`
	// Text is the stream's text; Calls its function calls, put together
	// from their fragments (Index, ID, Name, Arguments), by index.
	Text  string                 `json:"text"`
	Calls []FunctionCallFragment `json:"calls,omitempty"`
	// Truncated: Text and Calls stop at MaxAnswerText bytes.
	Truncated bool `json:"truncated,omitempty"`
	// FinishReason is the final record's; Error, the error that ended the
	// stream instead; Usage, what the writer reported.
	FinishReason string      `json:"finish_reason,omitempty"`
	Error        *TokenError `json:"error,omitempty"`
	Usage        *TokenUsage `json:"usage,omitempty"`
	// RecordsSHA256 is the hex SHA-256 over the stream's stored records
	// in order, each as its length (8 bytes, big-endian) and its bytes: a
	// reader holding the records checks them against the chain with
	// AnswerRecordsHash.
	RecordsSHA256 string `json:"records_sha256"`
}

// AnswerHash computes AnswerRecord.RecordsSHA256: Add each stored record
// in order, then Sum. The zero value is not ready: use NewAnswerHash.
type AnswerHash struct{ h hash.Hash }

// NewAnswerHash starts a records hash.
func NewAnswerHash() *AnswerHash { return &AnswerHash{sha256.New()} }

// Add takes the next record's stored payload.
func (a *AnswerHash) Add(record []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(record)))
	a.h.Write(n[:])
	a.h.Write(record)
}

// Sum is the hex digest of the records added so far.
func (a *AnswerHash) Sum() string { return hex.EncodeToString(a.h.Sum(nil)) }
