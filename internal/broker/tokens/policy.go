package tokens

import (
	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/semaq"
)

// Filter is the policy of one token stream (Deps.Filter): the relay feeds
// it the text of each record it admits, in order, under its lock, so it is
// never called concurrently. A rule may hold text back (an entity that
// may continue in the next record), mask it, or stop the stream.
type Filter interface {
	// Chunk filters one record's text: out is what the stored record
	// carries; stop ends the stream after out, reason says why.
	Chunk(text string) (out string, stop bool, reason string)
	// Flush decides the text held back when the writer ends the stream.
	Flush() (out string, stop bool, reason string)
}

// HdrPolicyStop on a terminal record the relay wrote says which policy
// stopped the stream.
const HdrPolicyStop = "SQ-Policy-Stop"

// filtered is what the relay stores for an admitted record of claim c, in
// order: the record with its text filtered, and, when a policy stopped the
// stream, a final record with finish reason content_filter after it; or,
// at the end, the text held back in a record of its own (no tokens) before
// the terminal record, which moves one seq up. final is the terminal
// record the relay wrote itself, nil if none. mu is held.
func (ts *Store) filtered(id string, c *claim, rec *semaq.TokenChunk, end bool, out *nats.Msg) (msgs []*nats.Msg, final *nats.Msg) {
	if ts.filter == nil {
		return []*nats.Msg{out}, nil
	}
	if !c.filterSet {
		c.filterSet = true
		if f := ts.filter(id, c.tenant); f != nil {
			c.filter = f
		}
	}
	f := c.filter
	if f == nil {
		return []*nats.Msg{out}, nil
	}
	if !end {
		if rec.Text == "" {
			return []*nats.Msg{out}, nil
		}
		text, stop, reason := f.Chunk(rec.Text)
		if text != rec.Text {
			r := *rec
			r.Text, r.Lens = text, nil
			out.Data = semaq.AppendTokenChunk(nil, &r)
		}
		if !stop {
			return []*nats.Msg{out}, nil
		}
		c.ended, c.stopped = true, reason
		fin := semaq.TokenChunk{Seq: rec.Seq + 1, Offset: rec.Offset + uint64(rec.N), TraceParent: rec.TraceParent,
			Final: &semaq.TokenFinal{FinishReason: semaq.FinishContentFilter}}
		final = &nats.Msg{Subject: storeSubject(c.tenant, id, true), Header: nats.Header{HdrPolicyStop: []string{reason}},
			Data: semaq.AppendTokenChunk(nil, &fin)}
		c.next, c.records = fin.Seq+1, c.records+1
		return []*nats.Msg{out, final}, final
	}
	text, stop, reason := f.Flush()
	if text == "" && !stop {
		return []*nats.Msg{out}, nil
	}
	r := *rec
	if text != "" {
		held := semaq.TokenChunk{Seq: r.Seq, Offset: r.Offset, Text: text, TraceParent: r.TraceParent}
		msgs = append(msgs, &nats.Msg{Subject: storeSubject(c.tenant, id, false), Data: semaq.AppendTokenChunk(nil, &held)})
		r.Seq++
		c.next, c.records = r.Seq+1, c.records+1
	}
	if stop && r.Final != nil {
		r.Final = &semaq.TokenFinal{FinishReason: semaq.FinishContentFilter, Usage: r.Final.Usage}
		if out.Header == nil {
			out.Header = nats.Header{}
		}
		out.Header.Set(HdrPolicyStop, reason)
		c.stopped = reason
	}
	out.Data = semaq.AppendTokenChunk(nil, &r)
	return append(msgs, out), nil
}
