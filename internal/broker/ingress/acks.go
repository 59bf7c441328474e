package ingress

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/broker/groupcommit"
	"github.com/semaq/semaq/internal/broker/wire"
	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/internal/reserved"
)

// The reply subject a stored message carries, and the acks that come back
// to it. JetStream acks a stored message to its reply subject: the
// publisher's own, unless the ingress has to see the ack first — to hold
// it for the group commit of an fsync stream (ackRouter), to time it
// (latencySampler), or to forward it to a reply the NATS server maps for
// another account (_R_.…), which the node's account may not publish to
// from the ingress's connections.

// mappedReplyPrefix starts a reply subject the NATS server mapped for a
// client of another account: every store user's with auth on, and the
// public user's.
const mappedReplyPrefix = "_R_."

// replyFor is the reply subject p is stored with.
func (in *Ingress) replyFor(p *publication) string {
	r := p.m.Reply
	switch {
	case r == "":
		return ""
	case p.stream.commit != nil:
		in.acks.sent.Add(1)
		return in.acks.prefix + r
	}
	if via, ok := in.lat.sample(p.obs.po, r, p.received); ok {
		return via // the sampler forwards the ack, whatever the reply
	}
	return in.ReplyVia(r)
}

// ReplyVia is the reply subject a message stored for a client carries:
// the client's own, or, for a reply the NATS server mapped for another
// account (_R_.…), the ack router's, which forwards the ack from the
// egress connection. The token relay stores with it too.
func (in *Ingress) ReplyVia(reply string) string {
	if !strings.HasPrefix(reply, mappedReplyPrefix) {
		return reply
	}
	in.acks.sent.Add(1)
	return in.acks.prefix + reply
}

// ReplyDropped undoes ReplyVia (or replyFor) for a message that was not
// published after all: no ack will come for it.
func (in *Ingress) ReplyDropped(reply, via string) {
	if via != reply {
		in.acks.sent.Add(^uint64(0))
	}
}

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

// ackSeq reads the sequence of JetStream's ack of a message stored now,
// without decoding it all (this runs once per chained message): any
// error, duplicate or other reply reports false. JetStream writes
// "seq":<digits>; SemaQ's stream names hold no quotes.
func ackSeq(data []byte) (uint64, bool) {
	if bytes.Contains(data, []byte(`"error"`)) || bytes.Contains(data, []byte(`"duplicate"`)) {
		return 0, false // JetStream names "duplicate" only when it is true
	}
	i := bytes.Index(data, []byte(`"seq":`))
	if i < 0 {
		return 0, false
	}
	var seq uint64
	j := i + len(`"seq":`)
	for ; j < len(data) && data[j] >= '0' && data[j] <= '9'; j++ {
		seq = seq*10 + uint64(data[j]-'0')
	}
	return seq, j > i+len(`"seq":`)
}

// ackRouter receives JetStream's PubAcks for the replies it gave out
// (prefix + the publisher's reply) on one wildcard subscription of the
// ingress's reader connection, and hands each to its stream's committer,
// or forwards it. The publisher's reply subject travels in the ack subject
// itself, so no table of in-flight messages is kept.
type ackRouter struct {
	prefix     string
	committers atomic.Pointer[map[string]*groupcommit.Committer]
	// forward sends the acks no committer holds on: Ingress.forward.
	forward func(reply string, data []byte)

	// sent counts messages given this router's or the sampler's reply
	// subject, routed the acks received; Shutdown waits for them to meet.
	sent, routed atomic.Uint64
}

// setCommitter swaps in a copy of the committer table with name set to c
// (nil removes it). The router reads the table without locks.
func (r *ackRouter) setCommitter(name string, c *groupcommit.Committer) {
	old := *r.committers.Load()
	next := make(map[string]*groupcommit.Committer, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	if c == nil {
		delete(next, name)
	} else {
		next[name] = c
	}
	r.committers.Store(&next)
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
		r.forward(reply, m.Data)
		return
	}
	c := (*r.committers.Load())[string(stream)]
	if c == nil {
		// Not an fsync stream (a mapped reply), or one that stopped being
		// fsync between publish and ack: the write is at JetStream's own
		// durability.
		r.forward(reply, m.Data)
		return
	}
	c.Hold(reply, bytes.Clone(m.Data))
}

// wait waits, bounded by ctx, until every reply given out has had its ack.
func (r *ackRouter) wait(ctx context.Context) error {
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for r.sent.Load() != r.routed.Load() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("ingress: %d acks still outstanding: %w", r.sent.Load()-r.routed.Load(), ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}

// latencySampler times sampled messages from receipt to JetStream's ack:
// their reply subject is its own (prefix.<pattern id>.<unix nanos>.<the
// publisher's reply>), it observes the time and forwards the ack. It shares
// the ack router's sent/routed counters, so Shutdown waits for these acks
// too.
type latencySampler struct {
	prefix string
	acks   *ackRouter

	mu      sync.Mutex
	ids     map[*metrics.Subject]int
	handles atomic.Pointer[[]*metrics.Subject] // by id; grows under mu
}

// start subscribes on nc; acks are forwarded on out (the egress).
func (l *latencySampler) start(nc *nats.Conn, out func(*nats.Msg), acks *ackRouter) error {
	l.prefix = reserved.LatencyInbox + nuid.Next() + "."
	l.acks = acks
	sub, err := nc.Subscribe(l.prefix+">", func(m *nats.Msg) { l.route(out, m) })
	if err != nil {
		return fmt.Errorf("ingress: latency subscription: %w", err)
	}
	if err := sub.SetPendingLimits(pendingMsgs, pendingBytes); err != nil {
		return fmt.Errorf("ingress: %w", err)
	}
	return nil
}

// id numbers a pattern's handle for the reply subject; -1 when there is
// nothing to record (no metrics).
func (l *latencySampler) id(sm *metrics.Subject) int {
	if sm == nil {
		return -1
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if id, ok := l.ids[sm]; ok {
		return id
	}
	if l.ids == nil {
		l.ids = make(map[*metrics.Subject]int)
	}
	var cur []*metrics.Subject
	if p := l.handles.Load(); p != nil {
		cur = *p
	}
	next := append(cur[:len(cur):len(cur)], sm)
	l.handles.Store(&next)
	l.ids[sm] = len(cur)
	return len(cur)
}

// sample gives out a timed reply subject for reply when this message is
// sampled. A failed publish undoes the count like any reply the ingress
// replaced. A mapped reply (_R_.…) is sampled too: the sampler forwards
// the ack from the egress connection.
func (l *latencySampler) sample(po *pattern, reply string, received time.Time) (string, bool) {
	if l.prefix == "" || po.id < 0 || reply[0] == '$' || received.IsZero() || !po.sm.Sample() {
		return "", false
	}
	l.acks.sent.Add(1)
	return l.prefix + strconv.Itoa(po.id) + "." + strconv.FormatInt(received.UnixNano(), 10) + "." + reply, true
}

func (l *latencySampler) route(out func(*nats.Msg), m *nats.Msg) {
	defer l.acks.routed.Add(1)
	id, ts, reply, ok := parseLatencyAck(m.Subject, l.prefix)
	if !ok {
		return
	}
	// Headers too: a status reply (no responders) must reach the publisher
	// as one.
	out(&nats.Msg{Subject: reply, Header: m.Header, Data: m.Data})
	if hs := l.handles.Load(); hs != nil && id < len(*hs) {
		(*hs)[id].IngressLatency(time.Since(time.Unix(0, ts)))
	}
}

// parseLatencyAck splits a sampled ack's subject: prefix, pattern id, unix
// nanos, the publisher's reply. The reply is never in a reserved ($)
// namespace: the broker forwards to it with the internal user's rights.
func parseLatencyAck(subject, prefix string) (id int, ts int64, reply string, ok bool) {
	rest, found := strings.CutPrefix(subject, prefix)
	if !found {
		return 0, 0, "", false
	}
	idS, rest, _ := strings.Cut(rest, ".")
	tsS, reply, _ := strings.Cut(rest, ".")
	id, err1 := strconv.Atoi(idS)
	ts, err2 := strconv.ParseInt(tsS, 10, 64)
	if err1 != nil || err2 != nil || id < 0 || ts <= 0 || reply == "" || strings.HasPrefix(reply, "$") {
		return 0, 0, "", false
	}
	return id, ts, reply, true
}
