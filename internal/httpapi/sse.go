package httpapi

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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

// eventWriter writes an event stream with a deadline per event: a client
// that does not take an event within StreamWriteTimeout is dropped, and the
// stream's goroutine and pulled messages go with it.
type eventWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	failed  bool
}

func (h *Handler) newEventWriter(w http.ResponseWriter) *eventWriter {
	return &eventWriter{w: w, rc: http.NewResponseController(w), timeout: h.opts.StreamWriteTimeout}
}

// write writes b and flushes it, within the timeout.
func (ew *eventWriter) write(b []byte) error {
	if ew.failed {
		return errStreamFailed
	}
	_ = ew.rc.SetWriteDeadline(time.Now().Add(ew.timeout))
	if _, err := ew.w.Write(b); err != nil {
		ew.failed = true
		return err
	}
	if err := ew.rc.Flush(); err != nil {
		ew.failed = true
		return err
	}
	return nil
}

// fail ends the stream with an "error" event whose data is msg as a JSON
// string. After a failed write the connection is past its deadline; the
// event is given one more second and may not arrive.
func (ew *eventWriter) fail(msg string) {
	ew.failed = false
	ew.timeout = time.Second
	_ = ew.write([]byte("event: error\ndata: " + jsonString(msg) + "\n\n"))
}

var errStreamFailed = errors.New("event stream write failed")

// jsError turns a JetStream API error into the SDK's error type, so
// writeErr keeps its status (a 400 stays a 400) and code.
func jsError(err error) error {
	if e, ok := errors.AsType[*jetstream.APIError](err); ok {
		return &semaq.APIError{Code: e.Code, ErrCode: uint16(e.ErrorCode), Description: e.Description}
	}
	return err
}
