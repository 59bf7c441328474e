package tokens

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// The token relay (docs/tokens.md, "Trust model"): the only way into
// SQ_TOKENS. Writers publish records on $SQ.TW.<id>.c|end with their writer
// key in SQ-Token-Key; the relay checks the key against the stream's claim,
// the record's form, order and the request's limits, and stores it on
// $SQ.w.$tok.<tenant>.<id>.c|end (the claim's tenant: the job's, or the
// first writer's) with the writer's reply subject, so JetStream's
// PubAck goes straight back to the writer and the relay never waits on
// storage. Refusals are answered, JetStream-shaped, on the egress
// connection.
//
// Order: one subscription delivers a writer's records in order and the relay
// stores them in that order on one connection, under mu.

// Limits bound token streams. Defaults are semaq.DefaultToken*.
type Limits struct {
	StoreBytes    int64 // SQ_TOKENS MaxBytes; past it JetStream refuses new records
	StreamBytes   int64 // record bytes of one request id
	StreamRecords int64 // records of one request id
	MaxStreams    int   // request ids tracked at once
}

// DefaultLimits are the limits of a node that sets none.
func DefaultLimits() Limits {
	return Limits{
		StoreBytes:    semaq.DefaultTokenStoreMaxBytes,
		StreamBytes:   semaq.DefaultTokenStreamMaxBytes,
		StreamRecords: semaq.DefaultTokenStreamMaxRecords,
		MaxStreams:    semaq.DefaultTokenMaxStreams,
	}
}

// withDefaults is l with every zero (or negative) field at its default.
func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.StoreBytes > 0 {
		d.StoreBytes = l.StoreBytes
	}
	if l.StreamBytes > 0 {
		d.StreamBytes = l.StreamBytes
	}
	if l.StreamRecords > 0 {
		d.StreamRecords = l.StreamRecords
	}
	if l.MaxStreams > 0 {
		d.MaxStreams = l.MaxStreams
	}
	return d
}

// Pending limits of the relay subscription: past them NATS drops records
// (the writer's PubAck times out) rather than buffering a flood.
const (
	relayPendingMsgs  = 1 << 16
	relayPendingBytes = 64 << 20
)

// endAllowance lets a terminal record this small through past the
// per-request limits, so a writer refused for size can still end its
// stream with an error that readers see.
const endAllowance = 8 << 10

// emptyClaimTTL is how long a job's binding waits for the stream's first
// record: most jobs of most queues never stream tokens.
const emptyClaimTTL = 10 * time.Minute

// barrier is a subject SQ_TOKENS captures that no request id can
// name ('$' is not allowed in one): a stored write on it proves every
// record the relay sent before it is stored (purgeForeign).
const barrier = "$barrier"

// claim is what the relay knows of one request id's stream. Claims live
// in Store.claims, under its mu.
type claim struct {
	key     string
	tenant  string // tenant token of the stored subjects (semaq.TokenTenant)
	bound   bool   // the dispatcher tied it to a job's lease (BindJob)
	legacy  bool   // stored before this relay started: no writer known
	next    uint64 // seq the next record must have; 0: the first sets it
	offset  uint64 // offset the next record must have, when next > 0
	bytes   int64
	records int64
	ended   bool
	touched time.Time
	// filter is the stream's policy (Deps.Filter), asked for once, at
	// its first record; stopped says why a policy ended the stream.
	filter    Filter
	filterSet bool
	stopped   string

	// While the records of a foreign writer are purged (BindJob), the
	// rightful writer's records wait here, already checked.
	purging bool
	held    []*nats.Msg

	// In a cluster, records of another key than an unbound claim's wait
	// here for a job's binding from another node (bind.go).
	waiting []*waiting

	// chain is where the stream's answer is chained (BindJob; answers.go).
	chain api.AnswerChain
}

// relayStats counts what the relay did, for tests and metrics.
type relayStats struct {
	stored  atomic.Uint64
	refused atomic.Uint64
}

// startRelay subscribes the relay on this node's own write prefix (no
// queue group: the node maps the writers connected to it there).
func (ts *Store) startRelay() error {
	sub, err := ts.nc.Subscribe(ts.writePrefix+">", ts.relay)
	if err != nil {
		return fmt.Errorf("broker: token relay: %w", err)
	}
	if err := sub.SetPendingLimits(relayPendingMsgs, relayPendingBytes); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("broker: token relay: %w", err)
	}
	ts.mu.Lock()
	ts.relaySub = sub
	ts.mu.Unlock()
	return nil
}

// stopRelay drains the relay's subscription and waits, bounded by ctx, until
// its handler has returned for the last time: nats.go marks a draining
// subscription closed only after its last callback. Records still pending
// are refused (the store is closed) rather than dropped unanswered.
func (ts *Store) stopRelay(ctx context.Context) error {
	ts.mu.Lock()
	sub := ts.relaySub
	ts.relaySub = nil
	ts.mu.Unlock()
	if sub == nil {
		return nil
	}
	closed := sub.StatusChanged(nats.SubscriptionClosed)
	if err := sub.Drain(); err != nil {
		// The connection is closed or closing: nothing more is delivered.
		_ = sub.Unsubscribe()
		return nil
	}
	select {
	case <-closed:
		return nil
	case <-ctx.Done():
		_ = sub.Unsubscribe()
		return fmt.Errorf("token relay: draining: %w", ctx.Err())
	}
}

// checkTokenRecord checks one record as a writer sent it: within the size
// limit, well-formed (semaq.ParseTokenChunk), a chunk on .c with tokens in
// it, a terminal record on .end.
func checkTokenRecord(end bool, data []byte) (*semaq.TokenChunk, error) {
	if len(data) == 0 {
		return nil, errors.New("empty record")
	}
	if len(data) > semaq.MaxTokenRecordBytes {
		return nil, fmt.Errorf("record of %d bytes; at most %d", len(data), semaq.MaxTokenRecordBytes)
	}
	rec, err := semaq.ParseTokenChunk(data)
	if err != nil {
		return nil, err
	}
	switch {
	case end && !rec.Terminal():
		return nil, fmt.Errorf("record %d on .end is not a final or error record", rec.Seq)
	case !end && rec.Terminal():
		return nil, fmt.Errorf("record %d is terminal; send it on .end", rec.Seq)
	case !end && (rec.N < 1 || rec.Text == "" && rec.Func == nil):
		return nil, fmt.Errorf("chunk %d carries no tokens", rec.Seq)
	case !end && rec.Func != nil && rec.N != 1:
		return nil, fmt.Errorf("chunk %d: a function call fragment is one token, not %d", rec.Seq, rec.N)
	}
	return rec, nil
}

// parseWriteSubject splits $SQ.TW.<id>.c|end as it reaches the relay,
// under prefix (the node's, NodeWritePrefix).
func parseWriteSubject(prefix, subj string) (id string, end, ok bool) {
	rest, found := strings.CutPrefix(subj, prefix)
	if !found {
		return "", false, false
	}
	switch {
	case strings.HasSuffix(rest, ".c"):
		id = rest[:len(rest)-2]
	case strings.HasSuffix(rest, ".end"):
		id, end = rest[:len(rest)-4], true
	default:
		return "", false, false
	}
	return id, end, semaq.CheckRequestID(id) == nil
}

// relay handles one record from a writer: the hot path of token streams.
func (ts *Store) relay(m *nats.Msg) {
	if m.Reply != "" && semaq.CheckReplySubject(m.Reply) != nil {
		// Nowhere safe to answer: drop it unstored.
		ts.stats.refused.Add(1)
		return
	}
	id, end, ok := parseWriteSubject(ts.writePrefix, m.Subject)
	if !ok {
		ts.refuse(m, semaq.NewAPIError(semaq.ErrTokenRecord,
			"token record on %q: write to %s<request id>.c or .end", m.Subject, semaq.TokenWritePrefix))
		return
	}
	key := m.Header.Get(semaq.HdrTokenKey)
	if err := semaq.CheckTokenKey(key); err != nil {
		ts.refuse(m, semaq.NewAPIError(semaq.ErrTokenWriter, "token stream %s: %s header: %v", id, semaq.HdrTokenKey, err))
		return
	}
	if len(m.Data) > semaq.MaxTokenRecordBytes {
		ts.refuse(m, semaq.NewAPIError(semaq.ErrTokenLimit, "token stream %s: record of %d bytes; a record is at most %d",
			id, len(m.Data), semaq.MaxTokenRecordBytes))
		return
	}
	rec, err := checkTokenRecord(end, m.Data)
	if err != nil {
		ts.refuse(m, semaq.NewAPIError(semaq.ErrTokenRecord, "token stream %s: %v", id, err))
		return
	}
	// Only a first record may claim a stream no job binds: the tenant it
	// would claim it for (asked outside mu: it may read the identity store).
	var tenant string
	var tenantErr error
	if rec.Seq == 1 {
		tenant, tenantErr = ts.writerTenant(m.Header)
	}
	out := &nats.Msg{Reply: m.Reply, Data: m.Data}
	// Refusals name the subject the writer used.
	m.Subject = semaq.TokenWritePrefix + m.Subject[len(ts.writePrefix):]
	if end {
		// Retention and measurements stay; the key never reaches storage.
		out.Header = make(nats.Header, len(m.Header))
		for k, v := range m.Header {
			if k != semaq.HdrTokenKey && !isAnswerHeader(k) {
				out.Header[k] = v
			}
		}
	}
	ts.mu.Lock()
	if ts.awaitBind(id, &waiting{m: m, out: out, key: key, tenant: tenant, end: end, rec: rec}) {
		ts.mu.Unlock()
		return
	}
	var e *semaq.APIError
	if tenantErr != nil && ts.claims[id] == nil {
		e = semaq.NewAPIError(semaq.ErrTokenWriter, "token stream %s: %v", id, tenantErr)
	} else {
		e = ts.admit(id, tenant, key, end, rec, len(m.Data))
	}
	var final *nats.Msg
	if e == nil {
		c := ts.claims[id]
		out.Subject = storeSubject(c.tenant, id, end)
		var msgs []*nats.Msg
		msgs, final = ts.filtered(id, c, rec, end, out)
		markAnswer(c, msgs)
		for _, o := range msgs {
			if c.purging {
				c.held = append(c.held, o)
			} else if e = ts.store(o); e != nil {
				break
			}
		}
	}
	ts.mu.Unlock()
	if e != nil {
		ts.refuse(m, e)
		return
	}
	switch {
	case end:
		ts.ended(id, m)
	case final != nil:
		ts.ended(id, final)
	}
}

// storeSubject is where the relay stores a record of request id of tenant
// (a tenant token): SQ_TOKENS stores it under semaq.TokenChunkSubject or
// semaq.TokenEndSubject.
func storeSubject(tenant, id string, end bool) string {
	kind := ".c"
	if end {
		kind = ".end"
	}
	return reserved.TokenStorePrefix + tenant + "." + id + kind
}

// writerTenant is the tenant token a writer's first record claims a
// stream no job binds (yet, on this node) for: the writer's own tenant,
// or, for a writer that may write for any (Sender.AnyTenant, Sender.Worker),
// the AI-Tenant the record names (none without it). A writer of one tenant
// naming another is refused. A job's binding, when it comes, keeps the
// claim only if key and tenant are the job's (BindJob).
func (ts *Store) writerTenant(h nats.Header) (string, error) {
	named := h.Get(semaq.HdrTenant)
	if ts.sender == nil {
		return semaq.TokenTenant(named), nil
	}
	s := ts.sender(h)
	switch {
	case (s.AnyTenant || s.Worker && s.Tenant == "") && named != "":
		return semaq.TokenTenant(named), nil
	case named == "" || named == s.Tenant:
		return semaq.TokenTenant(s.Tenant), nil
	}
	return "", fmt.Errorf("a writer of tenant %q may not write for tenant %q (%s)", s.Tenant, named, semaq.HdrTenant)
}

// admit decides whether the record may be stored and, if so, advances the
// stream's claim; a new claim is tenant's. mu is held.
func (ts *Store) admit(id, tenant, key string, end bool, rec *semaq.TokenChunk, size int) *semaq.APIError {
	if ts.closed {
		return semaq.NewAPIError(semaq.ErrUnavailable, "token stream %s: the broker is stopping", id)
	}
	c := ts.claims[id]
	if c == nil {
		// Trust on first write: record 1 of an id nobody holds claims it.
		if rec.Seq != 1 {
			return semaq.NewAPIError(semaq.ErrTokenRecord,
				"token stream %s: record %d of a stream the broker has no record 1 of", id, rec.Seq)
		}
		if len(ts.claims) >= ts.limits.MaxStreams {
			return semaq.NewAPIError(semaq.ErrTokenBusy,
				"token stream %s: the broker tracks %d token streams already (limit); retry later", id, ts.limits.MaxStreams)
		}
		c = &claim{key: key, tenant: tenant, next: 1}
		ts.claims[id] = c
	}
	switch {
	case c.legacy && !c.bound:
		return semaq.NewAPIError(semaq.ErrTokenWriter,
			"token stream %s was stored before the broker restarted; its writer cannot be verified, so it cannot be continued", id)
	case subtle.ConstantTimeCompare([]byte(c.key), []byte(key)) != 1:
		return semaq.NewAPIError(semaq.ErrTokenWriter, "token stream %s belongs to another writer", id)
	case c.stopped != "" && c.ended:
		return semaq.NewAPIError(semaq.ErrPolicy, "token stream %s was stopped (finish reason %s): %s; record %d refused",
			id, semaq.FinishContentFilter, c.stopped, rec.Seq)
	case c.ended:
		return semaq.NewAPIError(semaq.ErrTokenRecord, "token stream %s has ended; record %d refused", id, rec.Seq)
	case rec.Error != nil && c.next != 0 && rec.Seq < c.next:
		// The writer ends a stream that broke: its error record takes the
		// place of the first record it knows was not stored (refused here
		// or by JetStream after the relay passed it on).
	case c.next != 0 && rec.Seq != c.next:
		return semaq.NewAPIError(semaq.ErrTokenRecord, "token stream %s: record %d out of order; the stream expects %d", id, rec.Seq, c.next)
	case c.next != 0 && rec.Offset != c.offset:
		return semaq.NewAPIError(semaq.ErrTokenRecord, "token stream %s: record %d at offset %d; the stream is at offset %d", id, rec.Seq, rec.Offset, c.offset)
	}
	over := c.bytes+int64(size) > ts.limits.StreamBytes || c.records+1 > ts.limits.StreamRecords
	if over && !(end && size <= endAllowance) {
		return semaq.NewAPIError(semaq.ErrTokenLimit,
			"token stream %s: record %d would pass the limit of one request (%d bytes, %d records; it has %d bytes in %d records)",
			id, rec.Seq, ts.limits.StreamBytes, ts.limits.StreamRecords, c.bytes, c.records)
	}
	c.next, c.offset = rec.Seq+1, rec.Offset+uint64(rec.N)
	c.bytes += int64(size)
	c.records++
	c.ended = end
	c.touched = time.Now()
	return nil
}

// store hands a checked record to JetStream. mu is held, so records leave
// in the order they were admitted.
// The writer's reply is mapped here, when the record does leave: a
// mapping promises an ack to forward (Deps.Reply).
func (ts *Store) store(out *nats.Msg) *semaq.APIError {
	msg := *out
	if msg.Reply != "" && ts.reply != nil {
		msg.Reply = ts.reply(out.Reply)
	}
	if err := ts.nc.PublishMsg(&msg); err != nil {
		if msg.Reply != out.Reply && ts.replyDrop != nil {
			ts.replyDrop(out.Reply, msg.Reply)
		}
		return semaq.NewAPIError(semaq.ErrUnavailable, "storing token record on %s: %v", out.Subject, err)
	}
	ts.stats.stored.Add(1)
	return nil
}

// refuse answers a refused record, if its writer asked for an answer.
func (ts *Store) refuse(m *nats.Msg, e *semaq.APIError) {
	ts.stats.refused.Add(1)
	if m.Reply == "" || ts.egress == nil {
		ts.debug("token record refused", "subject", m.Subject, "err", e.Description)
		return
	}
	_ = ts.egress.Publish(m.Reply, semaq.MarshalError(e))
}

func (ts *Store) debug(msg string, args ...any) {
	if ts.log != nil {
		ts.log.Debug(msg, args...)
	}
}

// BindJob makes the holder of a job's lease the only writer of the job's
// token stream: the dispatcher calls it with the job's request id, tenant
// (its AI-Tenant, which the ingress stamps from the publisher's identity)
// and lease before it hands the job out. The stream is stored under that
// tenant. A redelivered job is bound again with its new lease and the
// stream continues (the previous holder can write no more). If another
// writer claimed the id first, what it wrote is purged before the holder's
// first record is stored. In a cluster every node's relay is told
// (bind.go).
//
// ch, when on, is where the stream's answer is chained once it ends
// (answers.go).
func (ts *Store) BindJob(id, tenant, key string, ch api.AnswerChain) {
	if ts == nil || semaq.CheckRequestID(id) != nil || semaq.CheckTokenKey(key) != nil {
		return
	}
	ts.bind(id, tenant, key, ch)
	ts.shareBind(id, tenant, key, ch)
}

// bind is BindJob on this node. In a cluster a new binding lets the
// holder's first record here set where the stream goes on: its writer may
// have written the records before it through another node.
func (ts *Store) bind(id, tenant, key string, ch api.AnswerChain) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		return
	}
	tenant = semaq.TokenTenant(tenant)
	c := ts.claims[id]
	if ch.On() {
		defer ts.chainBound(id, ch) // after the claim is made, under mu
	}
	switch {
	case c == nil:
		// Jobs are bounded by their queues, not by maxStreams; past twice
		// it the job is not bound, and its worker's first record claims
		// the id as any writer's would.
		if len(ts.claims) >= 2*ts.limits.MaxStreams {
			return
		}
		c = &claim{key: key, tenant: tenant, bound: true, next: 1, touched: time.Now()}
		if ts.share {
			c.next = 0
		}
		ts.claims[id] = c
	case c.legacy && !c.bound:
		// Stored before a restart: the job's holder continues it from
		// wherever it is (its first record sets the order), under the
		// tenant it is stored under.
		c.key, c.bound, c.next, c.touched = key, true, 0, time.Now()
	case c.bound:
		c.key, c.touched = key, time.Now()
	case subtle.ConstantTimeCompare([]byte(c.key), []byte(key)) == 1 && c.tenant == tenant:
		c.bound = true
	default:
		// A foreign writer's claim, or the holder's own first records
		// stored under another tenant than the job's: purged. Records of
		// the foreign writer held by an earlier purge are dropped with the
		// rest of what it wrote; records that waited for this binding are
		// checked against it.
		waited := c.waiting
		*c = claim{key: key, tenant: tenant, bound: true, next: 1, touched: time.Now(), purging: true}
		ts.admitWaiting(id, c, waited)
		ts.work.Add(1) // under mu while open: Close waits for it
		if !ts.gate.Go("purge-foreign", func(context.Context) { ts.purgeForeign(id, c) }) {
			ts.work.Done() // the node is shutting down: the stream's MaxAge takes over
		}
	}
}

// purgeForeign removes what a foreign writer stored under id, then stores
// the rightful writer's records held meanwhile.
func (ts *Store) purgeForeign(id string, c *claim) {
	defer ts.work.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Records the relay sent before the bind may still be on their way into
	// the stream: a stored barrier written after them (same connection,
	// same stream) proves they are in, so the purge gets them all.
	_, err := ts.js.Publish(ctx, reserved.TokenStorePrefix+barrier+".x", nil)
	if err == nil {
		err = ts.stream.Purge(ctx, jetstream.WithPurgeSubject(semaq.TokenSubjectFilter(semaq.TokenAnyTenant, id)))
	}
	if err == nil {
		err = ts.stream.Purge(ctx, jetstream.WithPurgeSubject(semaq.TokenPrefix+barrier+".>"))
	}
	if err != nil && ts.log != nil {
		ts.log.Warn("token stream: purging a foreign writer's records", "id", id, "err", err)
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.claims[id] != c || !c.purging {
		return
	}
	for i, m := range c.held {
		if e := ts.store(m); e != nil && m.Reply != "" && ts.egress != nil {
			_ = ts.egress.Publish(m.Reply, semaq.MarshalError(e))
		}
		c.held[i] = nil
	}
	c.held, c.purging = nil, false
}

// forget drops the claim of a stream whose records are gone.
func (ts *Store) forget(id string) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if c := ts.claims[id]; c != nil && !c.purging {
		delete(ts.claims, id)
	}
}

// sweep drops the claims of streams nobody ended whose records the stream's
// MaxAge has removed, and jobs' bindings that never got a record. mu is not
// held.
func (ts *Store) sweep(now time.Time) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for id, c := range ts.claims {
		idle := now.Sub(c.touched)
		if c.purging || ts.timers[id] != nil {
			continue
		}
		if idle > semaq.MaxTokenAge || c.records == 0 && !c.legacy && idle > emptyClaimTTL {
			delete(ts.claims, id)
		}
	}
}

// loadLegacy marks the request ids stored before this relay started: their
// writers are unknown, so nobody but a job's bound holder may continue
// them.
func (ts *Store) loadLegacy(ctx context.Context) error {
	if info := ts.stream.CachedInfo(); info != nil && info.State.Msgs == 0 {
		return nil
	}
	info, err := ts.stream.Info(ctx, jetstream.WithSubjectFilter(semaq.TokenPrefix+">"))
	if err != nil {
		return err
	}
	now := time.Now()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for subj := range info.State.Subjects {
		tenant, id, _, ok := semaq.ParseTokenSubject(subj)
		if !ok {
			// Not a stream's record: a barrier, or a record stored under
			// an older layout, which its MaxAge removes.
			continue
		}
		if ts.claims[id] == nil {
			ts.claims[id] = &claim{legacy: true, tenant: tenant, touched: now}
		}
	}
	return nil
}

// EndJob ends the token stream of a cancelled job of tenant with te, on
// the broker's behalf, unless it has ended: when the worker that held the
// job is gone, nobody else could end it (only the lease holder may write),
// and readers replaying the stream would wait for its retention. A stream
// nobody has claimed is claimed for the broker alone, so no writer can add
// to it.
func (ts *Store) EndJob(id, tenant string, te *semaq.TokenError) {
	if ts == nil || semaq.CheckRequestID(id) != nil || te == nil {
		return
	}
	ts.mu.Lock()
	if ts.closed {
		ts.mu.Unlock()
		return
	}
	c := ts.claims[id]
	if c == nil {
		if len(ts.claims) >= ts.limits.MaxStreams {
			ts.mu.Unlock()
			return
		}
		// An empty key matches no writer's (CheckTokenKey wants 16 bytes).
		c = &claim{tenant: semaq.TokenTenant(tenant), next: 1, touched: time.Now()}
		ts.claims[id] = c
	}
	if c.ended {
		ts.mu.Unlock()
		return
	}
	rec := semaq.TokenChunk{Seq: max(c.next, 1), Offset: c.offset, Error: te}
	out := &nats.Msg{Subject: storeSubject(c.tenant, id, true), Header: nats.Header{}, Data: semaq.AppendTokenChunk(nil, &rec)}
	markAnswer(c, []*nats.Msg{out})
	c.next, c.ended, c.touched = rec.Seq+1, true, time.Now()
	c.records++
	c.bytes += int64(len(out.Data))
	var e *semaq.APIError
	if c.purging {
		c.held = append(c.held, out)
	} else {
		e = ts.store(out)
	}
	ts.mu.Unlock()
	if e != nil {
		ts.debug("ending a cancelled job's token stream", "id", id, "err", e.Description)
		return
	}
	ts.ended(id, out)
}

// claimOf reports what the relay holds for id: whether any claim or job
// binding exists, and if so its tenant token and whether its stream has
// ended. Read-only, for the status API (api.go).
func (ts *Store) claimOf(id string) (tenant string, known, ended bool) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	c := ts.claims[id]
	if c == nil {
		return "", false, false
	}
	return c.tenant, true, c.ended
}
