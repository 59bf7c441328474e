package semaq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
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

// ErrBadFrame is matched by every error of ParseJobFrame and
// ParseBatchFrame.
var ErrBadFrame = errors.New("semaq: invalid frame")

// errOverBound is matched by the error of a frame with more entries than
// its bound.
var errOverBound = errors.New("over the bound")

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

// ParseJobFrame decodes a batch frame. Data slices alias b; the reply
// subject and headers are copied, all the strings of one job in one
// allocation.
func ParseJobFrame(b []byte) ([]FrameJob, error) {
	if len(b) < len(JobFrameMagic) || string(b[:len(JobFrameMagic)]) != JobFrameMagic {
		return nil, fmt.Errorf("%w: does not start with %q", ErrBadFrame, JobFrameMagic)
	}
	return parseFrameEntries(b[len(JobFrameMagic):], "job", 0)
}

// parseFrameEntries decodes the entries of a job or batch frame after its
// magic: each a string (a job's reply subject, a batch message's
// subject), headers and data. noun names an entry in errors; max bounds
// their number (0: no bound).
func parseFrameEntries(b []byte, noun string, max int) ([]FrameJob, error) {
	first := "reply subject"
	if noun != "job" {
		first = "subject"
	}
	p := &frameReader{b: b}
	var (
		jobs []FrameJob
		strs [][]byte // the job's reply, then its header names and values
	)
	for len(p.b) > 0 {
		if max > 0 && len(jobs) == max {
			return nil, fmt.Errorf("%w: more than %d %ss (%w)", ErrBadFrame, max, noun, errOverBound)
		}
		strs = strs[:0]
		reply, err := p.bytes(first)
		if err != nil {
			return nil, fmt.Errorf("%w: %s %d: %v", ErrBadFrame, noun, len(jobs), err)
		}
		strs = append(strs, reply)
		nh, err := p.uvarint("header count")
		if err != nil || nh > maxFrameHeaders {
			return nil, fmt.Errorf("%w: %s %d: header count: %v", ErrBadFrame, noun, len(jobs), errOr(err, "over 4096"))
		}
		size := len(reply)
		for i := uint64(0); i < nh; i++ {
			k, err := p.bytes("header name")
			if err != nil {
				return nil, fmt.Errorf("%w: %s %d: %v", ErrBadFrame, noun, len(jobs), err)
			}
			v, err := p.bytes("header value")
			if err != nil {
				return nil, fmt.Errorf("%w: %s %d: %v", ErrBadFrame, noun, len(jobs), err)
			}
			strs = append(strs, k, v)
			size += len(k) + len(v)
		}
		data, err := p.bytes("data")
		if err != nil {
			return nil, fmt.Errorf("%w: %s %d: %v", ErrBadFrame, noun, len(jobs), err)
		}
		var sb strings.Builder
		sb.Grow(size)
		for _, s := range strs {
			sb.Write(s)
		}
		all := sb.String()
		cut := func(n int) string {
			s := all[:n]
			all = all[n:]
			return s
		}
		j := FrameJob{Reply: cut(len(reply)), Data: data}
		if nh > 0 {
			j.Header = make(map[string][]string, nh)
			// One array for the values; a name given again gets its own.
			vals := make([]string, nh)
			for i := 1; i < len(strs); i += 2 {
				k, v := cut(len(strs[i])), cut(len(strs[i+1]))
				if have, ok := j.Header[k]; ok {
					j.Header[k] = append(have, v)
					continue
				}
				n := i / 2
				vals[n] = v
				j.Header[k] = vals[n : n+1 : n+1]
			}
		}
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
