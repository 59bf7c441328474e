package semaq

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A fetch's jobs travel to the worker in batch frames: one NATS message
// carries many jobs, which costs one protocol message per batch instead of
// one per job. A frame is
//
//	"SQJ1" job*
//	job    = uvarint(len(reply)) reply  uvarint(nh) (uvarint(len k) k uvarint(len v) v)*nh
//	         uvarint(len(data)) data
//
// Header names repeat for multi-valued headers. The frame message's own
// headers carry HdrQueueStatus and HdrQueueCount (docs/queues.md).

// JobFrameMagic starts every batch frame.
const JobFrameMagic = "SQJ1"

// FrameJob is one job of a batch frame.
type FrameJob struct {
	Reply  string
	Header map[string][]string
	Data   []byte
}

// ErrBadFrame is matched by every error of ParseJobFrame.
var ErrBadFrame = errors.New("semaq: invalid job frame")

// AppendJobFrameHeader starts a frame.
func AppendJobFrameHeader(b []byte) []byte { return append(b, JobFrameMagic...) }

// AppendFrameJob appends one job: its reply subject, the broker's extra
// headers (name, value pairs), the stored headers, and its data.
func AppendFrameJob(b []byte, reply string, hdr map[string][]string, extra []string, data []byte) []byte {
	b = appendString(b, reply)
	n := len(extra) / 2
	for _, vs := range hdr {
		n += len(vs)
	}
	b = binary.AppendUvarint(b, uint64(n))
	// The broker's headers first: a reader taking the first value of a
	// name gets them, whatever the publisher put in the stored headers.
	for i := 0; i+1 < len(extra); i += 2 {
		b = appendString(b, extra[i])
		b = appendString(b, extra[i+1])
	}
	for k, vs := range hdr {
		for _, v := range vs {
			b = appendString(b, k)
			b = appendString(b, v)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(data)))
	return append(b, data...)
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// maxFrameHeaders bounds the headers of one job in a frame: far more than
// an envelope of 16 KiB can hold, few enough to refuse a hostile frame.
const maxFrameHeaders = 4096

// ParseJobFrame decodes a batch frame. Data slices alias b.
func ParseJobFrame(b []byte) ([]FrameJob, error) {
	if len(b) < len(JobFrameMagic) || string(b[:len(JobFrameMagic)]) != JobFrameMagic {
		return nil, fmt.Errorf("%w: does not start with %q", ErrBadFrame, JobFrameMagic)
	}
	p := &frameReader{b: b[len(JobFrameMagic):]}
	var jobs []FrameJob
	for len(p.b) > 0 {
		var j FrameJob
		reply, err := p.str("reply subject")
		if err != nil {
			return nil, fmt.Errorf("%w: job %d: %v", ErrBadFrame, len(jobs), err)
		}
		j.Reply = reply
		nh, err := p.uvarint("header count")
		if err != nil || nh > maxFrameHeaders {
			return nil, fmt.Errorf("%w: job %d: header count: %v", ErrBadFrame, len(jobs), errOr(err, "over 4096"))
		}
		if nh > 0 {
			j.Header = make(map[string][]string, nh)
		}
		for i := uint64(0); i < nh; i++ {
			k, err := p.str("header name")
			if err != nil {
				return nil, fmt.Errorf("%w: job %d: %v", ErrBadFrame, len(jobs), err)
			}
			v, err := p.str("header value")
			if err != nil {
				return nil, fmt.Errorf("%w: job %d: %v", ErrBadFrame, len(jobs), err)
			}
			j.Header[k] = append(j.Header[k], v)
		}
		data, err := p.bytes("data")
		if err != nil {
			return nil, fmt.Errorf("%w: job %d: %v", ErrBadFrame, len(jobs), err)
		}
		j.Data = data
		jobs = append(jobs, j)
	}
	return jobs, nil
}

func errOr(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}

type frameReader struct{ b []byte }

func (r *frameReader) uvarint(what string) (uint64, error) {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		return 0, fmt.Errorf("%s: bad length", what)
	}
	r.b = r.b[n:]
	return v, nil
}

func (r *frameReader) bytes(what string) ([]byte, error) {
	n, err := r.uvarint(what)
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r.b)) {
		return nil, fmt.Errorf("%s: %d bytes announced, %d left", what, n, len(r.b))
	}
	out := r.b[:n:n]
	r.b = r.b[n:]
	return out, nil
}

func (r *frameReader) str(what string) (string, error) {
	b, err := r.bytes(what)
	return string(b), err
}
