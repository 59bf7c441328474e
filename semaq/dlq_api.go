package semaq

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Dead-letter queue. A message that exceeds its consumer's max deliveries,
// or that a consumer terminates, is copied by the broker into the stream
// DLQStream on DLQPrefix+"<stream>.<consumer>", payload and headers
// unchanged, with the AI-DLQ-* headers below saying why. JetStream alone
// only emits an advisory (nats-server#5049).
const (
	APIDLQList    = "$SQ.API.DLQ.LIST"    // DLQListRequest -> DLQListResponse
	APIDLQGet     = "$SQ.API.DLQ.GET"     // DLQGetRequest -> DeadLetter (with data)
	APIDLQReplay  = "$SQ.API.DLQ.REPLAY"  // DLQReplayRequest -> DLQReplayResponse
	APIDLQPurge   = "$SQ.API.DLQ.PURGE"   // DLQPurgeRequest -> DLQPurgeResponse
	APIDLQCapture = "$SQ.API.DLQ.CAPTURE" // DLQCaptureRequest -> DLQCaptureResponse

	// DLQStream is the stream dead letters are kept in. Anyone may read it;
	// only the broker writes it.
	DLQStream = "SQ_DLQ"
	// DLQPrefix starts the subject of every dead letter:
	// $SQ.dlq.<stream>.<consumer>.
	DLQPrefix = "$SQ.dlq."
)

// DLQSubject is the subject dead letters of a stream's consumer are stored on.
func DLQSubject(stream, consumer string) string { return DLQPrefix + stream + "." + consumer }

// Headers the broker adds to a dead letter. Every header of the original
// message is kept as it was, except those whose names start with "Nats-" or
// "AI-DLQ-": JetStream would act on the former when storing the dead letter
// (a Nats-Msg-Id would deduplicate it), so both are kept under
// HdrDLQOrigPrefix+name and given back on replay.
const (
	HdrDLQPrefix = "AI-DLQ-"
	// HdrDLQReason is max_deliveries, terminated, or "terminated: <reason>"
	// when the consumer gave one; " (payload lost: ...)" is appended when the
	// payload could not be read.
	HdrDLQReason     = "AI-DLQ-Reason"
	HdrDLQStream     = "AI-DLQ-Stream"     // the stream the message was in
	HdrDLQSeq        = "AI-DLQ-Seq"        // its sequence there
	HdrDLQConsumer   = "AI-DLQ-Consumer"   // the consumer that gave up on it
	HdrDLQDeliveries = "AI-DLQ-Deliveries" // how many times it was delivered
	HdrDLQSubject    = "AI-DLQ-Subject"    // its public subject: where replay sends it (absent when lost)
	HdrDLQTime       = "AI-DLQ-Time"       // when it was dead-lettered, RFC 3339 UTC
	HdrDLQStored     = "AI-DLQ-Stored"     // when its stream stored it, RFC 3339 UTC
	// HdrDLQPayloadLost says why the payload and original headers are
	// missing: the message was gone from its stream (a workqueue or interest
	// stream removes a terminated message before JetStream reports it; it
	// may also have expired or been deleted).
	HdrDLQPayloadLost = "AI-DLQ-Payload-Lost"
	// HdrDLQOrigPrefix prefixes original headers kept aside (above).
	HdrDLQOrigPrefix = "AI-DLQ-Orig-"
)

// Dead-letter reasons, the start of AI-DLQ-Reason.
const (
	DLQReasonMaxDeliveries = "max_deliveries"
	DLQReasonTerminated    = "terminated"
)

// DeadLetter is one message in the dead-letter queue.
type DeadLetter struct {
	// Seq identifies the dead letter: its sequence in DLQStream.
	Seq        uint64    `json:"seq"`
	Stream     string    `json:"stream"`
	Consumer   string    `json:"consumer"`
	StreamSeq  uint64    `json:"stream_seq"`
	Subject    string    `json:"subject"`
	Reason     string    `json:"reason"`
	Deliveries uint64    `json:"deliveries"`
	Time       time.Time `json:"time"`
	Stored     time.Time `json:"stored,omitzero"`
	// PayloadLost is why the payload could not be kept; empty when it was.
	PayloadLost string `json:"payload_lost,omitempty"`
	// Size is the payload's size in bytes.
	Size int `json:"size"`
	// Headers are the original message's headers, as it was stored.
	Headers map[string][]string `json:"headers,omitempty"`
	// Data is the payload (base64 in JSON). Lists leave it out.
	Data []byte `json:"data,omitempty"`
}

// DeadLetterHeader builds the stored header block of a dead letter: the
// original headers orig (Nats-* and AI-DLQ-* names set aside) and the
// AI-DLQ-* headers of d. d.Seq, d.Size, d.Headers and d.Data are not used.
func DeadLetterHeader(orig map[string][]string, d *DeadLetter) map[string][]string {
	h := make(map[string][]string, len(orig)+10)
	for k, v := range orig {
		if hasPrefixFold(k, "Nats-") || hasPrefixFold(k, HdrDLQPrefix) {
			k = HdrDLQOrigPrefix + k
		}
		h[k] = append([]string(nil), v...)
	}
	reason := d.Reason
	if d.PayloadLost != "" {
		h[HdrDLQPayloadLost] = []string{d.PayloadLost}
		reason += " (payload lost: " + d.PayloadLost + ")"
	}
	h[HdrDLQReason] = []string{reason}
	h[HdrDLQStream] = []string{d.Stream}
	h[HdrDLQSeq] = []string{strconv.FormatUint(d.StreamSeq, 10)}
	h[HdrDLQConsumer] = []string{d.Consumer}
	h[HdrDLQDeliveries] = []string{strconv.FormatUint(d.Deliveries, 10)}
	if d.Subject != "" {
		h[HdrDLQSubject] = []string{d.Subject}
	}
	h[HdrDLQTime] = []string{d.Time.UTC().Format(time.RFC3339Nano)}
	if !d.Stored.IsZero() {
		h[HdrDLQStored] = []string{d.Stored.UTC().Format(time.RFC3339Nano)}
	}
	return h
}

// ParseDeadLetter reads a dead letter stored at seq in DLQStream with header
// h and payload data. JetStream's own headers on h (Nats-Msg-Id and those a
// direct get adds) are ignored.
func ParseDeadLetter(seq uint64, h map[string][]string, data []byte) (*DeadLetter, error) {
	get := func(k string) string {
		if v := h[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	d := &DeadLetter{
		Seq:         seq,
		Stream:      get(HdrDLQStream),
		Consumer:    get(HdrDLQConsumer),
		Subject:     get(HdrDLQSubject),
		Reason:      get(HdrDLQReason),
		PayloadLost: get(HdrDLQPayloadLost),
		Size:        len(data),
		Data:        data,
	}
	if d.Stream == "" || d.Reason == "" {
		return nil, fmt.Errorf("message %d of %s is not a dead letter: it lacks %s or %s", seq, DLQStream, HdrDLQStream, HdrDLQReason)
	}
	if d.PayloadLost != "" {
		d.Reason = strings.TrimSuffix(d.Reason, " (payload lost: "+d.PayloadLost+")")
	}
	var err error
	if d.StreamSeq, err = strconv.ParseUint(get(HdrDLQSeq), 10, 64); err != nil {
		return nil, fmt.Errorf("dead letter %d: %s: %w", seq, HdrDLQSeq, err)
	}
	if v := get(HdrDLQDeliveries); v != "" {
		if d.Deliveries, err = strconv.ParseUint(v, 10, 64); err != nil {
			return nil, fmt.Errorf("dead letter %d: %s: %w", seq, HdrDLQDeliveries, err)
		}
	}
	if d.Time, err = time.Parse(time.RFC3339Nano, get(HdrDLQTime)); err != nil {
		return nil, fmt.Errorf("dead letter %d: %s: %w", seq, HdrDLQTime, err)
	}
	if v := get(HdrDLQStored); v != "" {
		if d.Stored, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return nil, fmt.Errorf("dead letter %d: %s: %w", seq, HdrDLQStored, err)
		}
	}
	for k, v := range h {
		switch {
		case hasPrefixFold(k, HdrDLQOrigPrefix):
			k = k[len(HdrDLQOrigPrefix):]
		case hasPrefixFold(k, HdrDLQPrefix), hasPrefixFold(k, "Nats-"):
			continue
		}
		if d.Headers == nil {
			d.Headers = make(map[string][]string, len(h))
		}
		d.Headers[k] = append(d.Headers[k], v...)
	}
	return d, nil
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// DLQListRequest selects dead letters, oldest first. Empty Stream and
// Consumer match every one.
type DLQListRequest struct {
	Stream   string `json:"stream,omitempty"`
	Consumer string `json:"consumer,omitempty"`
	// After skips dead letters up to and including this sequence (paging).
	After uint64 `json:"after,omitempty"`
	// Limit bounds the reply; 0 means 100, at most 1000. A reply that would
	// be larger than the server's max payload holds fewer.
	Limit int `json:"limit,omitempty"`
}

// DLQListResponse lists dead letters without their payloads.
type DLQListResponse struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	// Remaining is how many more match after the last one listed.
	Remaining uint64 `json:"remaining"`
}

// DLQGetRequest names one dead letter.
type DLQGetRequest struct {
	Seq uint64 `json:"seq"`
}

// DLQReplayRequest replays one dead letter (Seq), or with All every dead
// letter of Stream (and Consumer, if given) after After, oldest first.
// Replay publishes the payload and original headers to the original public
// subject through the ingress, waits for the stream's ack, then removes the
// dead letter. The replayed message's Nats-Msg-Id is "replay:<stream>:<seq>:
// <consumer>" (the dead letter's origin), so a retried replay inside the
// stream's duplicate window is not stored twice.
//
// A replayed message keeps its AI-Deadline, so one whose deadline has
// passed expires again in a work queue (DLQReplayed.DeadlinePassed says
// so). ExtendDeadline replays with AI-Deadline moved to the time of the
// replay plus ExtendDeadline and AI-Timeout dropped (its budget was spent);
// 0 keeps the headers, at most DLQMaxExtendDeadline.
type DLQReplayRequest struct {
	Seq            uint64        `json:"seq,omitempty"`
	Stream         string        `json:"stream,omitempty"`
	Consumer       string        `json:"consumer,omitempty"`
	All            bool          `json:"all,omitempty"`
	After          uint64        `json:"after,omitempty"`
	ExtendDeadline time.Duration `json:"extend_deadline,omitempty"`
}

// DLQMaxExtendDeadline bounds DLQReplayRequest.ExtendDeadline.
const DLQMaxExtendDeadline = 30 * 24 * time.Hour

// CheckExtendDeadline reports whether d is a valid ExtendDeadline.
func CheckExtendDeadline(d time.Duration) error {
	switch {
	case d < 0:
		return fmt.Errorf("extend deadline %s is negative", d)
	case d > DLQMaxExtendDeadline:
		return fmt.Errorf("extend deadline %s is over %s", d, DLQMaxExtendDeadline)
	}
	return nil
}

// DLQReplayed is one replayed dead letter.
type DLQReplayed struct {
	Seq     uint64 `json:"seq"` // the dead letter's, now removed
	Subject string `json:"subject"`
	// Stream and StreamSeq are where the message is stored again.
	Stream    string `json:"stream"`
	StreamSeq uint64 `json:"stream_seq"`
	// Duplicate: the stream had it already (an earlier replay stored it).
	Duplicate bool `json:"duplicate,omitempty"`
	// Deadline is the deadline the replayed message carries (AI-Deadline,
	// or AI-Timeout counted from the replay); zero when it has none.
	Deadline time.Time `json:"deadline,omitzero"`
	// DeadlinePassed: Deadline was already past at the replay, so a work
	// queue expires the message straight back into the dead-letter queue.
	// Replay with ExtendDeadline to give it time.
	DeadlinePassed bool `json:"deadline_passed,omitempty"`
}

// DLQSkipped is a dead letter a replay-all left in the queue, and why.
type DLQSkipped struct {
	Seq    uint64 `json:"seq"`
	Reason string `json:"reason"`
}

// DLQReplayResponse reports a replay. A replay-all does as much as it can in
// a few seconds: Remaining counts what is left after Last; ask again with
// After set to Last.
type DLQReplayResponse struct {
	Replayed  []DLQReplayed `json:"replayed"`
	Skipped   []DLQSkipped  `json:"skipped,omitempty"`
	Last      uint64        `json:"last,omitempty"`
	Remaining uint64        `json:"remaining,omitempty"`
}

// DLQPurgeRequest removes one dead letter (Seq), those of Stream (and
// Consumer), or, with neither, all of them.
type DLQPurgeRequest struct {
	Seq      uint64 `json:"seq,omitempty"`
	Stream   string `json:"stream,omitempty"`
	Consumer string `json:"consumer,omitempty"`
}

// DLQPurgeResponse says how many dead letters were removed.
type DLQPurgeResponse struct {
	Purged uint64 `json:"purged"`
}

// DLQCaptureRequest dead-letters a message before its consumer terminates
// it. Workqueue and interest streams remove a terminated message before
// JetStream reports the termination, so only a capture made first keeps its
// payload; the report that follows is then recognised as the same dead
// letter and not stored again.
type DLQCaptureRequest struct {
	Stream     string `json:"stream"`
	Consumer   string `json:"consumer"`
	StreamSeq  uint64 `json:"stream_seq"`
	Deliveries uint64 `json:"deliveries,omitempty"`
	Reason     string `json:"reason,omitempty"` // the termination reason
}

// DLQCaptureResponse names the dead letter a capture made (or found).
type DLQCaptureResponse struct {
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate,omitempty"`
}

var (
	// ErrDeadLetterNotFound matches a dead-letter sequence that is not in the
	// queue (never was, replayed, or purged).
	ErrDeadLetterNotFound = &APIError{Code: 404, ErrCode: ErrCodeDeadLetterNotFound, Description: "dead letter not found"}
	// ErrPayloadLost matches a replay of a dead letter whose payload was lost:
	// there is nothing to send.
	ErrPayloadLost = &APIError{Code: 409, ErrCode: ErrCodePayloadLost, Description: "dead letter has no payload"}
)
