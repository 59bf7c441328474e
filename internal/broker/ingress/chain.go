package ingress

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/broker/chainhead"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/provenance"
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
// session (semaq.ChainHeadSubject: the last link's hash, the number of
// links, the last order value), and the messages of a session go out as
// one JetStream atomic batch with a new head record last, which rolls up
// the old one and carries Nats-Expected-Last-Subject-Sequence: the old
// one's sequence. Two nodes that built on the same head cannot both
// commit: the loser's batch is refused whole, and it reads the head again
// and builds its messages anew. Nothing is held across nodes, and a crash
// between a message and its head cannot happen: they are stored together
// or not at all.
//
// On one node, a session has at most one batch in flight; what arrives
// meanwhile waits in the session's queue and goes out as the next batch,
// built on the head the last ack gave, so a busy session costs one round
// trip per batch, not per message, and sessions go in parallel.

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
	// maxChainBatch bounds the messages of one batch (JetStream takes
	// 1,000 with the head record), and maxChainBatchBytes their bytes.
	maxChainBatch      = 500
	maxChainBatchBytes = 4 << 20
	// chainAckWait bounds the wait for a batch's commit; chainRetries the
	// times a session's messages are built again after losing a race.
	chainAckWait = 30 * time.Second
	chainRetries = 16
)

// chainKey names one session's chain.
type chainKey struct {
	stream, tenant, session string
}

// chains holds the sessions of the chained streams this node stores
// messages for.
type chains struct {
	prefix string // <IngressAckInbox><nuid>.: the commits' replies
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
	alone    bool // goes in a batch of its own (a duplicate suspect)
	fsync    bool
	st       *stream
}

func (cm *chainMsg) size() int64 { return int64(len(cm.subject) + len(cm.data) + 256) }

// chainBatch is a session's batch in flight.
type chainBatch struct {
	id       string
	sess     *chainSession
	msgs     []*chainMsg
	next     chainhead.Head // the head once it commits
	prev     uint64         // the head record it replaces (0: none)
	deadline time.Time
}

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
// the batch commits.
func (in *Ingress) chain(p *publication, k chainKey) *semaq.APIError {
	cs := &in.chains
	if cs.conn == nil {
		return semaq.NewAPIError(semaq.ErrUnavailable, "stream %s chains its sessions, and this ingress has no connection to store chains on", k.stream)
	}
	m := p.m
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
	if !in.gate.Go("ingress/chain-head", func(context.Context) { in.loadHead(s) }) {
		in.failSession(s, semaq.NewAPIError(semaq.ErrUnavailable, "stream %s: the node is shutting down; publish again", s.key.stream))
	}
}

// loadHead reads s's head record from the stream's leader, then sends
// its batch.
func (in *Ingress) loadHead(s *chainSession) {
	in.chains.mu.Lock()
	order := s.st.chain.Order
	in.chains.mu.Unlock()
	h, err := in.readHead(s.key, order)
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

// sendChain builds s's next batch from its queue on its head and sends
// it; s is busy and its head loaded. With nothing queued s is idle again.
func (in *Ingress) sendChain(s *chainSession) {
	cs := &in.chains
	cs.mu.Lock()
	n, size := 0, 0
	for n < len(s.queue) && n < maxChainBatch && (n == 0 || size+len(s.queue[n].data) <= maxChainBatchBytes) {
		if s.queue[n].alone && n > 0 {
			break
		}
		size += len(s.queue[n].data)
		n++
		if s.queue[0].alone {
			break
		}
	}
	if n == 0 {
		s.busy = false
		cs.mu.Unlock()
		return
	}
	msgs := append([]*chainMsg(nil), s.queue[:n]...)
	s.queue = s.queue[n:]
	head, st := s.head, s.st
	cs.mu.Unlock()

	b := &chainBatch{id: "sqc" + nuid.Next(), sess: s, prev: head.Seq, deadline: time.Now().Add(chainAckWait)}
	var rest []*chainMsg
	b.msgs, rest, b.next = in.buildChain(s.key, st, head, msgs)
	cs.requeue(s, rest)
	if len(b.msgs) == 0 {
		in.chainDone(s, nil)
		return
	}
	cs.mu.Lock()
	cs.inflight[b.id] = b
	cs.mu.Unlock()
	if err := in.publishChain(b); err != nil {
		cs.mu.Lock()
		delete(cs.inflight, b.id)
		cs.mu.Unlock()
		// JetStream drops the incomplete batch when its timeout passes.
		in.chainDone(s, b.msgs)
		in.answerChain(b.msgs, semaq.NewAPIError(semaq.ErrUnavailable, "stream %s: storing session %q's messages: %v; publish again", s.key.stream, s.key.session, err))
	}
}

// chainDone ends s's batch of msgs (their bytes are freed) and sends the
// next one, if any is queued.
func (in *Ingress) chainDone(s *chainSession, msgs []*chainMsg) {
	cs := &in.chains
	cs.mu.Lock()
	for _, cm := range msgs {
		cs.bytes -= cm.size()
	}
	more := len(s.queue) > 0
	if !more {
		s.busy = false
	}
	cs.mu.Unlock()
	if more {
		in.kickChain(s)
	}
}

// buildChain links msgs to head, in order: their chain headers stamped,
// hashed and signed with provenance, their order checked against the last
// with a strict order (an out-of-order message is refused here). It
// returns the linked messages, the rest (from a message whose id another
// of the batch has: a duplicate within the batch would refuse it whole)
// and the head once the linked ones commit.
func (in *Ingress) buildChain(k chainKey, st *stream, head chainhead.Head, msgs []*chainMsg) (linked, rest []*chainMsg, next chainhead.Head) {
	next = head
	ids := map[string]bool{}
	for i, cm := range msgs {
		if cm.hasOrder && next.HasOrder && !cm.order.After(next.Order) {
			in.answerChain([]*chainMsg{cm}, orderRefusal(k, semaq.OrderHeader(st.chain.Order), cm.order, next.Order))
			in.chains.release(cm)
			continue
		}
		if id := cm.header.Get(semaq.HdrMsgID); id != "" {
			if ids[id] {
				return linked, msgs[i:], next
			}
			ids[id] = true
		}
		h := cm.header
		h.Del(semaq.HdrBatchID)
		h.Del(semaq.HdrBatchSeq)
		h.Del(semaq.HdrBatchCommit)
		next.Links++
		h[provenance.HdrChainSeq] = []string{strconv.FormatUint(next.Links, 10)}
		delete(h, provenance.HdrPrevHash)
		if st.chain.Provenance != "" {
			if next.Hash != "" {
				h[provenance.HdrPrevHash] = []string{next.Hash}
			}
			next.Hash = provenance.HashHex(&provenance.Link{Stream: k.stream, Subject: cm.subject, Seq: next.Links, Prev: next.Hash, Header: h, Data: cm.data})
			h[provenance.HdrHash] = []string{next.Hash}
			if st.chain.Provenance == semaq.ProvenanceSigned && in.chains.key != nil {
				h[provenance.HdrSignature] = []string{base64.StdEncoding.EncodeToString(provenance.Sign(in.chains.key, next.Hash))}
				h[provenance.HdrKeyID] = []string{in.chains.keyID}
			}
		}
		if cm.hasOrder {
			next.Order, next.HasOrder = cm.order, true
		}
		if next.First.IsZero() {
			next.First = cm.received
		}
		next.Last = cm.received
		linked = append(linked, cm)
	}
	return linked, nil, next
}

// release frees a message the chain refused.
func (cs *chains) release(cm *chainMsg) {
	cs.mu.Lock()
	cs.bytes -= cm.size()
	cs.mu.Unlock()
}

// requeue puts msgs back at the front of s's queue.
func (cs *chains) requeue(s *chainSession, msgs []*chainMsg) {
	if len(msgs) == 0 {
		return
	}
	cs.mu.Lock()
	s.queue = append(append([]*chainMsg(nil), msgs...), s.queue...)
	cs.mu.Unlock()
}

// publishChain sends b: its messages, then the session's new head record
// with the commit.
func (in *Ingress) publishChain(b *chainBatch) error {
	k := b.sess.key
	for i, cm := range b.msgs {
		h := cm.header
		h[semaq.HdrBatchID] = []string{b.id}
		h[semaq.HdrBatchSeq] = []string{strconv.Itoa(i + 1)}
		if err := in.chains.conn.PublishMsg(&nats.Msg{Subject: reserved.StoragePrefix + cm.subject, Header: h, Data: cm.data}); err != nil {
			return err
		}
	}
	hr := chainhead.Record(k.stream, k.tenant, k.session, b.next, b.prev)
	hr.Header[semaq.HdrBatchID] = []string{b.id}
	hr.Header[semaq.HdrBatchSeq] = []string{strconv.Itoa(len(b.msgs) + 1)}
	hr.Header[semaq.HdrBatchCommit] = []string{"1"}
	hr.Reply = in.chains.prefix + b.id
	return in.chains.conn.PublishMsg(hr)
}

// chainAck takes the commit's ack of a batch: every message is answered
// with its sequence, and the session's head moves on; or the batch lost a
// race and is built again on the head read anew; or it is refused.
func (in *Ingress) chainAck(m *nats.Msg) {
	cs := &in.chains
	id := m.Subject[len(cs.prefix):]
	cs.mu.Lock()
	b := cs.inflight[id]
	delete(cs.inflight, id)
	cs.mu.Unlock()
	if b == nil {
		return // answered already (overdue)
	}
	var ack struct {
		semaq.PubAck
		Error *struct {
			Code        int    `json:"code"`
			ErrCode     uint16 `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
		Count uint64 `json:"count"`
	}
	s := b.sess
	if err := json.Unmarshal(m.Data, &ack); err != nil || ack.Error == nil && (ack.Count != uint64(len(b.msgs)+1) || ack.Sequence < ack.Count) {
		in.chainLost(b, semaq.NewAPIError(semaq.ErrUnavailable, "stream %s: JetStream's answer to session %q's batch is not a batch ack: %.200s; publish again", s.key.stream, s.key.session, m.Data))
		return
	}
	if e := ack.Error; e != nil {
		switch e.ErrCode {
		case jsWrongLastSeq, jsWrongLastSeqConst, jsTooManyBatches:
			in.chainRetry(b, e.Description)
		case jsBatchDuplicate:
			in.chainDuplicate(b, ack.Stream)
		default:
			in.chainLost(b, semaq.NewAPIError(semaq.ErrUnavailable, "stream %s: storing session %q's messages: %s (%d)", s.key.stream, s.key.session, e.Description, e.ErrCode))
		}
		return
	}
	first := ack.Sequence - ack.Count + 1
	for i, cm := range b.msgs {
		body := mustJSON(semaq.PubAck{Stream: ack.Stream, Sequence: first + uint64(i), Domain: ack.Domain})
		in.ackChained(cm, body)
	}
	in.metrics.ChainQueued(-len(b.msgs))
	in.metrics.ChainStored(len(b.msgs))
	cs.mu.Lock()
	b.next.Seq = ack.Sequence
	s.head, s.loaded, s.retries = b.next, true, 0
	cs.mu.Unlock()
	in.chainDone(s, b.msgs)
}

// JetStream's errors a chain's batch handles.
const (
	jsWrongLastSeq = 10071 // another node moved the head first
	// jsWrongLastSeqConst: another batch of the session is being applied
	// (a cluster's stream checks batches in flight too).
	jsWrongLastSeqConst = 10164
	jsBatchDuplicate    = 10201 // a message id already stored
	jsTooManyBatches    = 10210 // too many atomic batches open on the stream
)

// ackChained answers a stored message's publisher: through the stream's
// committer for an fsync stream on one node, at once otherwise.
func (in *Ingress) ackChained(cm *chainMsg, body []byte) {
	if cm.reply == "" {
		return
	}
	if cm.fsync && cm.st.commit != nil {
		in.acks.sent.Add(1)
		in.acks.routed.Add(1)
		cm.st.commit.Hold(cm.reply, body)
		return
	}
	in.forward(cm.reply, body)
}

// chainRetry builds b's messages again on the head read anew: another
// node stored messages of the session first.
func (in *Ingress) chainRetry(b *chainBatch, why string) {
	s := b.sess
	in.metrics.ChainRetried()
	in.chains.mu.Lock()
	s.retries++
	give := s.retries > chainRetries
	if !give {
		s.queue = append(append([]*chainMsg(nil), b.msgs...), s.queue...)
		s.loaded = false
	}
	in.chains.mu.Unlock()
	if give {
		in.chainLost(b, busyRefusal("stream %s: session %q's messages lost the race for its chain %d times (%s); retry after 100ms", s.key.stream, s.key.session, chainRetries, why))
		return
	}
	in.kickChain(s)
}

// chainDuplicate handles a batch refused for a message id stored before:
// alone, that message is a duplicate, answered as JetStream answers one
// (without its sequence, which the refusal does not give); in a batch,
// each message goes again alone.
func (in *Ingress) chainDuplicate(b *chainBatch, stream string) {
	s := b.sess
	if len(b.msgs) == 1 {
		cm := b.msgs[0]
		in.metrics.ChainQueued(-1)
		in.ackChained(cm, mustJSON(semaq.PubAck{Stream: s.key.stream, Duplicate: true}))
		in.chainDone(s, b.msgs)
		return
	}
	for _, cm := range b.msgs {
		cm.alone = true
	}
	in.chains.mu.Lock()
	s.queue = append(append([]*chainMsg(nil), b.msgs...), s.queue...)
	in.chains.mu.Unlock()
	in.kickChain(s)
}

// chainLost refuses b's messages with e; the session's head is read again
// before its next batch (b may or may not be stored).
func (in *Ingress) chainLost(b *chainBatch, e *semaq.APIError) {
	s := b.sess
	in.chains.mu.Lock()
	s.loaded, s.retries = false, 0
	in.chains.mu.Unlock()
	in.answerChain(b.msgs, e)
	in.chainDone(s, b.msgs)
}

// sweepChains refuses the batches whose commit is overdue.
func (in *Ingress) sweepChains(now time.Time) {
	cs := &in.chains
	var late []*chainBatch
	cs.mu.Lock()
	for id, b := range cs.inflight {
		if now.After(b.deadline) {
			late = append(late, b)
			delete(cs.inflight, id)
		}
	}
	cs.mu.Unlock()
	for _, b := range late {
		in.chainLost(b, semaq.NewAPIError(semaq.ErrUnavailable,
			"no acknowledgement from storage within %s: the message may have been stored; publish it again with its Nats-Msg-Id", chainAckWait))
	}
}
