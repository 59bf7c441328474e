package ingress

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/wire"
	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/semaq"
)

// Stock clients' atomic batches (docs/batches.md): a NATS client that
// speaks JetStream's atomic batch publish sends each message of a batch on
// its subject with Nats-Batch-Id and Nats-Batch-Sequence, the last with
// Nats-Batch-Commit. The ingress takes every message through the pipeline
// as it comes and holds it, copied; at the commit it appends them all as
// one JetStream atomic batch of its own (a batch id of its own: two
// clients may pick the same one), and answers the commit with JetStream's
// batch ack under the client's batch id. One refusal refuses the batch:
// what is held is dropped at once, the messages that follow are dropped,
// and the commit (or the next message asking for an ack) gets the error
// naming the refused message. Nothing of a refused or abandoned batch is
// stored.
//
// A batch is one client's: keyed by the connection the NATS server names in
// Nats-Request-Info (the node's own clients share one key) and the batch
// id. Each message pays the ingress's extra server pass, as any stock
// client's message does; the reader keeps a batch's messages on one shard
// (shardOf keys them by batch id), in order.
//
// In a cluster the NATS server hands each message to any node's ingress
// (the queue group spans the cluster), so a node forwards a batch's message
// to the node of the client's connection (reserved.IngressBatchInbox),
// which holds the whole batch. Messages that took different paths may
// arrive out of order: a clustered node holds each by its sequence, and
// commits once every message up to the commit is in. A message still
// missing stockGapGrace after the commit came refuses the batch (on a
// single node a gap refuses it at once: its messages cannot overtake each
// other).
//
// Bounds: semaq.MaxBatchMsgs messages and semaq.MaxBatchBytes bytes held
// per batch, semaq.MaxOpenBatches batches open per connection and
// semaq.MaxOpenBatchesNode per node, maxStockHeldBytes held in all; a
// batch that sees no message for semaq.BatchTimeoutSeconds is abandoned
// (the sweeper checks every second) and its memory freed; a later message
// of it is answered with semaq.ErrBatchAbandoned for as long again.

// maxStockHeldBytes bounds the bytes of all stock batches held on a node.
const maxStockHeldBytes = 64 << 20

// stockGapGrace is how long a clustered node waits, after a batch's
// commit, for the messages before it that are still on their way.
const stockGapGrace = 2 * time.Second

// stockBatches are the stock clients' batches open on this node.
type stockBatches struct {
	metrics *metrics.Metrics // semaq_batches_open counts the open batches

	mu      sync.Mutex
	open    map[stockKey]*stockBatch
	perConn map[string]int
	held    int64 // bytes held in all
	// abandoned are the batches the sweeper dropped, and when: a late
	// message of one is told so. At most semaq.MaxOpenBatchesNode.
	abandoned map[stockKey]time.Time
	// anyOrder: the node is clustered, a batch's messages may come in any
	// order (see above).
	anyOrder bool
}

type stockKey struct{ conn, id string }

// stockBatch is one open batch: its messages so far, or the refusal that
// ended it.
type stockBatch struct {
	key   stockKey
	seq   uint64    // the highest sequence seen
	n     int       // messages seen (under stockBatches.mu)
	held  []heldMsg // by sequence - 1; the end-of-batch marker holds none
	bytes int64     // held, under stockBatches.mu
	count int       // messages held, under stockBatches.mu
	last  time.Time
	// failed is the refusal; held is dropped.
	failed *semaq.APIError
	// end is the commit's sequence, 0 until it comes, with its reply and
	// when it came (under stockBatches.mu: the sweeper reads them).
	end      uint64
	endReply string
	endAt    time.Time
	done     bool // answered
}

// complete says whether sb's commit and every message before it are in.
func (sb *stockBatch) complete() bool { return sb.end != 0 && uint64(sb.n) == sb.end }

// heldMsg is a message of a stock batch that passed the pipeline.
type heldMsg struct {
	set     bool // the slot holds a message
	subject string
	stream  *stream
	po      *pattern
	header  nats.Header
	data    []byte
	env     semaq.Envelope
	rep     report
	cancel  string
	who     api.Principal
	// received times the message's ack from its own receipt (the
	// latency sampler's reply subjects carry it).
	received time.Time
}

// stockMsg handles p, a message carrying Nats-Batch-Id, on its shard.
func (in *Ingress) stockMsg(p *publication) {
	m := p.m
	conn := "node"
	if id, server := requestInfoConn(m.Header); id != "" && server != "" {
		if in.forwardStock(p, server) {
			return
		}
		conn = id + "@" + server
	}
	delete(m.Header, hdrForwardReply) // read by the node that forwarded it, if one did
	who := in.sender(m)
	id, seq, commit, e := batchHeaders(m)
	if e != nil {
		in.reject(p, e)
		return
	}
	sb, e := in.stock.get(stockKey{conn, id}, seq)
	if e != nil {
		in.reject(p, e)
		return
	}
	if sb.failed == nil && in.stockSeq(p, sb, seq, commit != "") && commit != "eob" {
		// The end-of-batch marker commits what came before it and is
		// not stored itself.
		in.holdStock(p, sb, who, seq)
	}
	switch {
	case commit != "":
		if !in.stock.ending(sb, seq, m.Reply) {
			in.answerStock(m.Reply, semaq.NewAPIError(semaq.ErrBadBatch, "batch %q: committed twice", id))
		}
	case m.Reply == "":
	case sb.failed != nil:
		in.answerStock(m.Reply, sb.failed)
	default:
		// A flow-control ack: the message is held.
		_ = in.egress.Publish(m.Reply, nil)
	}
	if in.stock.claim(sb) {
		in.commitStock(p.out, sb)
	}
}

// requestInfoConn is the connection id and server Nats-Request-Info names,
// read as requestConn reads them (the server's own flat JSON): "" when
// the header has none.
func requestInfoConn(h nats.Header) (id, server string) {
	v := h.Get(api.RequestInfoHeader)
	return stringField(v, `"id":`, ','), stringField(v, `"server":"`, '"')
}

func stringField(s, key string, end byte) string {
	i := strings.Index(s, key)
	if i < 0 {
		return ""
	}
	v := s[i+len(key):]
	if j := strings.IndexByte(v, end); j >= 0 {
		v = v[:j]
	}
	return v
}

// batchHeaders reads and removes the Nats-Batch-* headers of m: the
// batch id, the message's sequence, and the commit ("", "1" or "eob").
func batchHeaders(m *nats.Msg) (id string, seq uint64, commit string, e *semaq.APIError) {
	h := m.Header
	ids, seqs, commits := h[semaq.HdrBatchID], h[semaq.HdrBatchSeq], h[semaq.HdrBatchCommit]
	delete(h, semaq.HdrBatchID)
	delete(h, semaq.HdrBatchSeq)
	delete(h, semaq.HdrBatchCommit)
	if len(ids) != 1 || ids[0] == "" || len(ids[0]) > 64 {
		return "", 0, "", semaq.NewAPIError(semaq.ErrBadBatch, "publish on %s: %s must be given once, 1 to 64 characters", m.Subject, semaq.HdrBatchID)
	}
	id = ids[0]
	if len(seqs) != 1 {
		return "", 0, "", semaq.NewAPIError(semaq.ErrBadBatch, "batch %q: message on %s has no single %s", id, m.Subject, semaq.HdrBatchSeq)
	}
	seq, err := strconv.ParseUint(seqs[0], 10, 64)
	if err != nil || seq == 0 || seq > semaq.MaxBatchMsgs+1 {
		return "", 0, "", semaq.NewAPIError(semaq.ErrBadBatch, "batch %q: %s %q is not a number from 1 to %d", id, semaq.HdrBatchSeq, seqs[0], semaq.MaxBatchMsgs)
	}
	switch {
	case len(commits) == 0:
	case len(commits) == 1 && (commits[0] == "1" || commits[0] == "eob"):
		commit = commits[0]
	default:
		return "", 0, "", semaq.NewAPIError(semaq.ErrBadBatch, "batch %q: %s must be 1 or eob", id, semaq.HdrBatchCommit)
	}
	if commit == "eob" && seq == 1 {
		return "", 0, "", semaq.NewAPIError(semaq.ErrBadBatch, "batch %q: an end-of-batch marker cannot be its first message", id)
	}
	return id, seq, commit, nil
}

// get finds the open batch of k for a message of sequence seq, or opens it
// for the first message, within the bounds.
func (sbs *stockBatches) get(k stockKey, seq uint64) (*stockBatch, *semaq.APIError) {
	sbs.mu.Lock()
	defer sbs.mu.Unlock()
	sb := sbs.open[k]
	if sb == nil {
		if _, ok := sbs.abandoned[k]; ok && seq != 1 {
			return nil, semaq.NewAPIError(semaq.ErrBatchAbandoned, "batch %q: message %d of a batch abandoned after %ds without a message; nothing of it was stored: send it again, with its commit",
				k.id, seq, semaq.BatchTimeoutSeconds)
		}
		if seq != 1 && !sbs.anyOrder {
			return nil, semaq.NewAPIError(semaq.ErrBadBatch, "batch %q: message %d of a batch that is not open (abandoned after %ds without a message, or never started)",
				k.id, seq, semaq.BatchTimeoutSeconds)
		}
		if len(sbs.open) >= semaq.MaxOpenBatchesNode {
			return nil, semaq.NewAPIError(semaq.ErrBatchLimit, "batch %q: %d batches are open on this node, the most it holds; commit open ones first", k.id, len(sbs.open))
		}
		if sbs.perConn[k.conn] >= semaq.MaxOpenBatches {
			return nil, semaq.NewAPIError(semaq.ErrBatchLimit, "batch %q: this connection has %d batches open, the most it may; commit them first", k.id, semaq.MaxOpenBatches)
		}
		if sbs.open == nil {
			sbs.open = make(map[stockKey]*stockBatch)
			sbs.perConn = make(map[string]int)
		}
		sb = &stockBatch{key: k}
		sbs.open[k] = sb
		sbs.perConn[k.conn]++
		delete(sbs.abandoned, k)
		sbs.metrics.BatchesOpen(1)
		sb.last = time.Now()
		return sb, nil
	}
	sb.last = time.Now()
	return sb, nil
}

// stockSeq checks that seq may come now, commit telling whether it is the
// commit, or fails sb: on a single node it follows the last one; on a
// clustered one it is new and not past the commit.
func (in *Ingress) stockSeq(p *publication, sb *stockBatch, seq uint64, commit bool) bool {
	var e *semaq.APIError
	seen := seq <= uint64(len(sb.held)) && sb.held[seq-1].set || seq == sb.end
	switch {
	case seq > semaq.MaxBatchMsgs+1 || seq > semaq.MaxBatchMsgs && !commit:
		e = semaq.NewAPIError(semaq.ErrBatchLimit, "a batch holds at most %d messages", semaq.MaxBatchMsgs)
	case seq == 1 && seen:
		e = semaq.NewAPIError(semaq.ErrBadBatch, "batch %q is already open: it was started again", sb.key.id)
	case seen:
		e = semaq.NewAPIError(semaq.ErrBadBatch, "message %d came twice", seq)
	case !in.stock.anyOrder && seq != sb.seq+1:
		e = semaq.NewAPIError(semaq.ErrBadBatch, "message %d came after message %d: a batch's messages come in order, none missing", seq, sb.seq)
	case sb.end != 0 && seq > sb.end:
		e = semaq.NewAPIError(semaq.ErrBadBatch, "message %d came after the commit, message %d", seq, sb.end)
	case commit && seq < sb.seq:
		e = semaq.NewAPIError(semaq.ErrBadBatch, "the commit is message %d, but message %d came", seq, sb.seq)
	}
	if e != nil {
		in.failStock(p, sb, seq, e)
		return false
	}
	sb.seq = max(sb.seq, seq)
	in.stock.mu.Lock()
	sb.n++
	in.stock.mu.Unlock()
	return true
}

// failStock fails sb for message seq's refusal e.
func (in *Ingress) failStock(p *publication, sb *stockBatch, seq uint64, e *semaq.APIError) {
	in.refused(p, e)
	in.stock.fail(sb, semaq.NewAPIError(semaq.ErrBatchRefused, "batch %q: message %d on %s refused, nothing of the batch is stored: %s",
		sb.key.id, seq, p.m.Subject, e.Description))
}

// holdStock takes p, message seq of sb, through the pipeline and holds
// it, or fails sb.
func (in *Ingress) holdStock(p *publication, sb *stockBatch, who api.Principal, seq uint64) {
	m := p.m
	fail := func(e *semaq.APIError) { in.failStock(p, sb, seq, e) }
	e := in.run(p, who)
	var r report
	if e == nil {
		r, e = readReport(p)
	}
	if e == nil {
		if first := sb.first(); first != nil && first.stream != p.stream {
			e = semaq.NewAPIError(semaq.ErrBadBatch, "it is stored in stream %s, the batch's other messages in %s; an atomic batch lands in one stream", p.stream.name, first.stream.name)
		}
	}
	if e == nil {
		e = unchainable(p)
	}
	if e != nil {
		fail(e)
		return
	}
	size := int64(len(p.subject) + len(m.Data) + 64)
	for k, vs := range m.Header {
		for _, v := range vs {
			size += int64(len(k) + len(v))
		}
	}
	if e := in.stock.reserve(sb, size); e != nil {
		fail(e)
		return
	}
	if n := int(seq); n > len(sb.held) {
		sb.held = append(sb.held, make([]heldMsg, n-len(sb.held))...)
	}
	sb.held[seq-1] = heldMsg{set: true, subject: p.subject, stream: p.stream, po: p.obs.po, header: m.Header,
		data: append([]byte(nil), m.Data...), env: p.env, rep: r, cancel: p.cancel, who: p.who, received: p.received}
}

// first is a message sb holds, nil when none.
func (sb *stockBatch) first() *heldMsg {
	for i := range sb.held {
		if sb.held[i].set {
			return &sb.held[i]
		}
	}
	return nil
}

// claim says whether sb is to be answered now: its commit came, and it
// failed or is complete. Only one claim, or the sweeper, answers it.
func (sbs *stockBatches) claim(sb *stockBatch) bool {
	sbs.mu.Lock()
	defer sbs.mu.Unlock()
	if sb.end == 0 || sb.done || sb.failed == nil && !sb.complete() {
		return false
	}
	sb.done = true
	return true
}

// ending records sb's commit, message seq, answered on reply; false when
// it had one already.
func (sbs *stockBatches) ending(sb *stockBatch, seq uint64, reply string) bool {
	sbs.mu.Lock()
	defer sbs.mu.Unlock()
	if sb.end != 0 {
		return false
	}
	sb.end, sb.endReply, sb.endAt = seq, reply, time.Now()
	return true
}

// reserve counts size more bytes held by sb, within the bounds.
func (sbs *stockBatches) reserve(sb *stockBatch, size int64) *semaq.APIError {
	sbs.mu.Lock()
	defer sbs.mu.Unlock()
	switch {
	case sb.bytes+size > semaq.MaxBatchBytes:
		return semaq.NewAPIError(semaq.ErrBatchLimit, "the batch holds more than %d bytes", semaq.MaxBatchBytes)
	case sbs.held+size > maxStockHeldBytes:
		return semaq.NewAPIError(semaq.ErrBatchLimit, "the node holds %d bytes of open batches, the most it may; retry", sbs.held)
	}
	sb.bytes += size
	sb.count++
	sbs.held += size
	return nil
}

// fail ends sb with its refusal: what it held is dropped now.
func (sbs *stockBatches) fail(sb *stockBatch, e *semaq.APIError) {
	sbs.mu.Lock()
	defer sbs.mu.Unlock()
	if sb.failed == nil {
		sb.failed = e
	}
	sbs.held -= sb.bytes
	sb.held, sb.bytes = nil, 0
}

// close forgets sb: committed, or refused and answered.
func (sbs *stockBatches) close(sb *stockBatch) {
	sbs.mu.Lock()
	defer sbs.mu.Unlock()
	sbs.closeLocked(sb)
}

func (sbs *stockBatches) closeLocked(sb *stockBatch) {
	if sbs.open[sb.key] != sb {
		return
	}
	delete(sbs.open, sb.key)
	sbs.metrics.BatchesOpen(-1)
	if sbs.perConn[sb.key.conn]--; sbs.perConn[sb.key.conn] <= 0 {
		delete(sbs.perConn, sb.key.conn)
	}
	sbs.held -= sb.bytes
	sb.held, sb.bytes = nil, 0
}

// sweep abandons the batches idle past the timeout, and forgets those
// abandoned as long ago. A batch is checked and closed under one lock: a
// message that finds it (get) first keeps it open.
func (sbs *stockBatches) sweep(in *Ingress, now time.Time) {
	const timeout = semaq.BatchTimeoutSeconds * time.Second
	type idle struct {
		id   string
		msgs int
	}
	type answer struct {
		reply string
		e     *semaq.APIError
	}
	var gone []idle
	var replies []answer
	sbs.mu.Lock()
	for k, at := range sbs.abandoned {
		if now.Sub(at) > timeout {
			delete(sbs.abandoned, k)
		}
	}
	for k, sb := range sbs.open {
		gap := sb.end != 0 && now.Sub(sb.endAt) > stockGapGrace && now.Sub(sb.last) > stockGapGrace
		if sb.done || now.Sub(sb.last) <= timeout && !gap {
			continue // answered or being answered, or not idle
		}
		if sb.endReply != "" {
			var e *semaq.APIError
			if gap {
				e = semaq.NewAPIError(semaq.ErrBatchRefused, "batch %q: %d of its %d messages came, the last %s after its commit; nothing of the batch is stored",
					k.id, sb.n, sb.end, stockGapGrace)
			} else {
				e = semaq.NewAPIError(semaq.ErrBatchAbandoned, "batch %q: abandoned after %ds without a message; nothing of it was stored", k.id, semaq.BatchTimeoutSeconds)
			}
			replies = append(replies, answer{sb.endReply, e})
		}
		sb.done = true
		gone = append(gone, idle{k.id, sb.count})
		sbs.closeLocked(sb)
		if sbs.abandoned == nil {
			sbs.abandoned = make(map[stockKey]time.Time)
		}
		if len(sbs.abandoned) < semaq.MaxOpenBatchesNode {
			sbs.abandoned[k] = now
		}
	}
	sbs.mu.Unlock()
	for _, a := range replies {
		in.answerStock(a.reply, a.e)
	}
	for _, g := range gone {
		in.metrics.Batch("stock", "atomic", "abandoned", g.msgs, 0)
		in.log.Debug("stock batch abandoned", "batch", g.id, "messages", g.msgs)
	}
}

// commitStock appends sb's messages on out as one JetStream atomic batch,
// with the commit's reply of the ingress's own (frames), or answers its
// refusal.
func (in *Ingress) commitStock(out *wire.Conn, sb *stockBatch) {
	reply := sb.endReply
	defer in.stock.close(sb)
	if sb.failed != nil {
		in.metrics.Batch("stock", "atomic", "refused", sb.n, 0)
		in.answerStock(reply, sb.failed)
		return
	}
	held := make([]*heldMsg, 0, len(sb.held))
	for i := range sb.held {
		if sb.held[i].set {
			held = append(held, &sb.held[i])
		}
	}
	f := &frame{reply: reply, conn: sb.key.conn, door: "stock", atomic: true, stockID: sb.key.id, results: make([][]byte, len(held)), errIndex: -1}
	if e := in.frames.add(in, f); e != nil {
		in.answerStock(reply, e)
		return
	}
	batchID := "sq" + nuid.Next()
	unsent := 0
	for k, hm := range held {
		q := publication{m: &nats.Msg{Subject: hm.subject, Header: hm.header, Data: hm.data}, subject: hm.subject, stream: hm.stream,
			env: hm.env, cancel: hm.cancel, who: hm.who, obs: msgObs{po: hm.po}, out: out, received: hm.received}
		q.m.Header[semaq.HdrBatchID] = []string{batchID}
		q.m.Header[semaq.HdrBatchSeq] = []string{strconv.Itoa(k + 1)}
		if k == len(held)-1 {
			q.m.Header[semaq.HdrBatchCommit] = []string{"1"}
			q.m.Reply = in.frames.prefix + strconv.FormatUint(f.id, 10) + ".c"
			in.frames.mu.Lock()
			f.commit = make([]int, len(held))
			for i := range f.commit {
				f.commit[i] = i
			}
			in.frames.mu.Unlock()
		}
		if e := in.append(&q); e != nil {
			// JetStream drops the incomplete batch when its timeout
			// passes without the commit.
			f.errIndex = k
			f.errBody = mustJSON(e)
			unsent = 1
			break
		}
	}
	if unsent == 0 {
		for _, hm := range held {
			in.stored(&publication{env: hm.env, obs: msgObs{po: hm.po}}, hm.rep)
		}
	}
	in.frames.sent(in, f, unsent)
}

// answerStock answers a stock client's batch message with a refusal, as
// JetStream would.
func (in *Ingress) answerStock(reply string, e *semaq.APIError) {
	if reply != "" {
		_ = in.egress.Publish(reply, semaq.MarshalError(e))
	}
}

// stockAnswer is the answer to a stock batch's commit: JetStream's batch
// ack under the client's batch id, or the refusal.
func (f *frame) stockAnswer() []byte {
	if f.errBody != nil {
		return append(append([]byte(`{"error":`), f.errBody...), '}')
	}
	var a semaq.PubAck
	if len(f.commit) > 0 {
		_ = json.Unmarshal(f.results[f.commit[len(f.commit)-1]], &a)
	}
	return mustJSON(struct {
		semaq.PubAck
		Batch string `json:"batch"`
		Count int    `json:"count"`
	}{a, f.stockID, len(f.results)})
}

// batchKey is the shard key of a message of a stock batch: its id, read
// from the raw header block; nil for any other message.
func batchKey(hdr []byte) []byte {
	if len(hdr) == 0 {
		return nil
	}
	return headerValue(hdr, batchIDKey)
}

var batchIDKey = []byte("\r\n" + semaq.HdrBatchID + ":")

// headerValue is the value after key in a raw header block, trimmed.
func headerValue(hdr, key []byte) []byte {
	i := bytes.Index(hdr, key)
	if i < 0 {
		return nil
	}
	v := hdr[i+len(key):]
	for j, c := range v {
		if c == '\r' {
			v = v[:j]
			break
		}
	}
	for len(v) > 0 && v[0] == ' ' {
		v = v[1:]
	}
	return v
}
