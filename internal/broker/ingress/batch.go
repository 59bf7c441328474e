package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/wire"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// Batch frames (semaq.APIPublishBatch, docs/batches.md): many messages in
// one NATS message, so the extra server pass the ingress costs is paid
// once per batch. Each message takes the whole pipeline on its own, as
// the sender's (its tenant stamped, its subject checked against the
// sender's publish grants, since the broker publishes it with its own
// rights), and the batch is answered once, with a result per message.
//
//   - fast: each message the pipeline accepts is appended at once, with a
//     reply subject of the ingress's own (<prefix><batch>.<index>); the
//     answer goes out when every ack is in.
//   - atomic: every message is taken through the pipeline before any is
//     appended; the first refusal refuses the batch. Then they are
//     appended as one JetStream atomic batch (Nats-Batch-Id, -Sequence,
//     -Commit) into the one stream they must all land in, and the
//     commit's ack, the last message's sequence and the batch's size,
//     gives every message its sequence.
//
// A batch waits for its acks at most batchAckWait; what has not come by
// then is answered as unavailable (the message may be stored: publish it
// again with its Nats-Msg-Id). The acks of a fast batch's messages to an
// fsync stream come through its committer like any other
// (Ingress.forward).

// Bounds of the batch frames the ingress holds while their acks come.
const (
	// maxFramesOpen bounds the frames waiting for acks on one node, and
	// maxFramesPerConn those of one connection: past them a frame is
	// refused as overloaded, and retried.
	maxFramesOpen    = 4096
	maxFramesPerConn = 64
	// batchAckWait bounds the wait for JetStream's acks of a batch.
	batchAckWait = 30 * time.Second
)

// HdrBatchDoor, on a batch frame, names the door it came through for the
// metrics: "http" from the HTTP front door; anything else counts as nats.
const HdrBatchDoor = "Semaq-Batch-Door"

// frames are the batch frames waiting for their acks.
type frames struct {
	prefix string // <IngressAckInbox><nuid>.: the replies of their messages

	mu      sync.Mutex
	next    uint64
	open    map[uint64]*frame
	perConn map[string]int
}

// frame is one batch waiting for its acks.
type frame struct {
	id      uint64
	reply   string // the sender's
	conn    string // the sending connection, for maxFramesPerConn
	door    string
	atomic  bool
	results [][]byte // one JSON result per message; nil while its ack is due
	// waiting is the acks due, plus one until every message is sent:
	// under frames.mu.
	waiting int
	sending bool // the messages are still being sent (under frames.mu)
	// commit is the atomic batch's messages as sent, by index, in order;
	// dupOf[i] >= 0: message i was not sent, being a duplicate of that one.
	commit   []int
	dupOf    []int
	deadline time.Time
	errIndex int // the message that refused an atomic batch, -1 none
	errBody  []byte
	stockID  string // a stock client's batch id: answered as JetStream would (stockbatch.go)
}

// forward hands an ack on to reply: into a batch waiting for it, or out on
// the egress connection to its publisher.
func (in *Ingress) forward(reply string, data []byte) {
	if in.frames.deliver(in, reply, data) {
		return
	}
	_ = in.egress.Publish(reply, data)
}

// forwardMsg is forward of an ack with headers (a status reply).
func (in *Ingress) forwardMsg(m *nats.Msg) {
	if strings.HasPrefix(m.Subject, in.frames.prefix) {
		data := m.Data
		if len(data) == 0 {
			data = statusError(m)
		}
		in.frames.deliver(in, m.Subject, data)
		return
	}
	_ = in.egress.PublishMsg(m)
}

// statusError is the result of a message whose ack was a bare status
// (503: no stream leader answered).
func statusError(m *nats.Msg) []byte {
	return semaq.MarshalError(semaq.NewAPIError(semaq.ErrUnavailable, "storing message: status %s %s from JetStream; publish it again with its Nats-Msg-Id",
		m.Header.Get("Status"), m.Header.Get("Description")))
}

// startFrames subscribes to the batch subject and the replies of the
// batches' messages, and starts the sweeper of overdue batches.
func (in *Ingress) startFrames() error {
	in.frames.prefix = reserved.IngressAckInbox + nuid.Next() + "."
	in.frames.open = make(map[uint64]*frame)
	in.frames.perConn = make(map[string]int)
	if _, err := in.wire.QueueSubscribe(in.frames.prefix+">", "", func(m *wire.Msg) {
		in.frames.deliver(in, string(m.Subject), bytes.Clone(m.Data))
	}); err != nil {
		return err
	}
	if _, err := in.wire.QueueSubscribe(semaq.APIPublishBatch, reserved.IngressQueueGroup, func(m *wire.Msg) {
		in.receive(nil, nil, m)
	}); err != nil {
		return err
	}
	in.gate.Go("batch-sweeper", func(ctx context.Context) {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				in.frames.sweep(in, now)
				in.stock.sweep(in, now)
				in.sweepChains(now)
			}
		}
	})
	return nil
}

// handleFrame takes a batch frame m through the pipeline, message by
// message, on a shard's goroutine; out appends.
func (in *Ingress) handleFrame(out *wire.Conn, m *nats.Msg, hdrErr error) {
	if m.Reply == "" || semaq.CheckReplySubject(m.Reply) != nil {
		// Nobody to answer, or a reply the broker would answer with its
		// own rights: nothing is looked at.
		in.log.Debug("batch frame without a reply subject it may answer", "reply", m.Reply)
		return
	}
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	conn := connKey(m)
	who := in.sender(m)
	door := "nats"
	if m.Header.Get(HdrBatchDoor) == "http" {
		door = "http"
	}
	refuse := func(e *semaq.APIError) {
		in.metrics.Batch(door, "fast", "refused", 0, 0)
		_ = in.egress.Publish(m.Reply, mustJSON(semaq.BatchAck{Error: e}))
	}
	if hdrErr != nil {
		refuse(semaq.NewAPIError(semaq.ErrBadBatch, "batch frame: the header block is malformed (%v)", hdrErr))
		return
	}
	atomic, msgs, err := semaq.ParseBatchFrame(m.Data)
	if err != nil {
		bad := semaq.ErrBadBatch
		if errors.Is(err, semaq.ErrBatchLimit) {
			bad = semaq.ErrBatchLimit
		}
		refuse(semaq.NewAPIError(bad, "%v", err))
		return
	}
	f := &frame{reply: m.Reply, conn: conn, door: door, atomic: atomic, results: make([][]byte, len(msgs)), errIndex: -1}
	if e := in.frames.add(in, f); e != nil {
		refuse(e)
		return
	}
	received := time.Now()
	pubs := make([]publication, len(msgs))
	for i := range msgs {
		bm := &msgs[i]
		hdr := nats.Header(bm.Header)
		if hdr == nil {
			hdr = make(nats.Header, 1)
		}
		pubs[i] = publication{m: &nats.Msg{Subject: bm.Subject, Header: hdr, Data: bm.Data}, received: received, subject: bm.Subject, out: out}
	}
	var unsent int
	if atomic {
		unsent = in.frameAtomic(f, pubs, who)
	} else {
		unsent = in.frameFast(f, pubs, who)
	}
	in.frames.sent(in, f, unsent)
}

// locate finds the stream that captures p's subject, and checks that who
// may publish on it: the broker appends it with its own rights.
func (in *Ingress) locate(p *publication, who api.Principal) *semaq.APIError {
	st, pat := in.served.find(p.m.Subject)
	if st == nil {
		if err := semaq.CheckPublishSubject(p.m.Subject); err != nil {
			return semaq.NewAPIError(semaq.ErrBadRequest, "%v", err)
		}
		return semaq.NewAPIError(semaq.ErrNoStream, "no stream captures subject %s; nothing was stored", p.m.Subject)
	}
	p.stream, p.obs.po = st, st.pats[pat]
	if in.mayPublish != nil {
		return in.mayPublish(who, p.m.Subject)
	}
	return nil
}

// frameFast appends each message of f the pipeline accepts, with a reply
// of the ingress's own. It returns how many were not: no ack is due for
// them.
func (in *Ingress) frameFast(f *frame, pubs []publication, who api.Principal) (unsent int) {
	for i := range pubs {
		p := &pubs[i]
		e := in.locate(p, who)
		if e == nil {
			p.m.Reply = in.frames.prefix + strconv.FormatUint(f.id, 10) + "." + strconv.Itoa(i)
			e = in.publish(p, who)
		}
		if e != nil {
			in.refused(p, e)
			f.results[i] = semaq.MarshalError(e)
			unsent++
		}
		p.obs.end()
	}
	return unsent
}

// frameAtomic takes every message of f through the pipeline, then appends
// them as one JetStream atomic batch, or refuses them all. It returns 1
// when the commit was not sent: its ack is not due.
func (in *Ingress) frameAtomic(f *frame, pubs []publication, who api.Principal) (unsent int) {
	reports := make([]report, len(pubs))
	dupOf := make([]int, len(pubs))
	var commit []int
	ids := map[string]int{}
	defer func() {
		for i := range pubs {
			pubs[i].obs.end()
		}
	}()
	fail := func(i int, e *semaq.APIError) {
		in.refused(&pubs[i], e)
		f.results[i] = semaq.MarshalError(e)
		f.errIndex = i
		f.errBody = mustJSON(semaq.NewAPIError(semaq.ErrBatchRefused, "atomic batch: message %d on %s refused, nothing was stored: %s", i, pubs[i].m.Subject, e.Description))
	}
	for i := range pubs {
		p := &pubs[i]
		dupOf[i] = -1
		e := in.locate(p, who)
		if e == nil {
			e = in.run(p, who)
		}
		if e == nil {
			reports[i], e = readReport(p)
		}
		if e == nil {
			e = unchainable(p)
		}
		if e == nil && p.stream != pubs[0].stream && pubs[0].stream != nil {
			e = semaq.NewAPIError(semaq.ErrBadBatch, "atomic batch: message %d on %s is stored in stream %s, message 0 in %s; an atomic batch lands in one stream",
				i, p.m.Subject, p.stream.name, pubs[0].stream.name)
		}
		if e != nil {
			fail(i, e)
			return 1
		}
		if id := p.env.MsgID; id != "" {
			if j, ok := ids[id]; ok {
				dupOf[i] = j
				continue
			}
			ids[id] = i
		}
		commit = append(commit, i)
	}
	// Under the lock: the reader goroutine reads them with the commit's
	// ack.
	in.frames.mu.Lock()
	f.commit, f.dupOf = commit, dupOf
	in.frames.mu.Unlock()
	batchID := "sq" + nuid.Next()
	for k, i := range f.commit {
		p := &pubs[i]
		h := p.m.Header
		h[semaq.HdrBatchID] = []string{batchID}
		h[semaq.HdrBatchSeq] = []string{strconv.Itoa(k + 1)}
		if k == len(f.commit)-1 {
			h[semaq.HdrBatchCommit] = []string{"1"}
			p.m.Reply = in.frames.prefix + strconv.FormatUint(f.id, 10) + ".c"
		}
		if e := in.append(p); e != nil {
			// The batch is incomplete: JetStream drops it when its
			// timeout passes without the commit.
			fail(i, e)
			return 1
		}
	}
	for _, i := range f.commit {
		in.stored(&pubs[i], reports[i])
	}
	return 0
}

// add numbers f and holds it, within the bounds.
func (fs *frames) add(in *Ingress, f *frame) *semaq.APIError {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if len(fs.open) >= maxFramesOpen {
		e := semaq.NewAPIError(semaq.ErrOverloaded, "batch: %d batches are waiting for storage on this node, the most it holds; retry after 100ms", len(fs.open))
		e.RetryAfterMs = 100
		return e
	}
	if fs.perConn[f.conn] >= maxFramesPerConn {
		e := semaq.NewAPIError(semaq.ErrOverloaded, "batch: this connection has %d batches waiting for storage, the most it may; wait for their answers", maxFramesPerConn)
		e.RetryAfterMs = 100
		return e
	}
	fs.next++
	f.id = fs.next
	f.deadline = time.Now().Add(batchAckWait)
	f.waiting = len(f.results) + 1
	f.sending = true
	if f.atomic {
		f.waiting = 2 // the commit's ack
	}
	fs.open[f.id] = f
	fs.perConn[f.conn]++
	in.metrics.BatchesOpen(1)
	return nil
}

// sent is called once every message of f has been appended or refused,
// unsent of the acks counted due not being due after all: a batch with no
// ack due is answered now.
func (fs *frames) sent(in *Ingress, f *frame, unsent int) {
	fs.mu.Lock()
	f.waiting -= unsent + 1
	f.sending = false
	done := f.waiting == 0
	if done {
		fs.removeLocked(f)
	}
	fs.mu.Unlock()
	if done {
		in.metrics.BatchesOpen(-1)
		in.answer(f)
	}
}

func (fs *frames) removeLocked(f *frame) {
	delete(fs.open, f.id)
	if fs.perConn[f.conn]--; fs.perConn[f.conn] <= 0 {
		delete(fs.perConn, f.conn)
	}
}

// deliver takes the ack data of reply, when reply is one of the batches'
// (reported true), into its batch, and answers the batch when it was the
// last due.
func (fs *frames) deliver(in *Ingress, reply string, data []byte) bool {
	rest, ok := strings.CutPrefix(reply, fs.prefix)
	if !ok {
		return false
	}
	idS, idx, _ := strings.Cut(rest, ".")
	id, err := strconv.ParseUint(idS, 10, 64)
	if err != nil {
		return true
	}
	fs.mu.Lock()
	f := fs.open[id]
	if f == nil {
		fs.mu.Unlock()
		return true // answered already (overdue)
	}
	if f.atomic {
		if idx == "c" && f.commit != nil && f.results[f.commit[0]] == nil {
			f.takeCommit(data)
			f.waiting--
		}
	} else if i, err := strconv.Atoi(idx); err == nil && i >= 0 && i < len(f.results) && f.results[i] == nil {
		f.results[i] = data
		f.waiting--
	}
	done := f.waiting == 0
	if done {
		fs.removeLocked(f)
	}
	fs.mu.Unlock()
	if done {
		in.metrics.BatchesOpen(-1)
		in.answer(f)
	}
	return true
}

// takeCommit fills an atomic batch's results from JetStream's answer to
// its commit: the last message's sequence and the batch's size, or the
// error that refused it all.
func (f *frame) takeCommit(data []byte) {
	var ack struct {
		semaq.PubAck
		Error *semaq.APIError `json:"error"`
		Count uint64          `json:"count"`
	}
	if err := json.Unmarshal(data, &ack); err != nil || ack.Error == nil && (ack.Stream == "" || ack.Count != uint64(len(f.commit)) || ack.Sequence < ack.Count) {
		ack.Error = semaq.NewAPIError(semaq.ErrUnavailable, "atomic batch: JetStream's answer to the commit is not a batch ack: %.200s", data)
	}
	if ack.Error != nil {
		f.errBody = mustJSON(ack.Error)
		body := mustJSON(semaq.ErrorReply{Error: ack.Error})
		for i := range f.results {
			f.results[i] = body
		}
		return
	}
	first := ack.Sequence - ack.Count + 1
	for k, i := range f.commit {
		f.results[i] = mustJSON(semaq.PubAck{Stream: ack.Stream, Sequence: first + uint64(k), Domain: ack.Domain})
	}
	for i, j := range f.dupOf {
		if j >= 0 {
			var a semaq.PubAck
			_ = json.Unmarshal(f.results[j], &a)
			a.Duplicate = true
			f.results[i] = mustJSON(a)
		}
	}
}

// sweep answers the batches whose acks are overdue.
func (fs *frames) sweep(in *Ingress, now time.Time) {
	var late []*frame
	fs.mu.Lock()
	for _, f := range fs.open {
		if now.After(f.deadline) && !f.sending {
			late = append(late, f)
			fs.removeLocked(f)
		}
	}
	fs.mu.Unlock()
	body := semaq.MarshalError(semaq.NewAPIError(semaq.ErrUnavailable,
		"no acknowledgement from storage within %s: the message may have been stored; publish it again with its Nats-Msg-Id", batchAckWait))
	for _, f := range late {
		for i := range f.results {
			if f.results[i] == nil {
				f.results[i] = body
			}
		}
		in.metrics.BatchesOpen(-1)
		in.answer(f)
	}
}

// answer sends f's BatchAck to its sender: the results as JetStream and
// the pipeline gave them, spliced, not decoded.
func (in *Ingress) answer(f *frame) {
	if f.stockID != "" {
		stored, outcome := len(f.results), "stored"
		if f.errBody != nil {
			stored, outcome = 0, "refused"
		}
		in.metrics.Batch("stock", "atomic", outcome, len(f.results), stored)
		if f.reply != "" {
			_ = in.egress.Publish(f.reply, f.stockAnswer())
		}
		return
	}
	stored, refused := 0, 0
	for i, r := range f.results {
		if r == nil {
			// Not looked at: an atomic batch refused before it.
			f.results[i] = notStored
			refused++
			continue
		}
		if bytes.Contains(r, []byte(`"error"`)) {
			refused++
		} else {
			stored++
		}
	}
	mode, outcome := "fast", "stored"
	if f.atomic {
		mode = "atomic"
	}
	switch {
	case stored == 0:
		outcome = "refused"
	case refused > 0:
		outcome = "partial"
	}
	in.metrics.Batch(f.door, mode, outcome, len(f.results), stored)
	b := make([]byte, 0, 64+len(f.results)*48)
	b = append(b, `{"stored":`...)
	b = strconv.AppendInt(b, int64(stored), 10)
	if refused > 0 {
		b = append(b, `,"refused":`...)
		b = strconv.AppendInt(b, int64(refused), 10)
	}
	if f.atomic {
		b = append(b, `,"atomic":true`...)
	}
	if f.errBody != nil {
		b = append(b, `,"error":`...)
		b = append(b, f.errBody...)
	}
	if f.errIndex >= 0 {
		b = append(b, `,"index":`...)
		b = strconv.AppendInt(b, int64(f.errIndex), 10)
	}
	b = append(b, `,"results":[`...)
	for i, r := range f.results {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, bytes.TrimSpace(r)...)
	}
	b = append(b, "]}"...)
	_ = in.egress.Publish(f.reply, b)
}

// notStored is the result of a message of an atomic batch refused by an
// earlier one.
var notStored = semaq.MarshalError(semaq.NewAPIError(semaq.ErrBatchRefused, "not stored: an earlier message refused the atomic batch"))

// connKey names the connection a frame came from: the one the NATS server
// names in Nats-Request-Info, else the reply's inbox prefix.
func connKey(m *nats.Msg) string {
	if ri, ok := api.ParseRequestInfo(m.Header); ok {
		return strconv.FormatUint(ri.Conn, 10) + "@" + ri.Server
	}
	if i := strings.LastIndexByte(m.Reply, '.'); i > 0 {
		return m.Reply[:i]
	}
	return m.Reply
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
