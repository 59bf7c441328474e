package httpapi

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/sse"
	"github.com/semaq/semaq/semaq"
)

// streamRetryAfter is the Retry-After of a stream refused at the cap.
const streamRetryAfter = 5 * time.Second

// acquireStream takes one of the MaxStreams event-stream slots, or answers
// 503 with Retry-After and returns false.
func (h *Handler) acquireStream(w http.ResponseWriter) (release func(), ok bool) {
	select {
	case h.streamSlots <- struct{}{}:
		return func() { <-h.streamSlots }, true
	default:
		w.Header().Set("Retry-After", strconv.Itoa(int(streamRetryAfter/time.Second)))
		writeError(w, http.StatusServiceUnavailable, semaq.ErrCodeUnavailable,
			"too many event streams open on this node (the limit is "+strconv.Itoa(cap(h.streamSlots))+"); retry later")
		return nil, false
	}
}

// failStream ends an event stream with an "error" event whose data is msg
// as a JSON string. After a failed write the connection is past its
// deadline; the event is given one more second and may not arrive.
func failStream(es *sse.Stream, msg string) {
	_ = es.WriteLast([]byte("event: error\ndata: "+jsonString(msg)+"\n\n"), time.Second)
}

// jsError turns a JetStream API error into the SDK's error type, so
// writeErr keeps its status (a 400 stays a 400) and code.
func jsError(err error) error {
	if e, ok := errors.AsType[*jetstream.APIError](err); ok {
		return &semaq.APIError{Code: e.Code, ErrCode: uint16(e.ErrorCode), Description: e.Description}
	}
	return err
}
