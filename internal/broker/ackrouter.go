package broker

import (
	"bytes"
	"sync/atomic"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/groupcommit"
	"github.com/semaq/semaq/internal/broker/wire"
)

// Durability modes of a stream.
const (
	DurabilityFsync    = "fsync"
	DurabilityInterval = "interval"
	DurabilityMemory   = "memory"
)

// ackStream reads the stream name of a successful JetStream PubAck without
// decoding it all: this runs once per durable message. Stream names SemaQ
// accepts hold no quotes or escapes, so the first "stream":"..." is it. Any
// error reply, or anything unexpected, reports false. The name is a slice
// of b: looked up as a map key it costs no allocation.
func ackStream(b []byte) ([]byte, bool) {
	if bytes.Contains(b, []byte(`"error"`)) {
		return nil, false
	}
	const key = `"stream":"`
	i := bytes.Index(b, []byte(key))
	if i < 0 {
		return nil, false
	}
	rest := b[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j <= 0 {
		return nil, false
	}
	return rest[:j], true
}

// ackRouter receives JetStream's PubAcks for fsync streams on one wildcard
// subscription of the ingress's reader connection (internal/broker/wire)
// and hands each to its stream's committer. The publisher's reply subject
// travels in the ack subject itself (prefix + reply), so no table of
// in-flight messages is kept.
type ackRouter struct {
	prefix     string
	committers atomic.Pointer[map[string]*groupcommit.Committer]
	nc         *nats.Conn // egress: forwards the acks no committer holds

	// sent counts messages given this router's reply subject, routed the
	// acks received; shutdown waits for them to meet.
	sent, routed atomic.Uint64
}

// route handles one PubAck, on the reader's parsing goroutine: m points
// into the connection's buffer, so what is held is copied.
func (r *ackRouter) route(m *wire.Msg) {
	defer r.routed.Add(1)
	if len(m.Subject) <= len(r.prefix) {
		return
	}
	reply := string(m.Subject[len(r.prefix):])
	stream, ok := ackStream(m.Data)
	if !ok {
		// Errors need no fsync: nothing was stored.
		_ = r.nc.Publish(reply, m.Data)
		return
	}
	c := (*r.committers.Load())[string(stream)]
	if c == nil {
		// The stream stopped being fsync between publish and ack: the
		// write is at JetStream's own durability.
		_ = r.nc.Publish(reply, m.Data)
		return
	}
	c.Hold(reply, bytes.Clone(m.Data))
}
