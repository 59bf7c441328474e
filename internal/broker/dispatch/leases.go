package dispatch

// The lease store: what the dispatcher knows of held jobs that JetStream
// does not, kept where a dispatcher started later (after a restart, or on
// the node that leads the queue's stream after a failover) finds it.
//
// The stream holds every request until it is done, and the dispatch
// consumer, made anew at each start, delivers all of them again; what it
// cannot say is which are with a worker, under which lease, until when,
// and how often each was delivered. The leases of a fetch's jobs are
// recorded, before the jobs are shipped, in one record of a KV-shaped
// stream of the queue's own (KV_SQ_LEASES_<queue>, key b<unique id>,
// history 1), with the queue stream's storage and replicas: a worker that
// holds a job can answer it whichever dispatcher takes the answer.
// Recorded: the worker, when the jobs were handed out and when their
// leases end (wall-clock time, so the nodes' clocks must agree to well
// within an ack wait), and per job its sequence, delivery count and the
// SHA-256 of its lease (the secret itself never leaves the dispatcher's
// memory, so readers of the record learn nothing they could answer with).
// An in-progress answer records the job's new end under s<sequence>. Of
// several records naming a job, the one with the most deliveries, then
// the latest end, counts. A record is replaced by a purge marker once
// every job it names is done or was handed out again.
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

// load reads every record of the store: the latest lease of each job it
// names (sequence -> record), and the keys of all records.
func (ls *leaseStore) load(ctx context.Context) (map[uint64]leaseRecord, []string, error) {
	kv, err := ls.js.KeyValue(ctx, ls.bucket)
	if err != nil {
		return nil, nil, fmt.Errorf("lease store %s: %w", ls.bucket, err)
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, nil, fmt.Errorf("lease store %s: %w", ls.bucket, err)
	}
	defer func() { _ = w.Stop() }()
	out := make(map[uint64]leaseRecord)
	var keys []string
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				return out, keys, nil // everything stored has been read
			}
			keys = append(keys, e.Key()) // one not ours is dropped with the stale ones
			var st storedLeases
			if json.Unmarshal(e.Value(), &st) != nil {
				continue
			}
			for _, sj := range st.Jobs {
				rec := leaseRecord{Sum: sj.Sum, Worker: st.Worker, Deliveries: sj.Deliveries, Fetched: st.Fetched,
					Until: st.Until, key: e.Key()}
				if have, ok := out[sj.Seq]; sj.Sum != "" && (!ok || rec.better(have)) {
					out[sj.Seq] = rec
				}
			}
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("lease store %s: reading: %w", ls.bucket, ctx.Err())
		}
	}
}

// record is the lease record of j, held. mu is held.
func record(j *sched.Job) leaseRecord {
	// The end rounded up: a restored lease never ends before the one given.
	return leaseRecord{Sum: j.LeaseSum, Worker: j.Worker, Deliveries: j.Deliveries,
		Fetched: j.Fetched.UnixMilli(), Until: (j.LeaseUntil.UnixNano() + 999_999) / 1_000_000}
}

// msg is the stored record of recs under key: one worker's, handed out
// and ending at once.
func (ls *leaseStore) msg(key string, seqs []uint64, recs []leaseRecord) *nats.Msg {
	st := storedLeases{Worker: recs[0].Worker, Fetched: recs[0].Fetched, Until: recs[0].Until, Jobs: make([]storedJob, len(recs))}
	for i, r := range recs {
		st.Jobs[i] = storedJob{Seq: seqs[i], Deliveries: r.Deliveries, Sum: r.Sum}
	}
	body, _ := json.Marshal(st)
	return &nats.Msg{Subject: ls.prefix + key, Data: body}
}

// leaseWrites are records on their way to the store.
type leaseWrites struct {
	futs []jetstream.PubAckFuture
	errs []error
}

// begin sends the records of shipments to the store, one a shipment, all
// in flight at once; wait says which JetStream stored.
func (ls *leaseStore) begin(ships []*shipment) *leaseWrites {
	w := &leaseWrites{futs: make([]jetstream.PubAckFuture, len(ships)), errs: make([]error, len(ships))}
	for i, sh := range ships {
		seqs, recs := make([]uint64, len(sh.jobs)), make([]leaseRecord, len(sh.jobs))
		for k, sj := range sh.jobs {
			seqs[k], recs[k] = sj.seq, sj.rec
		}
		w.futs[i], w.errs[i] = ls.js.PublishMsgAsync(ls.msg(sh.key, seqs, recs))
	}
	return w
}

// wait waits for the writes: nil where JetStream stored the record.
func (w *leaseWrites) wait(ctx context.Context) []error {
	for i, f := range w.futs {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			w.errs[i] = err
		case <-ctx.Done():
			w.errs[i] = ctx.Err()
		}
	}
	return w.errs
}

// extKey is the key of job seq's extended lease.
func extKey(seq uint64) string { return "s" + strconv.FormatUint(seq, 10) }

// put stores job seq's extended lease and waits for JetStream to have it.
func (ls *leaseStore) put(ctx context.Context, seq uint64, rec leaseRecord) error {
	_, err := ls.js.PublishMsg(ctx, ls.msg(extKey(seq), []uint64{seq}, []leaseRecord{rec}))
	return err
}

// drop replaces the records of keys by purge markers. Nothing waits for
// JetStream: a record left behind names requests that are done or leased
// again, and the next start drops it.
func (ls *leaseStore) drop(keys ...string) {
	for _, key := range keys {
		m := &nats.Msg{Subject: ls.prefix + key, Header: nats.Header{}}
		m.Header.Set("KV-Operation", "PURGE")
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		_ = ls.nc.PublishMsg(m)
	}
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

// leaseTable is the dispatcher's account of its lease store: which
// stored record holds each held job's latest lease and how many jobs'
// latest lease each record holds (a record is dropped at none), which
// jobs have an extension record (s<sequence>), and the records of
// requests that are done or not yet read back: while the dispatcher
// starts, those the consumer has not delivered yet (restored), and the
// acks it answers ok when a worker repeats them, until the lease would
// have ended (finished).
//
// Locking: it has no lock of its own; Dispatcher.mu guards it. Every
// method but open, write, put and dropStale is called with mu held: open
// runs at start, before the dispatcher serves; write, put and dropStale
// use only the store (safe for concurrent use) and are called with mu
// released. With mu held it updates its maps and sends purge markers on
// the internal connection (a publish only buffers); it never calls back
// into the dispatcher or its scheduler.
type leaseTable struct {
	store *leaseStore // set by open; safe for concurrent use
	log   *slog.Logger
	// key is the record of each job's latest lease, refs how many jobs'
	// latest lease each record holds, extended the jobs with an extension
	// record.
	key      map[uint64]string
	refs     map[string]int
	extended map[uint64]bool
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
}

func newLeaseTable(log *slog.Logger) leaseTable {
	return leaseTable{
		log:      log,
		key:      make(map[uint64]string),
		refs:     make(map[string]int),
		extended: make(map[uint64]bool),
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
	return jsutil.Retry(ctx, func(ctx context.Context) (err error) {
		t.restored, t.storedKeys, err = store.load(ctx)
		return err
	})
}

// takeRestored returns, and forgets, the store's record of request seq,
// which the consumer has just delivered, if the store names it held.
// mu is held.
func (t *leaseTable) takeRestored(seq uint64) (leaseRecord, bool) {
	rec, ok := t.restored[seq]
	if ok {
		delete(t.restored, seq)
	}
	return rec, ok
}

// adopt records that job seq was restored as held under rec (restore).
// mu is held.
func (t *leaseTable) adopt(seq uint64, rec leaseRecord) {
	t.heldRestored++
	t.moved(seq, rec.key)
	if rec.key == extKey(seq) {
		t.extended[seq] = true
	}
}

// moved records that job seq's latest lease is in the record key, and
// lets the record of its previous one go once no job needs it. mu is held.
func (t *leaseTable) moved(seq uint64, key string) {
	t.gone(seq)
	t.key[seq] = key
	t.refs[key]++
}

// extend records that job seq's lease was extended: its extension record
// (put) goes when the job is done. mu is held.
func (t *leaseTable) extend(seq uint64) { t.extended[seq] = true }

// done records that job seq is done: its records go once no job needs
// them. mu is held; the purge markers are sent under it (a publish only
// buffers).
func (t *leaseTable) done(seq uint64) {
	t.gone(seq)
	if t.extended[seq] {
		delete(t.extended, seq)
		t.store.drop(extKey(seq))
	}
}

func (t *leaseTable) gone(seq uint64) {
	key, ok := t.key[seq]
	if !ok {
		return
	}
	delete(t.key, seq)
	if t.refs[key]--; t.refs[key] <= 0 {
		delete(t.refs, key)
		t.store.drop(key)
	}
}

// finish keeps the lease (sum, ending at until, Unix ms) of job seq, whose
// ack JetStream confirmed: a worker that did not hear the answer in time
// and asks again hears ok until then (finishedAck). mu is held.
func (t *leaseTable) finish(seq uint64, sum string, until int64) {
	t.finished[seq] = leaseRecord{Sum: sum, Until: until}
}

// caughtUp is called once the consumer has delivered what the stream held
// at start: the restored records left name requests that are done (acked
// by an earlier dispatcher). They are kept in memory until their lease
// ends (finished, with the acks this dispatcher confirms), so that a
// worker repeating an ack that was confirmed but not answered in time
// hears that it is done rather than that its lease is lost. mu is held;
// the store's records that name no job any more are returned, to drop
// (dropStale). Called again, it does nothing.
func (t *leaseTable) caughtUp() []string {
	if t.restored == nil {
		return nil
	}
	for seq, rec := range t.restored {
		t.finished[seq] = rec
	}
	var stale []string
	for _, key := range t.storedKeys {
		if t.refs[key] == 0 {
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
		t.store.drop(stale...)
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

// write sends the records of shipments' leases to the store (begin). mu
// is not held.
func (t *leaseTable) write(ships []*shipment) *leaseWrites { return t.store.begin(ships) }

// put stores job seq's extended lease and waits for JetStream to have it.
// mu is not held.
func (t *leaseTable) put(ctx context.Context, seq uint64, rec leaseRecord) error {
	return t.store.put(ctx, seq, rec)
}

// restore takes a request the stream delivers that the lease store says a
// worker holds into the index as held, with its lease, holder, deliveries
// and end. A lease that ended meanwhile lapses at the next tick: the job
// goes back to the queue, its deliveries kept. mu is held.
func (d *Dispatcher) restore(j *sched.Job, rec leaseRecord) bool {
	j.LeaseSum, j.Worker, j.Deliveries = rec.Sum, rec.Worker, rec.Deliveries
	j.Fetched, j.LeaseUntil = time.UnixMilli(rec.Fetched), time.UnixMilli(rec.Until)
	if !d.sched.AddHeld(j) {
		return false
	}
	d.adoptSlot(j)
	d.leases.adopt(j.Seq, rec)
	return true
}

// leaseTimeout bounds the lease store's writes of one batch.
const leaseTimeout = api.Timeout
