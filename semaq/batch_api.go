package semaq

import (
	"encoding/json"
	"errors"
	"fmt"
)

// Batch publishing (docs/batches.md). A client sends many messages to the
// ingress in one NATS message, a batch frame, as a request on
// APIPublishBatch; the ingress takes every message through the whole
// pipeline on its own and answers once, a BatchAck with one result per
// message, by index. The ingress pays its extra server pass once per
// batch instead of once per message.
//
// A frame is
//
//	"SQB1" flags msg*
//	flags  = one byte: BatchAtomic, or 0 for a fast batch
//	msg    = uvarint(len(subject)) subject  uvarint(nh) (uvarint(len k) k uvarint(len v) v)*nh
//	         uvarint(len(data)) data
//
// the messages of a job frame (jobframe.go) with the subject in place of
// the reply. A header name repeats for a multi-valued header.
//
// A fast batch stores the messages the pipeline accepts and refuses the
// others, each with its own error. An atomic batch stores all of them or
// none: its messages must land in one stream, and the first refusal
// refuses the batch, naming the message. Stock NATS clients' atomic
// batches (the Nats-Batch-* headers) are accepted on stream subjects as
// they are, one message at a time (docs/batches.md).

// APIPublishBatch takes a batch frame as a request; the answer is a
// BatchAck.
const APIPublishBatch = "$SQ.API.PUB.BATCH"

// BatchFrameMagic starts every batch frame.
const BatchFrameMagic = "SQB1"

// BatchAtomic is the flag of an atomic batch.
const BatchAtomic byte = 1

// Bounds of one batch. A batch frame is one NATS message, so the server's
// max_payload bounds its bytes (1 MiB by default).
const (
	// MaxBatchMsgs bounds the messages of a batch: JetStream's own bound
	// on an atomic batch.
	MaxBatchMsgs = 1000
	// MaxBatchBytes bounds the bytes (subjects, headers and data) of the
	// messages of a stock client's atomic batch, which the ingress holds
	// until its commit.
	MaxBatchBytes = 8 << 20
	// MaxOpenBatches bounds the stock clients' atomic batches one
	// connection has open at a time, and MaxOpenBatchesNode those of all
	// connections on one node.
	MaxOpenBatches     = 16
	MaxOpenBatchesNode = 1000
	// BatchTimeoutSeconds is how long a stock client's atomic batch may
	// stay open without a message before it is abandoned and its
	// messages dropped: JetStream's own default.
	BatchTimeoutSeconds = 10
)

// Headers of JetStream's atomic batch publish, which stock NATS clients
// send on every message of a batch.
const (
	HdrBatchID     = "Nats-Batch-Id"
	HdrBatchSeq    = "Nats-Batch-Sequence"
	HdrBatchCommit = "Nats-Batch-Commit"
)

// BatchMsg is one message of a batch frame.
type BatchMsg struct {
	Subject string
	Header  map[string][]string
	Data    []byte
}

// AppendBatchFrame appends the frame of msgs, atomic or not, to b.
func AppendBatchFrame(b []byte, atomic bool, msgs []BatchMsg) []byte {
	b = append(b, BatchFrameMagic...)
	if atomic {
		b = append(b, BatchAtomic)
	} else {
		b = append(b, 0)
	}
	for i := range msgs {
		b = AppendFrameJob(b, msgs[i].Subject, msgs[i].Header, nil, msgs[i].Data)
	}
	return b
}

// ParseBatchFrame decodes a batch frame: whether it is atomic and its
// messages, at least one and at most MaxBatchMsgs. Data slices alias b.
// Every error matches ErrBadFrame; that of a frame of more than
// MaxBatchMsgs messages matches ErrBatchLimit too.
func ParseBatchFrame(b []byte) (atomic bool, msgs []BatchMsg, err error) {
	if len(b) < len(BatchFrameMagic)+1 || string(b[:len(BatchFrameMagic)]) != BatchFrameMagic {
		return false, nil, fmt.Errorf("%w: a batch frame starts with %q and a flags byte", ErrBadFrame, BatchFrameMagic)
	}
	switch flags := b[len(BatchFrameMagic)]; flags {
	case 0:
	case BatchAtomic:
		atomic = true
	default:
		return false, nil, fmt.Errorf("%w: unknown flags %#x", ErrBadFrame, flags)
	}
	entries, err := parseFrameEntries(b[len(BatchFrameMagic)+1:], "message", MaxBatchMsgs)
	if errors.Is(err, errOverBound) {
		return false, nil, fmt.Errorf("%w: %w: a batch holds at most %d messages; split it", ErrBadFrame, ErrBatchLimit, MaxBatchMsgs)
	}
	if err != nil {
		return false, nil, err
	}
	if len(entries) == 0 {
		return false, nil, fmt.Errorf("%w: a batch of no messages", ErrBadFrame)
	}
	msgs = make([]BatchMsg, len(entries))
	for i, e := range entries {
		msgs[i] = BatchMsg{Subject: e.Reply, Header: e.Header, Data: e.Data}
	}
	return atomic, msgs, nil
}

// BatchResult is what became of one message of a batch: stored (its
// PubAck) or refused (Error).
type BatchResult struct {
	PubAck
	Error *APIError `json:"error,omitempty"`
}

// BatchAck answers a batch. Results has one entry per message, in the
// order sent, unless the batch as a whole was refused before any message
// was looked at (a malformed frame, a bound). Error is set when the batch
// as a whole was refused: then nothing was stored, and for an atomic
// batch Index is the message that refused it (its own error is in
// Results too).
type BatchAck struct {
	Stored  int           `json:"stored"`
	Refused int           `json:"refused,omitempty"`
	Atomic  bool          `json:"atomic,omitempty"`
	Results []BatchResult `json:"results,omitempty"`
	Error   *APIError     `json:"error,omitempty"`
	Index   *int          `json:"index,omitempty"`
}

// Err is the batch's refusal, or, for a fast batch, the first message
// refused (naming it), or nil when every message was stored.
func (a *BatchAck) Err() error {
	if a.Error != nil {
		return a.Error
	}
	for i := range a.Results {
		if e := a.Results[i].Error; e != nil {
			return &BatchMsgError{Index: i, Err: e, Refused: a.Refused}
		}
	}
	return nil
}

// BatchMsgError is BatchAck.Err of a fast batch with refused messages:
// the first, and how many were refused.
type BatchMsgError struct {
	Index   int
	Err     *APIError
	Refused int
}

func (e *BatchMsgError) Error() string {
	more := ""
	if e.Refused > 1 {
		more = fmt.Sprintf(" (and %d more refused)", e.Refused-1)
	}
	return fmt.Sprintf("batch message %d refused: %v%s", e.Index, e.Err, more)
}

func (e *BatchMsgError) Unwrap() error { return e.Err }

// ParseBatchAck decodes a BatchAck, checking it has a result per message
// of a batch of n when it has results at all.
func ParseBatchAck(b []byte, n int) (*BatchAck, error) {
	var a BatchAck
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("batch answer is not JSON: %w", err)
	}
	if a.Results != nil && len(a.Results) != n {
		return nil, fmt.Errorf("batch answer has %d results for %d messages", len(a.Results), n)
	}
	if a.Error == nil && a.Results == nil {
		return nil, errors.New("batch answer has neither results nor an error")
	}
	return &a, nil
}

// Refusals of a batch as a whole.
var (
	// ErrBadBatch: the batch is malformed (frame, sequence, headers) or
	// breaks a rule of batches (an atomic batch over two streams).
	ErrBadBatch = &APIError{Code: 400, ErrCode: ErrCodeBadBatch, Description: "invalid batch"}
	// ErrBatchRefused: an atomic batch one of whose messages was refused;
	// nothing of it was stored.
	ErrBatchRefused = &APIError{Code: 400, ErrCode: ErrCodeBatchRefused, Description: "atomic batch refused"}
	// ErrBatchLimit: the batch is over a bound (messages, bytes, batches
	// open).
	ErrBatchLimit = &APIError{Code: 413, ErrCode: ErrCodeBatchLimit, Description: "batch over a limit"}
	// ErrBatchAbandoned: a stock client's atomic batch saw no message for
	// BatchTimeoutSeconds and was dropped.
	ErrBatchAbandoned = &APIError{Code: 408, ErrCode: ErrCodeBatchAbandoned, Description: "batch abandoned"}
)
