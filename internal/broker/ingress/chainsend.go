package ingress

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/broker/chainhead"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/provenance"
	"github.com/semaq/semaq/semaq"
)

// chainBatch is a session's batch in flight: its head record first, then
// its messages (chain.go).
type chainBatch struct {
	id       string
	sess     *chainSession
	msgs     []*chainMsg
	base     chainhead.Head // the head it builds on
	next     chainhead.Head // the head its record says, once all are stored
	headSeq  uint64         // its record's sequence, once stored
	results  [][]byte       // each message's ack or refusal, by index
	waiting  int            // acks due
	resent   int            // messages sent again (inProcess)
	deadline time.Time
}

// JetStream's errors a chain's batch handles.
const (
	jsWrongLastSeq      = 10071 // another writer moved the head first
	jsWrongLastSeqConst = 10164 // the same, found with the write in flight (clustered)
)

// sendChain builds s's next batch from its queue on its head and sends its
// head record; s is busy and its head loaded. With nothing queued s is
// idle again.
func (in *Ingress) sendChain(s *chainSession) {
	cs := &in.chains
	cs.mu.Lock()
	n, size, most := 0, 0, maxChainBatch
	if in.clustered {
		most = maxChainBatchCluster
	}
	for n < len(s.queue) && n < most && (n == 0 || size+len(s.queue[n].data) <= maxChainBatchBytes) {
		size += len(s.queue[n].data)
		n++
		if s.queue[n-1].header.Get(semaq.HdrMsgID) != "" {
			break // a duplicate can only be the batch's last
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

	b := &chainBatch{id: "sqc" + nuid.Next(), sess: s, base: head, deadline: time.Now().Add(chainAckWait)}
	b.msgs, b.next = in.buildChain(s.key, st, head, msgs)
	if len(b.msgs) == 0 {
		in.chainDone(s, nil)
		return
	}
	b.next.Base, b.next.BaseHash, b.next.BaseOrder = head.Links, head.Hash, head.Order
	b.results = make([][]byte, len(b.msgs))
	b.waiting = 1
	cs.mu.Lock()
	cs.inflight[b.id] = b
	cs.mu.Unlock()
	k := s.key
	hr := chainhead.Record(k.stream, k.tenant, k.session, b.next, head.Seq)
	hr.Reply = cs.prefix + b.id + ".h"
	if err := cs.conn.PublishMsg(hr); err != nil {
		cs.mu.Lock()
		delete(cs.inflight, b.id)
		cs.mu.Unlock()
		in.chainLost(b, semaq.NewAPIError(semaq.ErrUnavailable, "stream %s: storing session %q's chain head: %v; publish again", k.stream, k.session, err))
	}
}

// buildChain links msgs to head, in order: their chain headers stamped,
// hashed and signed with provenance, their order checked against the last
// with a strict order (an out-of-order message is refused here). It
// returns the linked messages and the head once they are stored.
func (in *Ingress) buildChain(k chainKey, st *stream, head chainhead.Head, msgs []*chainMsg) (linked []*chainMsg, next chainhead.Head) {
	next = head
	for _, cm := range msgs {
		if cm.hasOrder && next.HasOrder && !cm.order.After(next.Order) {
			in.answerChain([]*chainMsg{cm}, orderRefusal(k, semaq.OrderHeader(st.chain.Order), cm.order, next.Order))
			in.chains.release(cm)
			continue
		}
		h := cm.header
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
	return linked, next
}

// release frees a message the chain refused.
func (cs *chains) release(cm *chainMsg) {
	cs.mu.Lock()
	cs.bytes -= cm.size()
	cs.mu.Unlock()
}

// chainAck takes an ack of a chain's batch: its head record's, upon which
// the messages go out, or a message's.
func (in *Ingress) chainAck(m *nats.Msg) {
	cs := &in.chains
	id, part, _ := strings.Cut(m.Subject[len(cs.prefix):], ".")
	cs.mu.Lock()
	b := cs.inflight[id]
	if b == nil {
		cs.mu.Unlock()
		return // answered already (overdue)
	}
	if part == "h" {
		cs.mu.Unlock()
		in.chainHeadAck(b, m.Data)
		return
	}
	i, err := strconv.Atoi(part)
	if err != nil || i < 0 || i >= len(b.results) || b.results[i] != nil {
		cs.mu.Unlock()
		return
	}
	data := m.Data
	if len(data) == 0 {
		data = statusError(m)
	}
	if in.clustered && b.resent < maxResends && inProcess(data) {
		// The stream's leader still counted the head record, or the
		// message before, as in flight: the same message, fenced the
		// same, goes again.
		b.resent++
		n := b.resent
		cs.mu.Unlock()
		if !in.gate.Go("ingress/chain-resend", func(ctx context.Context) {
			t := time.NewTimer(time.Duration(n) * 5 * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
				in.sendLinks(b, i)
			case <-ctx.Done():
			}
		}) {
			in.log.Debug("chain: a message not sent again: the node is shutting down", "stream", b.sess.key.stream)
		}
		return
	}
	b.results[i] = data
	b.waiting--
	if in.clustered && b.waiting > 0 {
		if !ackStored(data) {
			// The rest would be refused too, or leave a gap: not sent.
			body := semaq.MarshalError(semaq.NewAPIError(semaq.ErrUnavailable, "stream %s: an earlier message of session %q's batch was not stored, so this one was not sent; publish it again", b.sess.key.stream, b.sess.key.session))
			for j := i + 1; j < len(b.results); j++ {
				b.results[j] = body
			}
			b.waiting = 0
		} else {
			cs.mu.Unlock()
			in.sendLinks(b, i+1)
			return
		}
	}
	done := b.waiting == 0
	if done {
		delete(cs.inflight, id)
	}
	cs.mu.Unlock()
	if done {
		in.chainStored(b, false)
	}
}

// fenced reports whether data refuses a message because its session's
// head moved: another writer took the chain over.
func fenced(data []byte) bool {
	if !bytes.Contains(data, []byte(`"error"`)) {
		return false
	}
	var ack jsAck
	return json.Unmarshal(data, &ack) == nil && ack.Error != nil && (ack.Error.ErrCode == jsWrongLastSeq || ack.Error.ErrCode == jsWrongLastSeqConst)
}

// maxResends bounds the times a batch's messages are sent again for
// inProcess.
const maxResends = 16

// inProcess reports whether data is a clustered stream's refusal of a
// condition on a subject another write in flight names: the head record
// just acked, as the leader sees it for a moment more.
func inProcess(data []byte) bool {
	if !bytes.Contains(data, []byte(`"error"`)) {
		return false
	}
	var ack jsAck
	return json.Unmarshal(data, &ack) == nil && ack.Error != nil && ack.Error.ErrCode == jsWrongLastSeqConst
}

// ackStored reports whether data is JetStream's ack of a message stored
// now (not a duplicate).
func ackStored(data []byte) bool {
	seq, ok := ackSeq(data)
	return ok && seq != 0
}

// jsAck is JetStream's answer to a publish.
type jsAck struct {
	semaq.PubAck
	Error *struct {
		Code        int    `json:"code"`
		ErrCode     uint16 `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
}

// chainHeadAck takes the answer to b's head record: stored, the messages
// go out fenced by it; refused as stale, the session's head is read again
// and b's messages built anew.
func (in *Ingress) chainHeadAck(b *chainBatch, data []byte) {
	k := b.sess.key
	var ack jsAck
	if err := json.Unmarshal(data, &ack); err != nil || ack.Error == nil && ack.Sequence == 0 {
		in.dropBatch(b)
		in.chainLost(b, semaq.NewAPIError(semaq.ErrUnavailable, "stream %s: JetStream's answer to session %q's chain head is not an ack: %.200s; publish again", k.stream, k.session, data))
		return
	}
	if e := ack.Error; e != nil {
		in.dropBatch(b)
		if e.ErrCode == jsWrongLastSeq || e.ErrCode == jsWrongLastSeqConst {
			in.chainRetry(b, e.Description)
			return
		}
		in.chainLost(b, semaq.NewAPIError(semaq.ErrUnavailable, "stream %s: storing session %q's chain head: %s (%d); publish again", k.stream, k.session, e.Description, e.ErrCode))
		return
	}
	cs := &in.chains
	cs.mu.Lock()
	b.headSeq = ack.Sequence
	b.waiting = len(b.msgs)
	cs.mu.Unlock()
	in.sendLinks(b, 0)
}

// sendLinks publishes b's messages from i on, fenced by its head record:
// all of them on a single node, where JetStream takes them in order; on
// a cluster one at a time (the next when this one is acked), since a
// clustered stream refuses a message whose condition names a subject
// another message in flight names too.
func (in *Ingress) sendLinks(b *chainBatch, i int) {
	cs := &in.chains
	k := b.sess.key
	fence := semaq.ChainHeadSubject(k.stream, provenance.SessionKey(k.tenant, k.session))
	seq := strconv.FormatUint(b.headSeq, 10)
	for ; i < len(b.msgs); i++ {
		cm := b.msgs[i]
		h := cm.header
		h[semaq.HdrExpectedLastSubjSeq] = []string{seq}
		h[semaq.HdrExpectedLastSubjSeqSubj] = []string{fence}
		err := cs.conn.PublishMsg(&nats.Msg{Subject: reserved.StoragePrefix + cm.subject, Reply: cs.prefix + b.id + "." + strconv.Itoa(i), Header: h, Data: cm.data})
		if err != nil {
			// The ones not sent are refused when the batch is overdue;
			// the head is settled from the stream then.
			in.log.Warn("chain: publishing a session's message", "stream", k.stream, "err", err)
			return
		}
		if in.clustered {
			return
		}
	}
}

// dropBatch forgets b in flight.
func (in *Ingress) dropBatch(b *chainBatch) {
	in.chains.mu.Lock()
	delete(in.chains.inflight, b.id)
	in.chains.mu.Unlock()
}

// chainStored answers b's messages once every ack is in. When all are
// stored the session's head is the one b's record says; otherwise the
// stored ones are a run from the base (the rest fenced out, or the last a
// duplicate), and the head is settled to it before the next batch.
func (in *Ingress) chainStored(b *chainBatch, overdue bool) {
	s := b.sess
	stored := 0
	var links []chainhead.Link
	for i, data := range b.results {
		seq, ok := ackSeq(data)
		ok = ok && seq != 0
		if ok && stored == i {
			stored++
			cm := b.msgs[i]
			links = append(links, chainhead.Link{N: b.base.Links + uint64(i) + 1, Hash: cm.header.Get(provenance.HdrHash),
				Order: cm.order, HasOrder: cm.hasOrder, Seq: seq, Stored: cm.received})
		}
		if !ok && fenced(data) {
			data = semaq.MarshalError(semaq.NewAPIError(semaq.ErrUnavailable, "stream %s: session %q's chain was taken over by another writer while the message was on its way; publish it again",
				s.key.stream, s.key.session))
		}
		in.ackChained(b.msgs[i], data)
	}
	in.metrics.ChainQueued(-len(b.msgs))
	in.metrics.ChainStored(stored)
	cs := &in.chains
	switch {
	case stored == len(b.msgs):
		cs.mu.Lock()
		b.next.Seq = b.headSeq
		s.head, s.loaded, s.retries = b.next, true, 0
		cs.mu.Unlock()
	case overdue:
		// Some may be stored yet: the head is settled from the stream
		// (fenced, then looked at again) before the next batch.
		cs.mu.Lock()
		s.loaded = false
		cs.mu.Unlock()
	default:
		// Every answer is in, so what is stored is known: the head record,
		// which claims more, is replaced with it at once (and fences out
		// nothing, since nothing of the batch is still on its way).
		fixed := b.next.Upto(links)
		if in.gate.Go("ingress/chain-fix", func(ctx context.Context) { in.fixHead(ctx, b, fixed) }) {
			return
		}
		cs.mu.Lock()
		s.loaded = false
		cs.mu.Unlock()
	}
	in.chainDone(s, b.msgs)
}

// fixHead replaces b's head record with fixed, the run of b stored, then
// ends b.
func (in *Ingress) fixHead(ctx context.Context, b *chainBatch, fixed chainhead.Head) {
	s := b.sess
	ctx, cancel := context.WithTimeout(ctx, headSettleTimeout)
	defer cancel()
	seq, err := in.writeHead(ctx, s.key, fixed, b.headSeq)
	in.chains.mu.Lock()
	if err == nil {
		fixed.Seq = seq
		s.head, s.loaded = fixed, true
		in.metrics.ChainSettled()
	} else {
		s.loaded = false // read and settled before the next batch
	}
	in.chains.mu.Unlock()
	in.chainDone(s, b.msgs)
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

// ackChained answers a message's publisher: through the stream's
// committer for an fsync stream on one node, at once otherwise.
func (in *Ingress) ackChained(cm *chainMsg, body []byte) {
	if cm.reply == "" {
		return
	}
	if cm.fsync && cm.st.commit != nil && !strings.Contains(string(body), `"error"`) {
		in.acks.sent.Add(1)
		in.acks.routed.Add(1)
		cm.st.commit.Hold(cm.reply, body)
		return
	}
	in.forward(cm.reply, body)
}

// chainRetry builds b's messages again on the head read anew: another
// writer moved it first. Writers racing on one session back off for a
// random while, longer the more they lost.
func (in *Ingress) chainRetry(b *chainBatch, why string) {
	s := b.sess
	in.metrics.ChainRetried()
	in.chains.mu.Lock()
	s.retries++
	n := s.retries
	give := n > chainRetries
	if !give {
		for _, cm := range b.msgs {
			stripChain(cm.header)
		}
		s.queue = append(append([]*chainMsg(nil), b.msgs...), s.queue...)
		s.loaded = false
	}
	in.chains.mu.Unlock()
	if give {
		in.chainLost(b, busyRefusal("stream %s: session %q's messages lost the race for its chain %d times (%s); retry after 100ms", s.key.stream, s.key.session, chainRetries, why))
		return
	}
	backoff := time.Duration(rand.Int64N(int64(min(n, 10)) * int64(5*time.Millisecond)))
	if !in.gate.Go("ingress/chain-retry", func(ctx context.Context) {
		t := time.NewTimer(backoff)
		defer t.Stop()
		select {
		case <-t.C:
			in.kickChain(s)
		case <-ctx.Done():
			in.failSession(s, semaq.NewAPIError(semaq.ErrUnavailable, "stream %s: the node is shutting down; publish again", s.key.stream))
		}
	}) {
		in.failSession(s, semaq.NewAPIError(semaq.ErrUnavailable, "stream %s: the node is shutting down; publish again", s.key.stream))
	}
}

// stripChain takes a link's headers off a message built again.
func stripChain(h nats.Header) {
	for _, k := range []string{provenance.HdrChainSeq, provenance.HdrPrevHash, provenance.HdrHash, provenance.HdrSignature, provenance.HdrKeyID,
		semaq.HdrExpectedLastSubjSeq, semaq.HdrExpectedLastSubjSeqSubj} {
		delete(h, k)
	}
}

// chainLost refuses b's messages with e; the session's head is read again
// before its next batch.
func (in *Ingress) chainLost(b *chainBatch, e *semaq.APIError) {
	s := b.sess
	in.chains.mu.Lock()
	s.loaded, s.retries = false, 0
	in.chains.mu.Unlock()
	in.answerChain(b.msgs, e)
	in.chainDone(s, b.msgs)
}

// sweepChains ends the batches whose acks are overdue: what came is
// answered, the rest refused as unavailable (it may be stored: the head
// is settled from the stream before the session's next batch).
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
	body := semaq.MarshalError(semaq.NewAPIError(semaq.ErrUnavailable,
		"no acknowledgement from storage within %s: the message may have been stored; publish it again with its Nats-Msg-Id", chainAckWait))
	for _, b := range late {
		cs.mu.Lock()
		headless := b.headSeq == 0
		cs.mu.Unlock()
		if headless {
			in.chainLost(b, semaq.NewAPIError(semaq.ErrUnavailable, "no acknowledgement from storage within %s: publish again", chainAckWait))
			continue
		}
		cs.mu.Lock()
		for i := range b.results {
			if b.results[i] == nil {
				b.results[i] = body
			}
		}
		cs.mu.Unlock()
		in.chainStored(b, true)
	}
}
