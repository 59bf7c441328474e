package jsutil

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// StoredMsg is a message as a stream's leader returns it to STREAM.MSG.GET:
// its stored headers only, none of those a direct get adds.
type StoredMsg struct {
	Subject string
	Seq     uint64
	Header  nats.Header // nil: none
	Data    []byte
	Time    time.Time
}

// MsgQuery names the message GetMsg reads: the one at Seq; with
// NextBySubj, the first at or after Seq on a subject matching it; with
// LastBySubj, the last on that subject.
type MsgQuery struct {
	Seq        uint64 `json:"seq,omitempty"`
	NextBySubj string `json:"next_by_subj,omitempty"`
	LastBySubj string `json:"last_by_subj,omitempty"`
}

// GetMsg reads one message of stream from its leader over nc — where a
// direct get may read a replica that is behind. No such message is
// jetstream.ErrMsgNotFound; another refusal comes back as the
// *jetstream.APIError JetStream answered.
func GetMsg(ctx context.Context, nc *nats.Conn, stream string, q MsgQuery) (*StoredMsg, error) {
	body, err := json.Marshal(q)
	if err != nil {
		return nil, err
	}
	r, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, body)
	if err != nil {
		return nil, err
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Message *struct {
			Subject string    `json:"subject"`
			Seq     uint64    `json:"seq"`
			Header  []byte    `json:"hdrs"`
			Data    []byte    `json:"data"`
			Time    time.Time `json:"time"`
		} `json:"message"`
	}
	if err := json.Unmarshal(r.Data, &resp); err != nil {
		return nil, fmt.Errorf("stream %s: reading a message: the reply is not JSON: %w", stream, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound:
		return nil, jetstream.ErrMsgNotFound
	case resp.Error != nil:
		return nil, resp.Error
	case resp.Message == nil:
		return nil, fmt.Errorf("stream %s: reading a message: empty reply", stream)
	}
	m := &StoredMsg{Subject: resp.Message.Subject, Seq: resp.Message.Seq, Data: resp.Message.Data, Time: resp.Message.Time}
	if len(resp.Message.Header) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, fmt.Errorf("stream %s: message %d: headers: %w", stream, m.Seq, err)
		}
	}
	return m, nil
}

// DeleteMsg removes message seq of stream (without erasing its bytes, as
// a delete by sequence through JetStream's client API does). A message the
// stream no longer holds — removed already, by an ack or another delete —
// is jetstream.ErrMsgNotFound, whichever of JetStream's ways of saying so
// it answered with; another refusal comes back as its *jetstream.APIError.
func DeleteMsg(ctx context.Context, nc *nats.Conn, stream string, seq uint64) error {
	body, err := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		NoErase bool   `json:"no_erase"`
	}{seq, true})
	if err != nil {
		return err
	}
	r, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.DELETE."+stream, body)
	if err != nil {
		return err
	}
	var resp struct {
		Error   *jetstream.APIError `json:"error"`
		Success bool                `json:"success"`
	}
	if err := json.Unmarshal(r.Data, &resp); err != nil {
		return fmt.Errorf("stream %s: deleting message %d: the reply is not JSON: %w", stream, seq, err)
	}
	switch {
	case resp.Error == nil && resp.Success:
		return nil
	case resp.Error == nil:
		return fmt.Errorf("stream %s: deleting message %d: not done", stream, seq)
	case resp.Error.ErrorCode == jetstream.JSErrCodeMessageNotFound, resp.Error.ErrorCode == jsErrSequenceNotFound,
		resp.Error.ErrorCode == jsErrMsgDeleteFailed && (strings.Contains(resp.Error.Description, "not found") ||
			strings.Contains(resp.Error.Description, "no message found")):
		return jetstream.ErrMsgNotFound
	}
	return resp.Error
}

// JetStream's error codes for a delete of a sequence the stream does not
// hold: past its last, or a delete that found no message there.
const (
	jsErrSequenceNotFound jetstream.ErrorCode = 10043
	jsErrMsgDeleteFailed  jetstream.ErrorCode = 10057
)
