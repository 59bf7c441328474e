package sse

import (
	"errors"
	"net/http"
	"time"
)

// KeepAlive is how often an idle event stream gets a comment line
// (Stream.KeepAlive), so proxies keep it open while nothing happens.
const KeepAlive = 15 * time.Second

// ErrStreamFailed is returned by Stream.Write after a write failed: the
// client is gone or too slow, and the stream is over.
var ErrStreamFailed = errors.New("sse: event stream write failed")

// Stream is the server's end of one event stream: an HTTP response of
// text/event-stream, each write flushed at once. Its head goes out with
// Start, or with the first write: a handler that may still fail with an
// error status waits until it has something to stream. Not safe for
// concurrent use.
type Stream struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	started bool
	failed  bool
}

// NewStream streams on w. A writeTimeout above zero bounds each write: a
// client that does not take an event within it is dropped, and what the
// handler holds for it goes too; zero leaves writes to the server's own
// timeouts.
func NewStream(w http.ResponseWriter, writeTimeout time.Duration) *Stream {
	return &Stream{w: w, rc: http.NewResponseController(w), timeout: writeTimeout}
}

// WriteHeader writes the head of an event stream on w: 200, Content-Type
// text/event-stream, no caching, and no buffering in a proxy
// (X-Accel-Buffering, nginx's). Stream.Start writes it; a HEAD request is
// answered with it alone.
func WriteHeader(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
}

// Start writes the stream's head, once.
func (s *Stream) Start() {
	if !s.started {
		s.started = true
		WriteHeader(s.w)
	}
}

// Started reports whether the head has gone out.
func (s *Stream) Started() bool { return s.started }

// Write writes b, whole events (AppendEvent), and flushes it, within the
// write timeout, starting the stream first if need be. Once a write has
// failed every Write returns ErrStreamFailed.
func (s *Stream) Write(b []byte) error {
	if s.failed {
		return ErrStreamFailed
	}
	s.Start()
	if s.timeout > 0 {
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	}
	if _, err := s.w.Write(b); err != nil {
		s.failed = true
		return err
	}
	if err := s.rc.Flush(); err != nil {
		s.failed = true
		return err
	}
	return nil
}

// KeepAlive writes a comment line, which readers skip.
func (s *Stream) KeepAlive() error { return s.Write([]byte(": keepalive\n\n")) }

// WriteLast writes b, the stream's last event (an error saying why it
// ends), even after a failed write, within timeout. After a failed write
// the connection is past its deadline, so b may not arrive.
func (s *Stream) WriteLast(b []byte, timeout time.Duration) error {
	s.failed = false
	s.timeout = timeout
	return s.Write(b)
}
