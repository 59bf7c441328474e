package semaq

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Work queues. A queue is a stream of inference requests that the broker
// schedules: workers fetch, the dispatcher picks what each fetch gets by
// deadline, priority, tenant fair share counted in tokens and affinity. See
// docs/queues.md.
const (
	APIQueueCreateT = "$SQ.API.QUEUE.CREATE.%s" // QueueConfig -> QueueInfo
	APIQueueInfoT   = "$SQ.API.QUEUE.INFO.%s"   // (empty) -> QueueInfo
	APIQueueDeleteT = "$SQ.API.QUEUE.DELETE.%s" // (empty) -> QueueDeleteResponse
	APIQueueList    = "$SQ.API.QUEUE.LIST"      // (empty) -> QueueListResponse
	// APIQueueFetchT takes a FetchRequest. The reply subject receives the
	// jobs one message each, then an end-of-batch message (HdrQueueStatus).
	APIQueueFetchT  = "$SQ.API.QUEUE.FETCH.%s"
	APIQueueCancelT = "$SQ.API.QUEUE.CANCEL.%s" // CancelRequest -> CancelResponse

	// QueueAckPrefix starts the reply subject of every job:
	// QueueAckPrefix+"<queue>.<seq>.<lease>". A worker answers a job by a
	// request to it with one of the Job* bodies; the reply is a JobReply.
	QueueAckPrefix = "$SQ.QA."
	// QueueCancelPrefix+"<worker>" receives cancel notices (CancelNotice)
	// for the jobs a worker holds.
	QueueCancelPrefix = "$SQ.QC."

	// MetadataQueue marks a stream as a work queue; its value is the
	// queue's configuration as JSON.
	MetadataQueue = "semaq.queue"
)

// Headers of a delivered job and of the end-of-batch message.
const (
	HdrQueue         = "Semaq-Queue"
	HdrQueueSeq      = "Semaq-Seq"        // the request's sequence in the queue
	HdrQueueSubject  = "Semaq-Subject"    // the subject it was published on
	HdrQueueDeliver  = "Semaq-Deliveries" // 1 on first delivery
	HdrQueueTokens   = "Semaq-Tokens"     // the prompt tokens charged for it (estimated when absent)
	HdrQueueEstimate = "Semaq-Estimated"  // "true" when Semaq-Tokens is an estimate
	HdrQueueWait     = "Semaq-Wait"       // how long it waited in the queue, Go duration
	HdrQueueAckWait  = "Semaq-Ack-Wait"   // redelivered unless answered (or extended) within this
	// HdrQueueStatus is on the end-of-batch message: "204" for a complete
	// batch, "408" when the fetch waited and got nothing, "409" with a
	// description (HdrQueueDescription) when the queue went away.
	HdrQueueStatus      = "Semaq-Status"
	HdrQueueDescription = "Semaq-Description"
	HdrQueueCount       = "Semaq-Count"
)

// Bodies a worker sends to a job's reply subject.
const (
	JobAck        = "+ACK"  // done; optional JSON JobAckReport after a space
	JobNak        = "-NAK"  // give it back; optional JSON {"delay_ms":N} after a space
	JobInProgress = "+WPI"  // still working: restart the ack wait
	JobTerm       = "+TERM" // never deliver again: dead-letter it; optional reason after a space
)

// Queue defaults and limits.
const (
	DefaultQueueMaxMessages = 100_000
	// DefaultQueueMaxBytes bounds the bytes a file-storage queue holds
	// (payloads and headers of queued and held requests); a memory queue
	// keeps them in RAM, so its default is DefaultQueueMaxBytesMemory.
	DefaultQueueMaxBytes       = 256 << 20
	DefaultQueueMaxBytesMemory = 256 << 20
	// DefaultQueueMaxTokens bounds the prompt tokens a queue holds: what
	// DefaultQueueMaxBytes of requests would be estimated at.
	DefaultQueueMaxTokens  = DefaultQueueMaxBytes / CharsPerToken
	DefaultQueueAckWait    = 30 * time.Second
	DefaultQueueMaxDeliver = 5
	DefaultAffinityWait    = 2 * time.Second
	DefaultAgingStep       = 10 * time.Second
	MaxFetchBatch          = 1024
	MaxFetchWait           = 5 * time.Minute
	// CharsPerToken estimates prompt tokens when a request gives none:
	// ceil(len(payload)/CharsPerToken).
	CharsPerToken = 4
	// QueueRequestOverhead is what a request counts toward MaxBytes
	// beyond its payload: its headers and storage overhead, about.
	QueueRequestOverhead = 512
)

// QueueConfig is what a user asks for when adding a queue.
type QueueConfig struct {
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	Subjects    []string `json:"subjects"`
	Storage     string   `json:"storage,omitempty"` // file (default), memory
	// Replicas is how many nodes of a cluster store the queue (1 to 5; 0
	// means what SemaQ's own state has: 3 on a cluster of three nodes or
	// more, else 1); its lease store takes the same (docs/queues.md).
	Replicas int `json:"replicas,omitempty"`
	// MaxMessages, MaxBytes and MaxTokens bound what the queue holds
	// (queued plus held by workers); past them a publish is refused with
	// ErrOverloaded. 0 means the default (DefaultQueueMaxMessages,
	// DefaultQueueMaxBytes or DefaultQueueMaxBytesMemory,
	// DefaultQueueMaxTokens); MaxBytes and MaxTokens -1 mean no limit.
	// MaxBytes counts payload bytes plus QueueRequestOverhead a request.
	MaxMessages int64 `json:"max_messages,omitempty"`
	MaxBytes    int64 `json:"max_bytes,omitempty"`
	MaxTokens   int64 `json:"max_tokens,omitempty"`
	// DefaultTimeout is the deadline of a request that brings none.
	DefaultTimeout time.Duration `json:"default_timeout,omitempty"`
	// AckWait is how long a worker may hold a job without answering
	// before it goes back to the queue; 0 means DefaultQueueAckWait.
	AckWait time.Duration `json:"ack_wait,omitempty"`
	// MaxDeliver is how many times a job is handed out before it is
	// dead-lettered; 0 means DefaultQueueMaxDeliver, -1 unlimited.
	MaxDeliver int `json:"max_deliver,omitempty"`
	// AffinityWait is how long a request waits for a worker that holds its
	// model or adapter before any worker may take it; 0 means
	// DefaultAffinityWait, -1 never falls back.
	AffinityWait time.Duration `json:"affinity_wait,omitempty"`
	// AgingStep is the anti-starvation bound: a request waiting this long
	// competes one priority level higher, and so on up to critical; 0
	// means DefaultAgingStep, -1 turns aging off.
	AgingStep time.Duration `json:"aging_step,omitempty"`
	// MaxWait, when set, turns on adaptive admission: the queue refuses
	// new requests once the tokens waiting exceed what its workers are
	// seen to serve in MaxWait, tightened by the variance of prompt
	// lengths and service times (docs/queues.md).
	MaxWait time.Duration `json:"max_wait,omitempty"`
	// ChainAnswers, when set, is a subject of a stream with provenance
	// (docs/provenance.md#answers): the token-stream answer of every
	// request of the queue that names a session is appended, once its
	// stream ends, to that session's chain there, as an AnswerRecord.
	ChainAnswers string `json:"chain_answers,omitempty"`
	// Class puts every request of the queue in this class (QueueClass),
	// whatever its AI-Class says: a tenant cannot leave it.
	Class string `json:"class,omitempty"`
}

// Check reports the first invalid field.
func (c *QueueConfig) Check() error {
	if err := CheckStreamName(c.Name); err != nil {
		return fmt.Errorf("queue name: %w", err)
	}
	if len(c.Subjects) == 0 {
		return fmt.Errorf("queue %s needs at least one subject", c.Name)
	}
	for _, s := range c.Subjects {
		if err := CheckSubject(s, true); err != nil {
			return fmt.Errorf("queue %s: %w", c.Name, err)
		}
	}
	switch c.Storage {
	case "", "file", "memory":
	default:
		return fmt.Errorf("queue %s: storage %q is not one of file, memory", c.Name, c.Storage)
	}
	switch {
	case c.MaxMessages < 0:
		return fmt.Errorf("queue %s: max messages %d is negative", c.Name, c.MaxMessages)
	case c.MaxTokens < -1:
		return fmt.Errorf("queue %s: max tokens %d is below -1", c.Name, c.MaxTokens)
	case c.MaxBytes < -1:
		return fmt.Errorf("queue %s: max bytes %d is below -1", c.Name, c.MaxBytes)
	case c.DefaultTimeout < 0:
		return fmt.Errorf("queue %s: default timeout %s is negative", c.Name, c.DefaultTimeout)
	case c.AckWait < 0:
		return fmt.Errorf("queue %s: ack wait %s is negative", c.Name, c.AckWait)
	case c.AckWait > 0 && c.AckWait < 100*time.Millisecond:
		return fmt.Errorf("queue %s: ack wait %s is under 100ms", c.Name, c.AckWait)
	case c.MaxDeliver < -1:
		return fmt.Errorf("queue %s: max deliver %d is below -1", c.Name, c.MaxDeliver)
	case c.Class != "" && CheckStreamName(c.Class) != nil:
		return fmt.Errorf("queue %s: class %q is not a class name (letters, digits, '-' and '_')", c.Name, c.Class)
	case c.AffinityWait < -1:
		return fmt.Errorf("queue %s: affinity wait %s is negative", c.Name, c.AffinityWait)
	case c.AgingStep < -1:
		return fmt.Errorf("queue %s: aging step %s is negative", c.Name, c.AgingStep)
	case c.MaxWait < 0:
		return fmt.Errorf("queue %s: max wait %s is negative", c.Name, c.MaxWait)
	}
	if c.ChainAnswers != "" {
		if err := CheckSubject(c.ChainAnswers, false); err != nil {
			return fmt.Errorf("queue %s: chain answers: %w", c.Name, err)
		}
	}
	return nil
}

// WithDefaults returns c with every zero field set to its default.
func (c QueueConfig) WithDefaults() QueueConfig {
	if c.Storage == "" {
		c.Storage = "file"
	}
	if c.MaxMessages == 0 {
		c.MaxMessages = DefaultQueueMaxMessages
	}
	if c.MaxBytes == 0 {
		c.MaxBytes = DefaultQueueMaxBytes
		if c.Storage == "memory" {
			c.MaxBytes = DefaultQueueMaxBytesMemory
		}
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = DefaultQueueMaxTokens
	}
	if c.AckWait == 0 {
		c.AckWait = DefaultQueueAckWait
	}
	if c.MaxDeliver == 0 {
		c.MaxDeliver = DefaultQueueMaxDeliver
	}
	if c.AffinityWait == 0 {
		c.AffinityWait = DefaultAffinityWait
	}
	if c.AgingStep == 0 {
		c.AgingStep = DefaultAgingStep
	}
	return c
}

// QueueInfo describes a queue: its configuration and what it holds now.
type QueueInfo struct {
	Config QueueConfig `json:"config"`
	Status QueueStatus `json:"status"`
}

// QueueStatus is the live state of a queue as its dispatcher sees it: the
// figures an autoscaler acts on.
type QueueStatus struct {
	// Queued wait for a worker; Held are out with workers; Delayed were
	// given back with a delay that has not passed.
	Queued  int `json:"queued"`
	Held    int `json:"held"`
	Delayed int `json:"delayed"`
	// TokensQueued is the prompt tokens of Queued and Delayed requests.
	TokensQueued int64 `json:"tokens_queued"`
	TokensHeld   int64 `json:"tokens_held"`
	// Bytes is what the queued, delayed and held requests count toward
	// MaxBytes (payload + QueueRequestOverhead each).
	Bytes int64 `json:"bytes"`
	// OldestAge is how long the oldest queued request has waited.
	OldestAge time.Duration `json:"oldest_age"`

	ByPriority []QueueGroupStat `json:"by_priority,omitempty"`
	ByTenant   []QueueGroupStat `json:"by_tenant,omitempty"`
	ByModel    []QueueGroupStat `json:"by_model,omitempty"`
	// ByVersion counts the requests bound to a registered model's version
	// (ModelVersionKey), queued, delayed or held: what a drain waits for.
	ByVersion []QueueGroupStat `json:"by_version,omitempty"`

	// Rates are moving averages over about a minute.
	ArrivalRate   float64 `json:"arrival_rate"`    // requests/s admitted
	ServiceRate   float64 `json:"service_rate"`    // requests/s acked
	TokenRate     float64 `json:"token_rate"`      // tokens/s served (prompt + output)
	ServiceTimeMs float64 `json:"service_time_ms"` // mean fetch-to-ack time of one request
	// Workers is the workers seen fetching recently; RecommendedWorkers is
	// what Little's law asks for to keep up with arrivals and drain the
	// backlog (docs/queues.md).
	Workers            int `json:"workers"`
	RecommendedWorkers int `json:"recommended_workers"`

	Admission AdmissionStatus `json:"admission"`
	Counters  QueueCounters   `json:"counters"`
	// Fairness is each backlogged tenant's virtual token counter.
	Fairness []TenantCounter `json:"fairness,omitempty"`
	// Classes is what the queue holds of each class (docs/queues.md).
	Classes []ClassStat `json:"classes,omitempty"`
}

// QueueGroupStat is what a queue holds for one priority, tenant or model.
type QueueGroupStat struct {
	Key       string        `json:"key"`
	Queued    int           `json:"queued"`
	Tokens    int64         `json:"tokens"`
	OldestAge time.Duration `json:"oldest_age"`
}

// TenantCounter is a tenant's virtual token counter (VTC).
type TenantCounter struct {
	Tenant  string  `json:"tenant"`
	Counter float64 `json:"counter"`
}

// AdmissionStatus says how close a queue is to refusing publishes.
type AdmissionStatus struct {
	MaxMessages int64 `json:"max_messages"`
	MaxTokens   int64 `json:"max_tokens,omitempty"`
	MaxBytes    int64 `json:"max_bytes,omitempty"`
	// Reserved is requests admitted by the ingress that the dispatcher has
	// not indexed yet; they count against the limits.
	Reserved int64 `json:"reserved,omitempty"`
	// AdaptiveTokens is the adaptive token threshold when MaxWait is set
	// and the queue has seen service (0 otherwise).
	AdaptiveTokens int64   `json:"adaptive_tokens,omitempty"`
	PromptCV       float64 `json:"prompt_cv,omitempty"`
	LatencyCV      float64 `json:"latency_cv,omitempty"`
	Saturated      bool    `json:"saturated"`
}

// QueueCounters are totals since the dispatcher started.
type QueueCounters struct {
	Admitted    uint64 `json:"admitted"`
	Refused     uint64 `json:"refused"`
	Dispatched  uint64 `json:"dispatched"`
	Acked       uint64 `json:"acked"`
	Nacked      uint64 `json:"nacked"`
	Redelivered uint64 `json:"redelivered"`
	Expired     uint64 `json:"expired"`
	Cancelled   uint64 `json:"cancelled"`
	DeadLetters uint64 `json:"dead_letters"`
	OutputToks  uint64 `json:"output_tokens"`
	// BadReplies counts fetches, answers and cancels ignored because their
	// reply subject was not one the broker answers (CheckReplySubject).
	BadReplies uint64 `json:"bad_replies"`
	// CancelsRefused counts cancels refused because their sender was not
	// the request's owner and had not its cancel token (docs/queues.md).
	CancelsRefused uint64 `json:"cancels_refused"`
	// ConsumerRecoveries counts the times the dispatcher found its stream
	// consumer deleted, paused or altered and made it anew.
	ConsumerRecoveries uint64 `json:"consumer_recoveries"`
	// LeaseConflicts counts jobs the lease store said another dispatcher
	// of the queue had leased or done (two at once, one not yet told it no
	// longer leads; docs/queues.md), taken as it said.
	LeaseConflicts uint64 `json:"lease_conflicts"`
	// LeaseChecksUnanswered counts answers under a lease the dispatcher
	// did not know that it left unanswered, past its bound on lease store
	// reads at once (16; docs/queues.md).
	LeaseChecksUnanswered uint64 `json:"lease_checks_unanswered"`
}

// QueueListResponse lists queues.
type QueueListResponse struct {
	Queues []QueueInfo `json:"queues"`
}

// QueueDeleteResponse confirms a delete.
type QueueDeleteResponse struct {
	Deleted bool `json:"deleted"`
}

// FetchRequest is a worker asking for work.
type FetchRequest struct {
	// Worker identifies the worker (cancel notices go to
	// QueueCancelPrefix+Worker): 1 to 128 letters, digits, '-' and '_'.
	Worker string `json:"worker"`
	// Max is the most jobs to return, 1 to MaxFetchBatch (0 is refused).
	Max int `json:"max,omitempty"`
	// MaxTokens bounds the prompt tokens of the batch; 0 means no bound. A
	// single request larger than the bound is delivered alone.
	MaxTokens int64 `json:"max_tokens,omitempty"`
	// Wait is how long to wait for the first job; 0 returns at once.
	Wait time.Duration `json:"wait,omitempty"`
	// Labels describe the worker: "model" and "adapter" (comma-separated
	// lists of what it has loaded) drive affinity; others are reported.
	Labels map[string]string `json:"labels,omitempty"`
	// Subject, when set, restricts the fetch to requests published on
	// subjects it matches (wildcards allowed): a worker of one model on a
	// queue that holds several models' requests (ai.infer.>) takes
	// ai.infer.<model> only. Unlike affinity it never lapses.
	Subject string `json:"subject,omitempty"`
}

// Check reports the first invalid field of r. Its messages name the field
// without saying "fetch": callers add where it happened.
func (r *FetchRequest) Check() error {
	if err := CheckConsumerName(r.Worker); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	switch {
	case r.Max < 0:
		return fmt.Errorf("max %d is negative", r.Max)
	case r.Max == 0:
		return fmt.Errorf("max 0 (or absent): ask for 1 to %d jobs", MaxFetchBatch)
	case r.Max > MaxFetchBatch:
		return fmt.Errorf("max %d is over %d", r.Max, MaxFetchBatch)
	case r.MaxTokens < 0:
		return fmt.Errorf("max tokens %d is negative", r.MaxTokens)
	case r.Wait < 0:
		return fmt.Errorf("wait %s is negative", r.Wait)
	case r.Wait > MaxFetchWait:
		return fmt.Errorf("wait %s is over %s", r.Wait, MaxFetchWait)
	case len(r.Labels) > 32:
		return fmt.Errorf("%d labels, at most 32", len(r.Labels))
	}
	for k, v := range r.Labels {
		if k == "" || len(k) > 64 || len(v) > 256 {
			return fmt.Errorf("label %q: keys are 1-64 bytes, values at most 256", k)
		}
	}
	if r.Subject != "" {
		if len(r.Subject) > 256 {
			return fmt.Errorf("subject filter is longer than 256 bytes")
		}
		if err := CheckSubject(r.Subject, true); err != nil {
			return fmt.Errorf("subject filter: %w", err)
		}
	}
	return nil
}

// JobAckReport is what a worker reports when it acks a job.
type JobAckReport struct {
	OutputTokens int64 `json:"output_tokens,omitempty"`
}

// JobReply answers a worker's ack, nak, in-progress or term.
type JobReply struct {
	OK    bool      `json:"ok"`
	Error *APIError `json:"error,omitempty"`
}

// CancelRequest names a request by its Nats-Msg-Id or, failing that, its
// sequence in the queue.
type CancelRequest struct {
	ID string `json:"id"`
	// Token is the request's cancel token (HdrCancelToken, returned in
	// PubAck.CancelToken). Without auth it is what makes a cancel the
	// publisher's: a request is cancelled only with its token. With
	// auth its publisher, a service of its tenant and admins may cancel
	// it without one.
	Token string `json:"token,omitempty"`
	// EndStream, when set, also ends the request's token stream with this
	// error if it has not ended: for a request whose worker is gone (only
	// the lease holder may write the stream, so nobody else could).
	EndStream *TokenError `json:"end_stream,omitempty"`
}

// Bounds of a cancel token (HdrCancelToken).
const (
	MinCancelTokenLen = 16
	MaxCancelTokenLen = 128
)

// CheckCancelToken reports whether t can be a cancel token: 16 to 128
// visible ASCII characters.
func CheckCancelToken(t string) error {
	if len(t) < MinCancelTokenLen || len(t) > MaxCancelTokenLen {
		return fmt.Errorf("cancel token: %d characters; want %d to %d", len(t), MinCancelTokenLen, MaxCancelTokenLen)
	}
	for i := 0; i < len(t); i++ {
		if t[i] <= ' ' || t[i] > '~' {
			return fmt.Errorf("cancel token: character %d is not visible ASCII", i)
		}
	}
	return nil
}

// CancelSum is what the broker keeps of a cancel token: its SHA-256,
// base64url (HdrCancelSum).
func CancelSum(token string) string {
	sum := sha256.Sum256([]byte(token))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// MaxEndStreamBytes bounds the code and message of CancelRequest.EndStream.
const MaxEndStreamBytes = 1024

// Check reports the first invalid field of r.
func (r *CancelRequest) Check() error {
	if strings.TrimSpace(r.ID) == "" {
		return errors.New(`cancel needs {"id":"<Nats-Msg-Id or sequence>"}`)
	}
	if r.Token != "" {
		if err := CheckCancelToken(r.Token); err != nil {
			return err
		}
	}
	if e := r.EndStream; e != nil {
		if e.Code == "" || len(e.Code)+len(e.Message) > MaxEndStreamBytes || !utf8.ValidString(e.Code+e.Message) {
			return fmt.Errorf("end_stream: needs a code, at most %d bytes of valid UTF-8 in code and message", MaxEndStreamBytes)
		}
	}
	return nil
}

// CancelResponse says what the cancel did: "removed" (it was queued) or
// "notified" (a worker held it and was told).
type CancelResponse struct {
	Seq    uint64 `json:"seq"`
	Result string `json:"result"`
	Worker string `json:"worker,omitempty"`
}

// CancelNotice tells a worker to stop working on a job.
type CancelNotice struct {
	Queue  string `json:"queue"`
	Seq    uint64 `json:"seq"`
	ID     string `json:"id,omitempty"`
	Reason string `json:"reason"`
}

var (
	ErrQueueNotFound = &APIError{Code: 404, ErrCode: ErrCodeQueueNotFound, Description: "queue not found"}
	// ErrOverloaded matches a publish refused by a queue's admission
	// control; the description says when to retry.
	ErrOverloaded = &APIError{Code: 429, ErrCode: ErrCodeOverloaded, Description: "queue overloaded"}
	// ErrRequestNotFound matches a cancel of a request the queue does not
	// hold (never there, done, expired or cancelled already).
	ErrRequestNotFound = &APIError{Code: 404, ErrCode: ErrCodeRequestNotFound, Description: "request not found"}
	// ErrLeaseLost matches an answer to a job the worker no longer holds:
	// its ack wait passed (it went to another worker), or it was cancelled.
	ErrLeaseLost = &APIError{Code: 409, ErrCode: ErrCodeLeaseLost, Description: "job no longer held"}
	ErrBadQueue  = &APIError{Code: 400, ErrCode: ErrCodeBadQueue, Description: "invalid queue"}
)
