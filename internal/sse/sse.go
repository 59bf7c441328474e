// Package sse reads and writes Server-Sent Events (the text/event-stream
// format of the HTML standard): the event-stream endpoints and the OpenAI
// gateway write them through one Stream (head, flush, write deadline,
// keep-alive), the worker adapter reads an upstream's, and the
// event-stream endpoints resume a reconnecting client after the id in its
// Last-Event-ID header.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
)

// Event is one dispatched event. Type is "" for the default "message".
type Event struct {
	ID    string
	Type  string
	Data  string
	Retry int // reconnection time in ms; 0 when not given
	// HasID says an id field was present (an empty id resets the last
	// event id).
	HasID bool
}

// ErrLineTooLong is returned by Reader.Next for a line longer than the
// reader's limit.
var ErrLineTooLong = errors.New("sse: line too long")

// Reader parses an event stream. It is not safe for concurrent use.
type Reader struct {
	r       *bufio.Reader
	maxLine int
	lastID  string
	line    []byte
}

// NewReader reads events from r; a line longer than maxLine bytes (0: 1 MiB)
// is an error.
func NewReader(r io.Reader, maxLine int) *Reader {
	if maxLine <= 0 {
		maxLine = 1 << 20
	}
	return &Reader{r: bufio.NewReaderSize(r, 4096), maxLine: maxLine}
}

// Next returns the next event. At the end of the input it returns io.EOF;
// an event not terminated by a blank line before the end is discarded, as
// the standard says.
func (r *Reader) Next() (Event, error) {
	var (
		ev      Event
		data    strings.Builder
		hasData bool
	)
	for {
		line, err := r.readLine()
		if err != nil {
			return Event{}, err
		}
		if len(line) == 0 {
			if !hasData {
				ev = Event{}
				continue
			}
			ev.Data = data.String()
			ev.ID = r.lastID
			return ev, nil
		}
		if line[0] == ':' {
			continue
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "event":
			ev.Type = string(value)
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.Write(value)
			hasData = true
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				r.lastID = string(value)
				ev.HasID = true
			}
		case "retry":
			if n, err := strconv.Atoi(string(value)); err == nil && n >= 0 && isDigits(value) {
				ev.Retry = n
			}
		}
	}
}

func isDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return len(b) > 0
}

// readLine returns one line without its terminator (\n, \r\n or \r).
func (r *Reader) readLine() ([]byte, error) {
	r.line = r.line[:0]
	for {
		b, err := r.r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, io.EOF // an unterminated last line is dropped
			}
			return nil, err
		}
		switch b {
		case '\n':
			return r.line, nil
		case '\r':
			if nb, err := r.r.Peek(1); err == nil && nb[0] == '\n' {
				_, _ = r.r.ReadByte()
			}
			return r.line, nil
		}
		if len(r.line) >= r.maxLine {
			return nil, fmt.Errorf("%w: over %d bytes", ErrLineTooLong, r.maxLine)
		}
		r.line = append(r.line, b)
	}
}

// AppendEvent appends the wire form of ev to dst: id, event and retry
// fields when set, one data line per line of Data, and the blank line that
// dispatches it. Line breaks in ID and Type are dropped; they cannot be
// represented.
func AppendEvent(dst []byte, ev Event) []byte {
	if ev.ID != "" || ev.HasID {
		dst = append(dst, "id: "...)
		dst = appendOneLine(dst, ev.ID)
		dst = append(dst, '\n')
	}
	if ev.Type != "" {
		dst = append(dst, "event: "...)
		dst = appendOneLine(dst, ev.Type)
		dst = append(dst, '\n')
	}
	if ev.Retry > 0 {
		dst = append(dst, "retry: "...)
		dst = strconv.AppendInt(dst, int64(ev.Retry), 10)
		dst = append(dst, '\n')
	}
	data := ev.Data
	for {
		i := strings.IndexAny(data, "\r\n")
		dst = append(dst, "data: "...)
		if i < 0 {
			dst = append(dst, data...)
			dst = append(dst, '\n')
			break
		}
		dst = append(dst, data[:i]...)
		dst = append(dst, '\n')
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
	return append(dst, '\n')
}

func appendOneLine(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '\n' && c != '\r' && c != 0 {
			dst = append(dst, c)
		}
	}
	return dst
}

// HeaderLastEventID is the request header in which a reconnecting
// EventSource sends the id of the last event it received.
const HeaderLastEventID = "Last-Event-ID"

// ErrBadLastEventID is returned by ResumeSeq for a Last-Event-ID that is
// not a sequence number.
var ErrBadLastEventID = errors.New("sse: Last-Event-ID is not a sequence number")

// ResumeSeq reads the Last-Event-ID of h for a stream whose event ids are
// sequence numbers: next is the number after it, where the client
// resumes, and ok is false when h has none. An id that is not a decimal
// number of at most 20 digits, or is the largest uint64 (nothing can
// follow it), is ErrBadLastEventID.
func ResumeSeq(h http.Header) (next uint64, ok bool, err error) {
	id := h.Get(HeaderLastEventID)
	if id == "" {
		return 0, false, nil
	}
	if len(id) > 20 {
		return 0, false, ErrBadLastEventID
	}
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil || n == math.MaxUint64 {
		return 0, false, ErrBadLastEventID
	}
	return n + 1, true, nil
}
