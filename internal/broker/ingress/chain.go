package ingress

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/chainhead"
	"github.com/semaq/semaq/semaq"
)

// Session chains (docs/provenance.md). A stream with provenance or a
// strict session order chains the messages of each session (tenant and
// AI-Session): each carries its number in the chain and, with provenance,
// its hash over its content and the previous link's hash; with a strict
// order, its AI-Timestamp (or AI-Seq) must come after the last one's.
//
// A chain must be the same whichever node stores its messages and however
// many publishers race, so a session's messages are serialised by
// JetStream itself, not by a lock: the stream keeps one head record per
// session (semaq.ChainHeadSubject; each rolls up the one before), and a
// batch of a session's messages is written in two steps (chainsend.go):
//
//  1. the head record the batch will make — its links, last hash and order
//     value, and the base it builds on — with
//     Nats-Expected-Last-Subject-Sequence: the old record's sequence. Of
//     two nodes that built on the same head, one stores its record; the
//     other is refused, reads the head again and builds anew.
//  2. the batch's messages, each with Nats-Expected-Last-Subject-Sequence
//     on the head record's subject: the new record's sequence. They are
//     stored while that record is the head, and refused once another
//     writer has moved it: the record is a fence.
//
// A reader of a head whose batch is not all stored (its writer died, or is
// late) waits out chainhead.Window, then fences the batch off with a
// record of what is stored, looks once more for messages stored before
// the fence, and goes on from there (chainstart.go, settleHead). The
// links of a session are therefore one run, in stream order, on any node
// and across crashes; the messages themselves are ordinary appends, not
// atomic batches, which JetStream stages on disk on a single node.
//
// On one node, a session has at most one batch in flight; what arrives
// meanwhile waits in the session's queue and goes out as the next batch,
// so a busy session costs two round trips per batch, not per message, and
// sessions go in parallel. A message with a Nats-Msg-Id ends its batch:
// should JetStream find it a duplicate, only the batch's last link is not
// stored, and the writer settles the head back to the one before.

// Bounds of the messages the chains hold on one node
// (docs/provenance.md#limits). Past them a message is refused as
// overloaded, and retried.
const (
	// maxChainQueue bounds the messages waiting in one session's queue.
	maxChainQueue = 1000
	// maxChainBytes bounds the bytes held by every session's queue and
	// batch in flight on the node.
	maxChainBytes = 64 << 20
	// maxChainSessions bounds the sessions a node keeps a head for; idle
	// ones are dropped past it (their heads are read again when needed).
	maxChainSessions = 100_000
	// maxChainBatch bounds the messages of one batch, and
	// maxChainBatchBytes their bytes; on a cluster, where they are stored
	// one after another, maxChainBatchCluster (a reader settles a batch
	// still unstored chainhead.Window after its head record).
	maxChainBatch        = 500
	maxChainBatchCluster = 100
	maxChainBatchBytes   = 4 << 20
	// chainAckWait bounds the wait for a batch's acks; chainRetries the
	// times a session's messages are built again after losing a race.
	chainAckWait = 30 * time.Second
	chainRetries = 64
)

// chainKey names one session's chain.
type chainKey struct {
	stream, tenant, session string
}

// chains holds the sessions of the chained streams this node stores
// messages for.
type chains struct {
	prefix string // <IngressAckInbox><nuid>.: the replies of batches' records and messages
	conn   *nats.Conn
	key    ed25519.PrivateKey // the node's signing key; nil: none
	keyID  string

	mu       sync.Mutex
	sessions map[chainKey]*chainSession
	inflight map[string]*chainBatch // by batch id
	bytes    int64                  // held, queued or in flight
}

// chainSession is one session's chain as this node knows it.
type chainSession struct {
	key      chainKey
	st       *stream
	head     chainhead.Head
	loaded   bool // head is the stream's as of the last ack or read
	busy     bool // a batch or a head read is out; only its owner builds
	queue    []*chainMsg
	retries  int
	lastSeen time.Time
}

// chainMsg is a message waiting for its chain.
type chainMsg struct {
	subject  string // stored under
	reply    string // the publisher's, "" none
	header   nats.Header
	data     []byte
	received time.Time
	order    semaq.OrderValue
	hasOrder bool
	fsync    bool
	st       *stream
}

func (cm *chainMsg) size() int64 { return int64(len(cm.subject) + len(cm.data) + 256) }

// chainKeyOf is the session p belongs to, and whether p is chained: its
// stream chains sessions and it names one.
func chainKeyOf(p *publication) (chainKey, bool) {
	if !p.stream.chain.On() || p.env.Session == "" {
		return chainKey{}, false
	}
	return chainKey{p.stream.name, p.env.Tenant, p.env.Session}, true
}

// unchainable refuses a message of an atomic batch that its stream would
// chain: an atomic batch is stored as it is sent, and a chain's batch is
// the session's own (with its head record). Fast batches' messages are
// chained one by one.
func unchainable(p *publication) *semaq.APIError {
	if _, ok := chainKeyOf(p); !ok {
		return nil
	}
	return semaq.NewAPIError(semaq.ErrBadBatch, "stream %s chains its sessions (provenance or session order), and message of session %q cannot be in an atomic batch; publish it alone or in a fast batch",
		p.stream.name, p.env.Session)
}

// checkOrder is the early check of a strictly ordered session, before
// the schema: the message must carry its order value, after the last one
// this node knows of. The final check is made against the head when the
// batch is built.
func (in *Ingress) checkOrder(p *publication) *semaq.APIError {
	st := p.stream
	if st.chain.Order == "" || p.env.Session == "" {
		return nil
	}
	name := semaq.OrderHeader(st.chain.Order)
	vs := p.m.Header.Values(name)
	if len(vs) != 1 {
		if len(vs) == 0 {
			return semaq.NewAPIError(semaq.ErrEnvelope, "publish on %s: stream %s orders each session strictly by %s; session %q's message has none",
				p.m.Subject, st.name, name, p.env.Session)
		}
		return semaq.NewAPIError(semaq.ErrEnvelope, "publish on %s: header %s is given %d times", p.m.Subject, name, len(vs))
	}
	v, err := semaq.ParseOrder(st.chain.Order, vs[0])
	if err != nil {
		return semaq.NewAPIError(semaq.ErrEnvelope, "publish on %s: %v", p.m.Subject, err)
	}
	p.order, p.hasOrder = v, true
	k, _ := chainKeyOf(p)
	in.chains.mu.Lock()
	defer in.chains.mu.Unlock()
	if s := in.chains.sessions[k]; s != nil {
		if last, ok := s.lastOrder(); ok && !v.After(last) {
			return orderRefusal(k, name, v, last)
		}
	}
	return nil
}

// orderRefusal is the refusal of an out-of-order message.
func orderRefusal(k chainKey, name string, v, last semaq.OrderValue) *semaq.APIError {
	return semaq.NewAPIError(semaq.ErrSessionOrder, "stream %s: session %q: %s %s is not after the last accepted %s; nothing was stored",
		k.stream, k.session, name, v.Text, last.Text)
}

// lastOrder is the last order value of s, queued or stored.
func (s *chainSession) lastOrder() (semaq.OrderValue, bool) {
	for i := len(s.queue) - 1; i >= 0; i-- {
		if s.queue[i].hasOrder {
			return s.queue[i].order, true
		}
	}
	return s.head.Order, s.loaded && s.head.HasOrder
}

// chain hands p to its session's chain instead of appending it: it goes
// out with the session's next batch, and its publisher's ack comes when
// it is stored.
func (in *Ingress) chain(p *publication, k chainKey) *semaq.APIError {
	cs := &in.chains
	if cs.conn == nil {
		return semaq.NewAPIError(semaq.ErrUnavailable, "stream %s chains its sessions, and this ingress has no connection to store chains on", k.stream)
	}
	m := p.m
	for _, h := range []string{semaq.HdrExpectedLastSeq, semaq.HdrExpectedLastSubjSeq, semaq.HdrExpectedLastSubjSeqSubj, semaq.HdrExpectedLastMsgID} {
		if len(m.Header[h]) > 0 {
			return semaq.NewAPIError(semaq.ErrEnvelope, "publish on %s: stream %s chains session %q, and its messages may not carry %s: the chain sets the conditions they are stored under",
				m.Subject, k.stream, k.session, h)
		}
	}
	p.obs.carry(m.Header)
	cm := &chainMsg{subject: p.subject, reply: m.Reply, header: m.Header, data: bytes.Clone(m.Data), received: p.received,
		order: p.order, hasOrder: p.hasOrder, fsync: p.stream.commit != nil, st: p.stream}
	cs.mu.Lock()
	s := cs.sessions[k]
	if s == nil {
		if e := cs.roomLocked(); e != nil {
			cs.mu.Unlock()
			return e
		}
		s = &chainSession{key: k}
		cs.sessions[k] = s
	}
	s.st, s.lastSeen = p.stream, p.received
	switch {
	case len(s.queue) >= maxChainQueue:
		cs.mu.Unlock()
		return busyRefusal("stream %s: session %q has %d messages waiting for storage, the most it may; retry after 100ms", k.stream, k.session, len(s.queue))
	case cs.bytes+cm.size() > maxChainBytes:
		cs.mu.Unlock()
		return busyRefusal("stream %s: the node holds %d bytes of chained messages waiting for storage, the most it may; retry after 100ms", k.stream, cs.bytes)
	}
	if cm.hasOrder {
		if last, ok := s.lastOrder(); ok && !cm.order.After(last) {
			cs.mu.Unlock()
			return orderRefusal(k, semaq.OrderHeader(p.stream.chain.Order), cm.order, last)
		}
	}
	cs.bytes += cm.size()
	s.queue = append(s.queue, cm)
	kick := !s.busy
	if kick {
		s.busy = true
	}
	cs.mu.Unlock()
	in.metrics.ChainQueued(1)
	if kick {
		in.kickChain(s)
	}
	return nil
}

func busyRefusal(format string, args ...any) *semaq.APIError {
	e := semaq.NewAPIError(semaq.ErrChainBusy, format, args...)
	e.RetryAfterMs = 100
	return e
}

// roomLocked makes room for one more session: idle ones are dropped
// past maxChainSessions. cs.mu is held.
func (cs *chains) roomLocked() *semaq.APIError {
	if len(cs.sessions) < maxChainSessions {
		return nil
	}
	for k, s := range cs.sessions {
		if !s.busy && len(s.queue) == 0 {
			delete(cs.sessions, k)
			if len(cs.sessions) < maxChainSessions*9/10 {
				break
			}
		}
	}
	if len(cs.sessions) >= maxChainSessions {
		return busyRefusal("chains: %d sessions have messages waiting for storage on this node, the most it holds; retry after 100ms", len(cs.sessions))
	}
	return nil
}

// kickChain sends s's next batch; s is busy, owned by the caller. A
// session whose head is not known reads it first, off the caller's
// goroutine.
func (in *Ingress) kickChain(s *chainSession) {
	in.chains.mu.Lock()
	loaded := s.loaded
	in.chains.mu.Unlock()
	if loaded {
		in.sendChain(s)
		return
	}
	if !in.gate.Go("ingress/chain-head", func(ctx context.Context) { in.loadHead(ctx, s) }) {
		in.failSession(s, semaq.NewAPIError(semaq.ErrUnavailable, "stream %s: the node is shutting down; publish again", s.key.stream))
	}
}

// loadHead reads s's head record from the stream's leader, settles the
// batch it begins (chainstart.go), then sends s's batch.
func (in *Ingress) loadHead(ctx context.Context, s *chainSession) {
	in.chains.mu.Lock()
	order := s.st.chain.Order
	in.chains.mu.Unlock()
	h, err := in.settleHead(ctx, s.key, order)
	if err != nil {
		in.failSession(s, semaq.NewAPIError(semaq.ErrUnavailable, "stream %s: reading session %q's chain head: %v; publish again", s.key.stream, s.key.session, err))
		return
	}
	in.chains.mu.Lock()
	s.head, s.loaded = h, true
	in.chains.mu.Unlock()
	in.sendChain(s)
}

// failSession refuses every message queued for s with e, and frees s.
func (in *Ingress) failSession(s *chainSession, e *semaq.APIError) {
	cs := &in.chains
	cs.mu.Lock()
	msgs := s.queue
	s.queue, s.busy, s.loaded, s.retries = nil, false, false, 0
	for _, cm := range msgs {
		cs.bytes -= cm.size()
	}
	cs.mu.Unlock()
	in.answerChain(msgs, e)
}

// answerChain refuses msgs with e.
func (in *Ingress) answerChain(msgs []*chainMsg, e *semaq.APIError) {
	if len(msgs) == 0 {
		return
	}
	in.metrics.ChainQueued(-len(msgs))
	body := semaq.MarshalError(e)
	for _, cm := range msgs {
		in.metrics.ChainRefused(e.ErrCode)
		if cm.reply != "" {
			in.forward(cm.reply, body)
		}
	}
}
