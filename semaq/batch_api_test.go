package semaq

import (
	"errors"
	"testing"
)

// A frame of more messages than a batch holds is over a bound, not
// malformed: the ingress answers it with ErrBatchLimit.
func TestParseBatchFrameBound(t *testing.T) {
	msgs := make([]BatchMsg, MaxBatchMsgs+1)
	for i := range msgs {
		msgs[i] = BatchMsg{Subject: "a.b", Data: []byte("d")}
	}
	if _, got, err := ParseBatchFrame(AppendBatchFrame(nil, true, msgs[:MaxBatchMsgs])); err != nil || len(got) != MaxBatchMsgs {
		t.Fatalf("a frame of %d: %d messages, %v", MaxBatchMsgs, len(got), err)
	}
	_, _, err := ParseBatchFrame(AppendBatchFrame(nil, true, msgs))
	if !errors.Is(err, ErrBadFrame) || !errors.Is(err, ErrBatchLimit) {
		t.Fatalf("a frame of %d: %v, want ErrBadFrame and ErrBatchLimit", len(msgs), err)
	}
	if _, _, err := ParseBatchFrame([]byte("SQB1\x00\x01")); errors.Is(err, ErrBatchLimit) {
		t.Fatalf("a malformed frame is not over a bound: %v", err)
	}
}
