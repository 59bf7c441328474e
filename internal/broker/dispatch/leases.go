package dispatch

// The lease store: what the dispatcher knows of held jobs that JetStream
// does not, kept where a dispatcher started later (after a restart, or on
// the node that leads the queue's stream after a failover) finds it.
//
// The stream holds every request until it is done, and the dispatch
// consumer, made anew at each start, delivers all of them again; what it
// cannot say is which are with a worker, under which lease, until when,
// and how often each was delivered. Each lease is recorded, before its
// job is shipped, in a KV-shaped stream of the queue's own
// (KV_SQ_LEASES_<queue>, key = the request's sequence, history 1), with
// the queue stream's storage and replicas: a worker that holds a job can
// answer it whichever dispatcher takes the answer. Recorded per lease:
// the SHA-256 of its secret (the secret itself never leaves the
// dispatcher's memory, so readers of the record learn nothing they could
// answer with), the worker, the delivery count, and when the lease ends
// (wall-clock time, so the nodes' clocks must agree to well within an
// ack wait). An in-progress answer rewrites the record with its new end;
// a done request's record is replaced by a purge marker.
//
// The records are written from the internal connection only: $KV.> is
// reserved for the broker (docs/security.md), so a client can neither
// forge a lease nor move one.

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
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

// leaseRecord is one held job in the lease store.
type leaseRecord struct {
	Sum        string `json:"h"` // SHA-256 of the lease, base64url
	Worker     string `json:"w"` // its holder
	Deliveries int    `json:"d"` // deliveries so far, this one included
	Fetched    int64  `json:"f"` // when it was handed out, Unix ms
	Until      int64  `json:"u"` // when the lease ends, Unix ms
}

// leaseSum is what the store keeps of a lease's secret.
func leaseSum(lease string) string {
	sum := sha256.Sum256([]byte(lease))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// leaseMatches checks a lease a worker presents against the job's, in
// constant time.
func leaseMatches(j *sched.Job, got string) bool {
	return j.LeaseSum != "" && subtle.ConstantTimeCompare([]byte(j.LeaseSum), []byte(leaseSum(got))) == 1
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

// load reads every record of the store: sequence -> record.
func (ls *leaseStore) load(ctx context.Context) (map[uint64]leaseRecord, error) {
	kv, err := ls.js.KeyValue(ctx, ls.bucket)
	if err != nil {
		return nil, fmt.Errorf("lease store %s: %w", ls.bucket, err)
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("lease store %s: %w", ls.bucket, err)
	}
	defer func() { _ = w.Stop() }()
	out := make(map[uint64]leaseRecord)
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				return out, nil // everything stored has been read
			}
			seq, err := strconv.ParseUint(e.Key(), 10, 64)
			var rec leaseRecord
			if err != nil || json.Unmarshal(e.Value(), &rec) != nil || rec.Sum == "" {
				continue // not ours: ignored, and dropped when the store is cleaned
			}
			out[seq] = rec
		case <-ctx.Done():
			return nil, fmt.Errorf("lease store %s: reading: %w", ls.bucket, ctx.Err())
		}
	}
}

// record is the lease record of j, held. mu is held.
func record(j *sched.Job) leaseRecord {
	return leaseRecord{Sum: j.LeaseSum, Worker: j.Worker, Deliveries: j.Deliveries,
		Fetched: j.Fetched.UnixMilli(), Until: j.LeaseUntil.UnixMilli()}
}

func (ls *leaseStore) msg(seq uint64, rec leaseRecord) *nats.Msg {
	body, _ := json.Marshal(rec)
	return &nats.Msg{Subject: ls.prefix + strconv.FormatUint(seq, 10), Data: body}
}

// leaseWrites are records on their way to the store.
type leaseWrites struct {
	futs []jetstream.PubAckFuture
	errs []error
}

// begin sends records (seqs[i] -> recs[i]) to the store, all in flight at
// once; wait says which JetStream stored.
func (ls *leaseStore) begin(seqs []uint64, recs []leaseRecord) *leaseWrites {
	w := &leaseWrites{futs: make([]jetstream.PubAckFuture, len(seqs)), errs: make([]error, len(seqs))}
	for i, seq := range seqs {
		w.futs[i], w.errs[i] = ls.js.PublishMsgAsync(ls.msg(seq, recs[i]))
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

// put stores one record and waits for JetStream to have it.
func (ls *leaseStore) put(ctx context.Context, seq uint64, rec leaseRecord) error {
	_, err := ls.js.PublishMsg(ctx, ls.msg(seq, rec))
	return err
}

// drop replaces the records of seqs, whose requests are done, by purge
// markers. Nothing waits for JetStream: a record left behind names a
// request that is no longer in the stream, and the next start drops it.
func (ls *leaseStore) drop(seqs ...uint64) {
	for _, seq := range seqs {
		m := &nats.Msg{Subject: ls.prefix + strconv.FormatUint(seq, 10), Header: nats.Header{}}
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
	d.heldRestored++
	return true
}

// caughtUpWith is called once the consumer has delivered what the stream
// held at start: the restored records left name requests that are done
// (acked by an earlier dispatcher, whose purge marker was lost). They are
// dropped from the store, and kept in memory until their lease ends, so
// that a worker repeating an ack the earlier dispatcher confirmed but
// could not answer hears that it is done rather than that its lease is
// lost. mu is held; the records to drop are returned.
func (d *Dispatcher) caughtUpWith() []uint64 {
	var stale []uint64
	for seq, rec := range d.restored {
		stale = append(stale, seq)
		d.finished[seq] = rec
	}
	d.restored = nil
	if d.heldRestored > 0 || len(stale) > 0 {
		d.log.Info("jobs held by workers kept their leases", "held", d.heldRestored, "done", len(stale))
	}
	return stale
}

// dropStale drops records of requests no longer in the stream. mu is not
// held.
func (d *Dispatcher) dropStale(stale []uint64) {
	if len(stale) > 0 {
		d.log.Debug("dropping lease records of requests no longer in the stream", "count", len(stale))
		d.leases.drop(stale...)
	}
}

// restoredLease reports whether the lease store names lease as the one
// of seq, a request the consumer has not delivered again yet: the
// dispatcher is starting. mu is held.
func (d *Dispatcher) restoredLease(seq uint64, lease string) bool {
	rec, ok := d.restored[seq]
	return ok && subtle.ConstantTimeCompare([]byte(rec.Sum), []byte(leaseSum(lease))) == 1
}

// finishedAck reports whether an ack of seq with lease is a repeat of an
// ack confirmed before this dispatcher started. mu is held.
func (d *Dispatcher) finishedAck(seq uint64, lease string) bool {
	rec, ok := d.finished[seq]
	return ok && subtle.ConstantTimeCompare([]byte(rec.Sum), []byte(leaseSum(lease))) == 1
}

// pruneFinished forgets finished records whose lease has ended. mu is
// held.
func (d *Dispatcher) pruneFinished(now time.Time) {
	for seq, rec := range d.finished {
		if now.UnixMilli() > rec.Until {
			delete(d.finished, seq)
		}
	}
}

// leaseTimeout bounds the lease store's writes of one batch.
const leaseTimeout = api.Timeout
