package dispatch

// The lease store: what the dispatcher knows of held jobs that JetStream
// does not, kept where a dispatcher started later (after a restart, or on
// the node that leads the queue's stream after a failover) finds it, and
// the one place that says which lease of a job counts.
//
// The stream holds every request until it is done, and the dispatch
// consumer, made anew at each start, delivers all of them again; what it
// cannot say is which are with a worker, under which lease, until when,
// and how often each was delivered. Each job's lease is recorded, before
// the job is shipped, under the job's own key s<sequence> of a KV-shaped
// stream of the queue's own (KV_SQ_LEASES_<queue>, history 1), with the
// queue stream's storage and replicas: a worker that holds a job can
// answer it whichever dispatcher takes the answer. Recorded: the worker,
// when the job was handed out and when its lease ends (wall-clock time, so
// the nodes' clocks must agree to well within an ack wait), its delivery
// count and the SHA-256 of its lease (the secret itself never leaves the
// dispatcher's memory, so readers of the record learn nothing they could
// answer with). An in-progress answer writes the job's record again with
// its new end. A done job's record is replaced by a purge marker, which
// carries the sum of the lease it was acked under (HdrLeaseDone).
//
// Every write of a job's record is conditional on the record the
// dispatcher last knew (JetStream's expected last sequence of the key's
// subject), so the store orders the leases of a job: two dispatchers that
// both believe they serve the queue — the one a partition or a pause cut
// off, which has not yet heard that it no longer leads, and its successor
// — cannot both lease one job, since the second write finds the record
// moved and is refused. The loser reads the record (resolve) and adopts
// what it says: the job is held by the other's worker until the lease
// ends, or done. A worker's answer under a lease the dispatcher does not
// know is checked against the store before it is refused, so the
// dispatcher that did not lease the job answers as the one that did.
//
// Records of an earlier version (key b<id>, the jobs of one fetch) are
// read at start and dropped once no job needs them.
//
// The records are written from the internal connection only: $KV.> is
// reserved for the broker (docs/security.md), so a client can neither
// forge a lease nor move one.

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/dispatch/sched"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/wallclock"
)

// LeaseBucket is the name of queue's lease store, a KV bucket whose
// stream is "KV_" + LeaseBucket(queue).
func LeaseBucket(queue string) string { return "SQ_LEASES_" + queue }

// leaseRecord is one held job as the lease store says.
type leaseRecord struct {
	Sum        string // SHA-256 of the lease, base64url
	Worker     string // its holder
	Deliveries int    // deliveries so far, this one included
	Fetched    int64  // when it was handed out, Unix ms
	Until      int64  // when the lease ends, Unix ms
	key        string // of the stored record that says so
	rev        uint64 // that record's revision (its stream sequence)
}

// storedLeases is one stored record: the jobs of one fetch (key b<id>), or
// one job's extended lease (key s<sequence>).
type storedLeases struct {
	Worker  string      `json:"w"`
	Fetched int64       `json:"f"`
	Until   int64       `json:"u"`
	Jobs    []storedJob `json:"j"`
}

type storedJob struct {
	Seq        uint64 `json:"s"`
	Deliveries int    `json:"d"`
	Sum        string `json:"h"`
}

// better reports whether a is a later lease of its job than b.
func (a *leaseRecord) better(b leaseRecord) bool {
	return a.Deliveries > b.Deliveries || a.Deliveries == b.Deliveries && a.Until > b.Until
}

// leaseSum is what the store keeps of a lease's secret.
func leaseSum(lease string) string {
	sum := sha256.Sum256([]byte(lease))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// leaseMatches checks a lease a worker presents against the job's, in
// constant time.
func leaseMatches(j *sched.Job, got string) bool { return sumMatches(j.LeaseSum, got) }

// sumMatches reports whether sum (leaseSum's) is that of lease, in
// constant time and without allocating: every answer checks one.
func sumMatches(sum, lease string) bool {
	var want [43]byte // base64 of a SHA-256, unpadded
	h := sha256.Sum256([]byte(lease))
	base64.RawURLEncoding.Encode(want[:], h[:])
	if len(sum) != len(want) {
		return false
	}
	var diff byte
	for i := range want {
		diff |= sum[i] ^ want[i]
	}
	return diff == 0
}

// leaseStore is a queue's lease store.
type leaseStore struct {
	js     jetstream.JetStream
	nc     *nats.Conn
	bucket string
	prefix string // $KV.<bucket>.
}

// HdrLeaseDone is the header of a done job's purge marker: the sum of the
// lease it was acked under, so that a dispatcher that did not take the
// ack answers a worker repeating it as the one that did.
const HdrLeaseDone = "SQ-Lease-Done"

// openLeases makes (or adopts) the lease store of the queue whose stream
// is info, with its storage and replicas. maxRecords bounds it: records
// past it are dropped oldest first (docs/queues.md).
func openLeases(ctx context.Context, js jetstream.JetStream, nc *nats.Conn, info *jetstream.StreamInfo, maxRecords int64) (*leaseStore, error) {
	bucket := LeaseBucket(info.Config.Name)
	cfg := jetstream.StreamConfig{
		Name:              "KV_" + bucket,
		Description:       "SemaQ leases of the jobs workers hold in queue " + info.Config.Name,
		Subjects:          []string{"$KV." + bucket + ".>"},
		Retention:         jetstream.LimitsPolicy,
		MaxMsgsPerSubject: 1,
		MaxMsgs:           maxRecords,
		MaxBytes:          -1,
		MaxAge:            0,
		Discard:           jetstream.DiscardOld,
		Storage:           info.Config.Storage,
		Replicas:          max(info.Config.Replicas, 1),
		AllowRollup:       true,
		DenyDelete:        true,
		AllowDirect:       true,
		Duplicates:        2 * time.Minute,
	}
	err := jsutil.Retry(ctx, func(ctx context.Context) error {
		// A stream of that name that is not a lease store (a user's
		// stream named so) is refused, never redefined.
		if st, err := js.Stream(ctx, cfg.Name); err == nil {
			have := &st.CachedInfo().Config
			if len(have.Subjects) != 1 || have.Subjects[0] != cfg.Subjects[0] {
				return fmt.Errorf("stream %s exists and is not a lease store (subjects %v); rename it", cfg.Name, have.Subjects)
			}
			if have.MaxMsgs == cfg.MaxMsgs && have.Replicas >= cfg.Replicas && have.Storage == cfg.Storage {
				return nil // as it should be: no update, no advisory to every node
			}
		} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return err
		}
		_, err := js.CreateOrUpdateStream(ctx, cfg)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("lease store %s: %w", bucket, err)
	}
	return &leaseStore{js: js, nc: nc, bucket: bucket, prefix: "$KV." + bucket + "."}, nil
}

// storeContents is what the store holds: the latest lease of each job it names
// (sequence -> record), the revision of each job's own record
// (s<sequence>), and the keys of all records.
type storeContents struct {
	leases map[uint64]leaseRecord
	revs   map[uint64]uint64
	keys   []string
}

// load reads every record of the store.
func (ls *leaseStore) load(ctx context.Context) (storeContents, error) {
	kv, err := ls.js.KeyValue(ctx, ls.bucket)
	if err != nil {
		return storeContents{}, fmt.Errorf("lease store %s: %w", ls.bucket, err)
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return storeContents{}, fmt.Errorf("lease store %s: %w", ls.bucket, err)
	}
	defer func() { _ = w.Stop() }()
	out := storeContents{leases: make(map[uint64]leaseRecord), revs: make(map[uint64]uint64)}
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				return out, nil // everything stored has been read
			}
			out.keys = append(out.keys, e.Key()) // one not ours is dropped with the stale ones
			if seq, ok := jobKey(e.Key()); ok {
				out.revs[seq] = e.Revision()
			}
			var st storedLeases
			if json.Unmarshal(e.Value(), &st) != nil {
				continue
			}
			for _, sj := range st.Jobs {
				rec := leaseRecord{Sum: sj.Sum, Worker: st.Worker, Deliveries: sj.Deliveries, Fetched: st.Fetched,
					Until: st.Until, key: e.Key(), rev: e.Revision()}
				if have, ok := out.leases[sj.Seq]; sj.Sum != "" && (!ok || rec.better(have)) {
					out.leases[sj.Seq] = rec
				}
			}
		case <-ctx.Done():
			return storeContents{}, fmt.Errorf("lease store %s: reading: %w", ls.bucket, ctx.Err())
		}
	}
}

// record is the lease record of j, held: its times as this node's wall
// clock reads them (wallclock), the end rounded up. mu is held.
func record(j *sched.Job) leaseRecord {
	return leaseRecord{Sum: j.LeaseSum, Worker: j.Worker, Deliveries: j.Deliveries,
		Fetched: wallclock.Of(j.Fetched).UnixMilli(), Until: (wallclock.Of(j.LeaseUntil).UnixNano() + 999_999) / 1_000_000}
}

// jobKey is the sequence of the job whose own record key is.
func jobKey(key string) (uint64, bool) {
	if len(key) < 2 || key[0] != 's' {
		return 0, false
	}
	seq, err := strconv.ParseUint(key[1:], 10, 64)
	return seq, err == nil
}

// extKey is the key of job seq's own record.
func extKey(seq uint64) string { return "s" + strconv.FormatUint(seq, 10) }

// msg is job seq's record rec, to be written over the record of revision
// rev (0: none).
func (ls *leaseStore) msg(seq uint64, rec leaseRecord, rev uint64) *nats.Msg {
	st := storedLeases{Worker: rec.Worker, Fetched: rec.Fetched, Until: rec.Until,
		Jobs: []storedJob{{Seq: seq, Deliveries: rec.Deliveries, Sum: rec.Sum}}}
	body, _ := json.Marshal(st)
	m := &nats.Msg{Subject: ls.prefix + extKey(seq), Header: nats.Header{}, Data: body}
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	return m
}

// leaseWrites are job records on their way to the store.
type leaseWrites struct {
	futs []jetstream.PubAckFuture
	errs []error
}

// begin sends the records of the shipments' jobs to the store, one per
// job, all in flight at once, each over the revision the shipment says
// (shipJob.rev); wait says which JetStream stored.
func (ls *leaseStore) begin(ships []*shipment) *leaseWrites {
	w := &leaseWrites{}
	for _, sh := range ships {
		for _, sj := range sh.jobs {
			f, err := ls.js.PublishMsgAsync(ls.msg(sj.seq, sj.rec, sj.rev))
			w.futs, w.errs = append(w.futs, f), append(w.errs, err)
		}
	}
	return w
}

// leaseWritten is the outcome of one job's record write: its new revision,
// or why it was not stored (*leaseTaken when another writer moved the
// record first).
type leaseWritten struct {
	rev uint64
	err error
}

// wait waits for the writes, in the order begin sent them.
func (w *leaseWrites) wait(ctx context.Context) []leaseWritten {
	out := make([]leaseWritten, len(w.futs))
	for i, f := range w.futs {
		if f == nil {
			out[i].err = w.errs[i]
			continue
		}
		select {
		case ack := <-f.Ok():
			out[i].rev = ack.Sequence
		case err := <-f.Err():
			out[i].err = err
		case <-ctx.Done():
			out[i].err = ctx.Err()
		}
	}
	return out
}

// put writes job seq's record rec over the record of revision rev and
// waits for JetStream to have it: its new revision.
func (ls *leaseStore) put(ctx context.Context, seq uint64, rec leaseRecord, rev uint64) (uint64, error) {
	ack, err := ls.js.PublishMsg(ctx, ls.msg(seq, rec, rev))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// moved reports whether err is the store's refusal of a write whose
// record another writer moved first.
func moved(err error) bool {
	var ae *jetstream.APIError
	return errors.As(err, &ae) && (ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// leaseTaken is a job's record as another writer left it, read after a
// write of the dispatcher's lost to it.
type leaseTaken struct {
	rev  uint64       // the record's revision; 0: none (dropped)
	done string       // a purge marker: the job is done (the sum of the lease it was acked under, if any)
	gone bool         // done
	rec  *leaseRecord // a lease, running or ended
}

func (t *leaseTaken) Error() string {
	switch {
	case t.gone:
		return "the job is done (another dispatcher's record says so)"
	case t.rec != nil:
		return "the job was leased by another dispatcher (worker " + t.rec.Worker + ")"
	}
	return "the job's lease record moved"
}

// read reads job seq's record as the store's leader holds it.
func (ls *leaseStore) read(ctx context.Context, seq uint64) (*leaseTaken, error) {
	m, err := jsutil.GetMsg(ctx, ls.nc, "KV_"+ls.bucket, jsutil.MsgQuery{LastBySubj: ls.prefix + extKey(seq)})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return &leaseTaken{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lease store %s: reading job %d's record: %w", ls.bucket, seq, err)
	}
	t := &leaseTaken{rev: m.Seq}
	if op := m.Header.Get("KV-Operation"); op != "" {
		t.gone, t.done = true, m.Header.Get(HdrLeaseDone)
		return t, nil
	}
	var st storedLeases
	if json.Unmarshal(m.Data, &st) == nil {
		for _, sj := range st.Jobs {
			if sj.Seq == seq && sj.Sum != "" {
				t.rec = &leaseRecord{Sum: sj.Sum, Worker: st.Worker, Deliveries: sj.Deliveries, Fetched: st.Fetched,
					Until: st.Until, key: extKey(seq), rev: m.Seq}
			}
		}
	}
	return t, nil
}

// drop replaces the record of key by a purge marker, carrying sum when
// the job was acked under that lease. Nothing waits for JetStream: a
// record left behind names a request that is done, and the next start
// drops it.
func (ls *leaseStore) drop(key, sum string) {
	m := &nats.Msg{Subject: ls.prefix + key, Header: nats.Header{}}
	m.Header.Set("KV-Operation", "PURGE")
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	if sum != "" {
		m.Header.Set(HdrLeaseDone, sum)
	}
	_ = ls.nc.PublishMsg(m)
}

// DeleteLeases removes queue's lease store (the queue is deleted). A store
// that does not exist is no error.
func DeleteLeases(ctx context.Context, js jetstream.JetStream, queue string) error {
	err := js.DeleteStream(ctx, "KV_"+LeaseBucket(queue))
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("queue %s: lease store: %w", queue, err)
	}
	return nil
}

// leaseTable is the dispatcher's account of its lease store: the revision
// of each job's own record (the next write of it is made over that one),
// the records of an earlier version still holding a job's lease, and the
// records of requests that are done or not yet read back: while the
// dispatcher starts, those the consumer has not delivered yet (restored),
// and the acks it answers ok when a worker repeats them, until the lease
// would have ended (finished).
//
// Locking: it has no lock of its own; Dispatcher.mu guards it. Every
// method but open, write, put, read and dropStale is called with mu held:
// open runs at start, before the dispatcher serves; write, put, read and
// dropStale use only the store (safe for concurrent use) and are called
// with mu released. With mu held it updates its maps and sends purge
// markers on the internal connection (a publish only buffers); it never
// calls back into the dispatcher or its scheduler.
type leaseTable struct {
	store *leaseStore // set by open; safe for concurrent use
	log   *slog.Logger
	// rev is the revision of the record of each job the index holds that
	// has one.
	rev map[uint64]uint64
	// legacy is the earlier version's record (b<id>) of each job whose
	// lease is in one, refs how many jobs' leases each such record holds
	// (it is dropped at none).
	legacy map[uint64]string
	refs   map[string]int
	// restored holds the store's records of requests the consumer has not
	// delivered yet, and storedKeys the keys of all records found at
	// start, until the consumer has caught up; heldRestored counts the
	// held jobs restored (logged then). finished holds the records of
	// requests done (acked by this dispatcher, or never delivered to it),
	// until their lease ends.
	restored     map[uint64]leaseRecord
	storedKeys   []string
	heldRestored int
	finished     map[uint64]leaseRecord
	// firstSeq is the queue stream's first sequence when the dispatcher
	// started: a request below it is out of the stream for good. late
	// holds, until lateUntil, the restored records of requests at or past
	// it that the consumer had not delivered when it caught up: a
	// consumer whose leader's replica lags delivers them after, and they
	// are restored as held then.
	firstSeq  uint64
	late      map[uint64]leaseRecord
	lateUntil time.Time
}

func newLeaseTable(log *slog.Logger) leaseTable {
	return leaseTable{
		log:      log,
		rev:      make(map[uint64]uint64),
		legacy:   make(map[uint64]string),
		refs:     make(map[string]int),
		finished: make(map[uint64]leaseRecord),
	}
}

// open makes (or adopts) the lease store of the queue whose stream is
// info and reads its records, retried while a cluster elects leaders.
// maxRecords bounds the store (openLeases).
func (t *leaseTable) open(ctx context.Context, js jetstream.JetStream, nc *nats.Conn, info *jetstream.StreamInfo, maxRecords int64) error {
	store, err := openLeases(ctx, js, nc, info, maxRecords)
	if err != nil {
		return err
	}
	t.store = store
	return jsutil.Retry(ctx, func(ctx context.Context) error {
		st, err := store.load(ctx)
		if err != nil {
			return err
		}
		t.restored, t.storedKeys, t.rev = st.leases, st.keys, st.revs
		t.firstSeq = info.State.FirstSeq
		return nil
	})
}

// takeRestored returns, and forgets, the store's record of request seq,
// which the consumer has just delivered, if the store names it held.
// mu is held.
func (t *leaseTable) takeRestored(seq uint64) (leaseRecord, bool) {
	rec, ok := t.restored[seq]
	if ok {
		delete(t.restored, seq)
		return rec, true
	}
	if t.late != nil {
		if time.Now().After(t.lateUntil) {
			t.late = nil
			return rec, false
		}
		if rec, ok = t.late[seq]; ok {
			delete(t.late, seq)
			delete(t.finished, seq)
		}
	}
	return rec, ok
}

// adopt records that job seq was restored as held under rec (restore):
// read at start, or after a write lost to it. mu is held.
func (t *leaseTable) adopt(seq uint64, rec leaseRecord) {
	t.heldRestored++
	if _, ok := jobKey(rec.key); ok {
		t.rev[seq] = max(t.rev[seq], rec.rev)
		return
	}
	t.gone(seq)
	t.legacy[seq] = rec.key
	t.refs[rec.key]++
}

// leased records that job seq's record is now at revision rev, written by
// this dispatcher. mu is held.
func (t *leaseTable) leased(seq, rev uint64) {
	t.gone(seq)
	t.rev[seq] = max(t.rev[seq], rev)
}

// at records that job seq's record is at revision rev, as read (0: it has
// none). mu is held.
func (t *leaseTable) at(seq, rev uint64) {
	if rev == 0 {
		delete(t.rev, seq)
		return
	}
	t.rev[seq] = rev
}

// known is the revision of job seq's record this dispatcher last wrote or
// read (0: none). mu is held.
func (t *leaseTable) known(seq uint64) uint64 { return t.rev[seq] }

// done records that job seq is done, acked under the lease whose sum is
// sum ("" if not acked): its record is replaced by a purge marker. mu is
// held; the marker is sent under it (a publish only buffers).
func (t *leaseTable) done(seq uint64, sum string) {
	t.gone(seq)
	if _, ok := t.rev[seq]; ok || sum != "" {
		delete(t.rev, seq)
		t.store.drop(extKey(seq), sum)
	}
}

// gone lets the earlier version's record of job seq's lease go once no job
// needs it. mu is held.
func (t *leaseTable) gone(seq uint64) {
	key, ok := t.legacy[seq]
	if !ok {
		return
	}
	delete(t.legacy, seq)
	if t.refs[key]--; t.refs[key] <= 0 {
		delete(t.refs, key)
		t.store.drop(key, "")
	}
}

// finish keeps the lease (sum, ending at until, Unix ms) of job seq, whose
// ack JetStream confirmed: a worker that did not hear the answer in time
// and asks again hears ok until then (finishedAck). mu is held.
func (t *leaseTable) finish(seq uint64, sum string, until int64) {
	t.finished[seq] = leaseRecord{Sum: sum, Until: until}
}

// caughtUp is called once the consumer has delivered what the stream held
// at start (indexed says which sequences the index holds): the restored
// records left name requests that are done (acked by an earlier
// dispatcher). They are kept in memory until their lease ends (finished,
// with the acks this dispatcher confirms), so that a worker repeating an
// ack that was confirmed but not answered in time hears that it is done
// rather than that its lease is lost. mu is held; the store's records
// that name no job any more are returned, to drop (dropStale). Called
// again, it does nothing.
func (t *leaseTable) caughtUp(indexed func(seq uint64) bool, ackWait time.Duration) []string {
	if t.restored == nil {
		return nil
	}
	for seq, rec := range t.restored {
		t.finished[seq] = rec
		if seq >= t.firstSeq {
			// Perhaps still in the stream, and delivered later (the
			// consumer caught up as its leader's replica saw the stream):
			// its worker's lease, at most an ack wait from now, is kept
			// then.
			if t.late == nil {
				t.late = make(map[uint64]leaseRecord)
			}
			t.late[seq] = rec
		}
	}
	t.lateUntil = time.Now().Add(ackWait)
	var stale []string
	for _, key := range t.storedKeys {
		if seq, ok := jobKey(key); ok {
			// Only a record of a request below the stream's first
			// sequence is surely stale: one the consumer has not
			// delivered may yet come (a lagging replica), and a purge
			// marker would tell another dispatcher it is done.
			if !indexed(seq) && seq < t.firstSeq {
				delete(t.rev, seq)
				stale = append(stale, key)
			}
		} else if t.refs[key] == 0 {
			stale = append(stale, key)
		}
	}
	if t.heldRestored > 0 || len(t.restored) > 0 {
		t.log.Info("jobs held by workers kept their leases", "held", t.heldRestored, "done", len(t.restored))
	}
	t.restored, t.storedKeys = nil, nil
	return stale
}

// dropStale drops records that name no job held or queued. mu is not
// held.
func (t *leaseTable) dropStale(stale []string) {
	if len(stale) > 0 {
		t.log.Debug("dropping lease records of requests no longer in the stream", "count", len(stale))
		for _, key := range stale {
			t.store.drop(key, "")
		}
	}
}

// restoredLease reports whether the lease store names lease as the one
// of seq, a request the consumer has not delivered again yet: the
// dispatcher is starting. mu is held.
func (t *leaseTable) restoredLease(seq uint64, lease string) bool {
	rec, ok := t.restored[seq]
	return ok && sumMatches(rec.Sum, lease)
}

// finishedAck reports whether an ack of seq with lease is a repeat of an
// ack confirmed already: by this dispatcher, or by one before it. mu is
// held.
func (t *leaseTable) finishedAck(seq uint64, lease string) bool {
	rec, ok := t.finished[seq]
	return ok && sumMatches(rec.Sum, lease)
}

// pruneFinished forgets finished records whose lease has ended (the loop
// calls it once a second, so a record may outlive its lease by that
// much). mu is held.
func (t *leaseTable) pruneFinished(now time.Time) {
	for seq, rec := range t.finished {
		if now.UnixMilli() > rec.Until {
			delete(t.finished, seq)
		}
	}
}

// write sends the records of the shipments' jobs to the store (begin). mu
// is not held.
func (t *leaseTable) write(ships []*shipment) *leaseWrites { return t.store.begin(ships) }

// put writes job seq's record rec over revision rev and waits for
// JetStream to have it. mu is not held.
func (t *leaseTable) put(ctx context.Context, seq uint64, rec leaseRecord, rev uint64) (uint64, error) {
	return t.store.put(ctx, seq, rec, rev)
}

// read reads job seq's record from the store. mu is not held.
func (t *leaseTable) read(ctx context.Context, seq uint64) (*leaseTaken, error) {
	return t.store.read(ctx, seq)
}

// restore takes a request the stream delivers that the lease store says a
// worker holds into the index as held, with its lease, holder and
// deliveries, for one whole ack wait from now on this node's monotonic
// clock: the record's end was written by another dispatcher's wall clock,
// perhaps another node's, and no lease runs longer than an ack wait from
// its last grant, so a takeover never ends a lease early whatever the two
// clocks say (it may end one late by up to an ack wait). mu is held.
func (d *Dispatcher) restore(j *sched.Job, rec leaseRecord) bool {
	now := time.Now()
	j.LeaseSum, j.Worker, j.Deliveries = rec.Sum, rec.Worker, rec.Deliveries
	j.Fetched = now.Add(time.Duration(rec.Fetched-wallclock.Of(now).UnixMilli()) * time.Millisecond)
	j.LeaseUntil = now.Add(d.cfg.AckWait)
	if !d.sched.AddHeld(j) {
		return false
	}
	d.adoptSlot(j)
	d.leases.adopt(j.Seq, rec)
	return true
}

// leaseTimeout bounds the lease store's writes of one batch.
const leaseTimeout = api.Timeout
