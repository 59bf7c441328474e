package semaq

import (
	"encoding/json"
	"fmt"
	"time"
)

// Subjects of the SemaQ management API. Requests and replies are JSON; an
// error reply carries an "error" object like the JetStream API's.
const (
	APIPrefix        = "$SQ.API."
	APIInfo          = "$SQ.API.INFO"
	APIStreamCreateT = "$SQ.API.STREAM.CREATE.%s"
	APIStreamInfoT   = "$SQ.API.STREAM.INFO.%s"
	APIStreamDeleteT = "$SQ.API.STREAM.DELETE.%s"
	APIStreamList    = "$SQ.API.STREAM.LIST"
	APIStreamLookup  = "$SQ.API.STREAM.LOOKUP"
	MetadataSubjects = "semaq.subjects"
)

// PubAck acknowledges a stored message. It is the JetStream PubAck, so stock
// NATS JetStream clients read it unchanged.
type PubAck struct {
	Stream    string `json:"stream"`
	Sequence  uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate,omitempty"`
	Domain    string `json:"domain,omitempty"`
	// CancelToken is the secret the message was published with
	// (HdrCancelToken), which cancels it (CancelRequest.Token). The
	// broker never sends it: the SDK and the HTTP front door, which chose
	// it, fill it in.
	CancelToken string `json:"cancel_token,omitempty"`
}

// StreamConfig is what a user asks for when adding a stream. Subjects are
// public subjects; the broker stores them behind the ingress.
type StreamConfig struct {
	Name        string        `json:"name"`
	Description string        `json:"description,omitempty"`
	Subjects    []string      `json:"subjects"`
	Retention   string        `json:"retention,omitempty"` // limits (default), workqueue, interest
	Storage     string        `json:"storage,omitempty"`   // file (default), memory
	MaxAge      time.Duration `json:"max_age,omitempty"`
	MaxBytes    int64         `json:"max_bytes,omitempty"` // 0: the broker's stream_max_bytes (1 GiB file, 256 MiB memory)
	MaxMsgs     int64         `json:"max_msgs,omitempty"`
	Replicas    int           `json:"replicas,omitempty"`
	// Duplicates is the Nats-Msg-Id dedup window; 0 means two minutes.
	Duplicates time.Duration `json:"duplicate_window,omitempty"`
	// Durability is "fsync" (an ack means the message is on disk; acks are
	// group-committed) or "interval" (an ack means the message is written to
	// the OS; fsync on a timer). Empty takes the server's default (--sync).
	// Memory streams report "memory".
	Durability string `json:"durability,omitempty"`
	// Schema binds every subject pattern of the stream to this schema
	// registry subject: the ingress refuses payloads that do not match it.
	Schema string `json:"schema,omitempty"`
	// Provenance chains the messages of each session (AI-Session):
	// "session" (a hash chain) or "signed" (each link also signed by the
	// node that stored it). docs/provenance.md.
	Provenance string `json:"provenance,omitempty"`
	// SessionOrder refuses a message of a session whose AI-Timestamp
	// ("strict") or AI-Seq ("strict-seq") is not after the session's last
	// accepted one. docs/provenance.md.
	SessionOrder string `json:"session_order,omitempty"`
}

// StreamState is the live state of a stream.
type StreamState struct {
	Messages      uint64    `json:"messages"`
	Bytes         uint64    `json:"bytes"`
	FirstSeq      uint64    `json:"first_seq"`
	FirstTime     time.Time `json:"first_ts"`
	LastSeq       uint64    `json:"last_seq"`
	LastTime      time.Time `json:"last_ts"`
	ConsumerCount int       `json:"consumer_count"`
}

// StreamInfo describes a stream.
type StreamInfo struct {
	Config  StreamConfig `json:"config"`
	State   StreamState  `json:"state"`
	Created time.Time    `json:"created"`
	// Sync is how the stream makes writes durable: "always" (fsync before
	// the ack), "interval" (periodic fsync) or "memory".
	Sync string `json:"sync"`
	// Commit describes the group commits of an fsync stream on this node.
	Commit *CommitStats `json:"commit,omitempty"`
	// Cluster is where the stream's replicas are; nil on a node that is
	// not clustered.
	Cluster *StreamCluster `json:"cluster,omitempty"`
}

// CommitStats are the group-commit figures of one stream on one node since
// it started serving it.
type CommitStats struct {
	Batches  uint64 `json:"batches"`
	Acks     uint64 `json:"acks"`
	Failures uint64 `json:"failures"`
	// BatchSize is acks per fsync.
	BatchSize Summary `json:"batch_size"`
	// CommitLatency is the fsync time per batch, in µs.
	CommitLatency Summary `json:"commit_latency_us"`
}

// Summary describes a distribution.
type Summary struct {
	Count int64   `json:"count"`
	Mean  float64 `json:"mean"`
	P50   int64   `json:"p50"`
	P90   int64   `json:"p90"`
	P99   int64   `json:"p99"`
	Max   int64   `json:"max"`
}

// StreamLookupRequest asks which stream captures a public subject.
type StreamLookupRequest struct {
	Subject string `json:"subject"`
}

// StreamLookupResponse names the stream that captures a subject.
type StreamLookupResponse struct {
	Stream string `json:"stream"`
}

// StreamListResponse lists streams.
type StreamListResponse struct {
	Streams []StreamInfo `json:"streams"`
}

// ServerInfo describes the broker.
type ServerInfo struct {
	Version   string `json:"version"`
	Name      string `json:"name"`
	NATSURL   string `json:"nats_url"`
	HTTPAddr  string `json:"http_addr,omitempty"`
	Sync      string `json:"sync"`
	JetStream bool   `json:"jetstream"`
	// Who asked, with auth on: the store user, its role and tenant
	// (empty for the broker's own clients and with auth off).
	User   string `json:"user,omitempty"`
	Role   string `json:"role,omitempty"`
	Tenant string `json:"tenant,omitempty"`
	// TokenTenant is the tenant token the caller reads token streams under
	// (TokenSubjectFilter): its tenant's, TokenNoTenant, or TokenAnyTenant
	// for a caller that may read every tenant's (docs/tokens.md).
	TokenTenant string `json:"token_tenant,omitempty"`
}

// APIError is the error object of the management API and of the ingress. Its
// JSON shape is the JetStream API error's, so NATS clients show its
// description.
type APIError struct {
	Code        int    `json:"code"`
	ErrCode     uint16 `json:"err_code,omitempty"`
	Description string `json:"description"`
	// RetryAfterMs, on an ErrOverloaded refusal, is when to try again.
	RetryAfterMs int64 `json:"retry_after_ms,omitempty"`
	// Quota, on an ErrOverloaded refusal by a tenant's or user's quota
	// rather than a queue's admission control, names the quota: rpm, tpm
	// or max_queued_tokens (docs/quotas.md).
	Quota string `json:"quota,omitempty"`
}

// Error returns the description alone: it is written to be read by people.
// Code and ErrCode are for programs.
func (e *APIError) Error() string {
	if e.Description == "" {
		return fmt.Sprintf("error code %d (err_code %d)", e.Code, e.ErrCode)
	}
	return e.Description
}

// Is matches another *APIError with the same ErrCode (or, when neither has
// one, the same Code), so callers can test for a sentinel with errors.Is.
func (e *APIError) Is(target error) bool {
	t, ok := target.(*APIError)
	if !ok || e == nil || t == nil {
		return false
	}
	if e.ErrCode != 0 || t.ErrCode != 0 {
		return e.ErrCode == t.ErrCode
	}
	return e.Code == t.Code
}

// Sentinels for errors.Is. Each matches any *APIError with the same code;
// the codes are in errcodes.go.
var (
	ErrNoStream       = &APIError{Code: 404, ErrCode: ErrCodeNoStream, Description: "no stream captures the subject"}
	ErrStreamNotFound = &APIError{Code: 404, ErrCode: ErrCodeStreamNotFound, Description: "stream not found"}
	ErrStreamExists   = &APIError{Code: 400, ErrCode: ErrCodeStreamExists, Description: "stream already exists"}
	ErrBadStream      = &APIError{Code: 400, ErrCode: ErrCodeBadStream, Description: "invalid stream configuration"}
	ErrBadRequest     = &APIError{Code: 400, ErrCode: ErrCodeBadRequest, Description: "bad request"}
	ErrTooLarge       = &APIError{Code: 413, ErrCode: ErrCodeTooLarge, Description: "message too large"}
	ErrUnavailable    = &APIError{Code: 503, ErrCode: ErrCodeUnavailable, Description: "unavailable"}
	// ErrSchema matches ingress rejections of a payload that does not match
	// the schema bound to its subject.
	ErrSchema = &APIError{Code: 400, ErrCode: ErrCodeSchema, Description: "payload does not match its schema"}
	// ErrSchemaNotFound matches a schema id or registry subject that does not
	// exist.
	ErrSchemaNotFound = &APIError{Code: 404, ErrCode: ErrCodeSchemaNotFound, Description: "schema not found"}
	// ErrCommit matches a failed group commit: the message may be stored but
	// was not made durable; publish it again with the same Nats-Msg-Id.
	ErrCommit = &APIError{Code: 503, ErrCode: ErrCodeCommit, Description: "durable commit failed"}
	// ErrEnvelope matches ingress rejections for a bad envelope.
	ErrEnvelope = &APIError{Code: 400, ErrCode: ErrCodeBadEnvelope, Description: "invalid envelope"}
)

// NewAPIError builds an error with the code of sentinel and a description.
func NewAPIError(sentinel *APIError, format string, args ...any) *APIError {
	return &APIError{Code: sentinel.Code, ErrCode: sentinel.ErrCode, Description: fmt.Sprintf(format, args...)}
}

// ErrorReply is the body of an error reply.
type ErrorReply struct {
	Error *APIError `json:"error"`
}

// MarshalError renders e as an error reply body.
func MarshalError(e *APIError) []byte {
	b, _ := json.Marshal(ErrorReply{Error: e})
	return b
}

// CheckStreamName accepts names that are safe as a subject token and a file
// name: 1 to 128 letters, digits, '-' and '_'.
func CheckStreamName(name string) error {
	if name == "" {
		return fmt.Errorf("stream name is empty")
	}
	if len(name) > 128 {
		return fmt.Errorf("stream name %q is longer than 128 bytes", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("stream name %q has %q at byte %d; use letters, digits, '-' and '_'", name, c, i)
		}
	}
	return nil
}

// CheckConsumerName accepts durable subscription names JetStream accepts as
// a subject token: no spaces, control characters, '.', '*', '>', '/' or '\\'.
func CheckConsumerName(name string) error {
	if name == "" {
		return fmt.Errorf("durable name is empty")
	}
	if len(name) > 128 {
		return fmt.Errorf("durable name %q is longer than 128 bytes", name)
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c <= ' ' || c == '.' || c == '*' || c == '>' || c == '/' || c == '\\' || c >= 0x7f {
			return fmt.Errorf("durable name %q has %q at byte %d; use letters, digits, '-' and '_'", name, c, i)
		}
	}
	return nil
}
