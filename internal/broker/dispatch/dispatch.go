package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/dispatch/sched"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/wallclock"
	"github.com/semaq/semaq/semaq"
)

// Dispatcher serves one work queue on this node. It reads every request of
// the queue's stream through one consumer of its own (never acked until the
// request is done, so JetStream keeps it: a broker restart loses nothing
// queued; consumer.go), keeps a scheduling index in memory (package sched:
// the fields it schedules on and sizes, not payloads, which it reads back
// by sequence when it hands a request out; payload.go), and answers
// workers' fetches, acks and cancels.
//
// Two connections: nc, internal, for JetStream (the consumer, acks, reads,
// dead letters) and cancel notices to $SQ.QC.<worker>; out, the egress
// user's, for every message to a subject a client chose (fetch replies and
// job frames, answer and cancel replies), each checked with
// semaq.CheckReplySubject first. out cannot reach JetStream or $SQ.
//
// Goroutines: one of its own, the loop (timers and consumer checks), one
// per ack JetStream did not confirm, whose request is deleted by sequence
// instead (at most one per held job; acks.go), and the callbacks of its
// two connections (subscriptions, JetStream's confirmations of acks and
// the consumer's deliveries). Close waits for all of them.
//
// Locking: mu guards sched, parked, closed, gen, leaving, removing,
// caughtUp, the lease table (leases, leases.go) and the statistics; then
// adm.mu (admission.go). consMu guards cons and consume, cbMu cbClosed:
// leaves, like the ack tracker's lock (acks, the acks JetStream has not
// confirmed yet; acks.go), which is taken with none of these held. NATS
// messages are built under mu and sent after it is released; JetStream
// calls (reads, dead letters, removals, lease writes) are made without it.
// Its exported methods are safe for concurrent use.
type Dispatcher struct {
	deps     Deps
	obs      Observer
	name     string
	cfg      semaq.QueueConfig // with defaults
	ackWait  string            // cfg.AckWait, as each job's header gives it
	log      *slog.Logger
	nc       *nats.Conn // internal
	out      *nats.Conn // egress: to subjects clients chose
	stream   jetstream.Stream
	payloads *payloadReader

	mu     sync.Mutex
	sched  *sched.Scheduler
	parked []*parkedFetch
	stats  queueStats
	closed bool
	// gen numbers the consumers made; deliveries of an older one are
	// ignored. leaving holds sequences out of the index but still in the
	// stream on purpose (being dead-lettered, or failed to be); removing,
	// sequences done whose removal from the stream JetStream has not
	// confirmed yet (retried by the loop). A delivery of either is left
	// alone; any other sequence the index lacks is new.
	gen      uint64
	leaving  map[uint64]bool
	removing map[uint64]bool
	// leases is what the dispatcher knows of the lease store's records
	// (leases.go).
	leases leaseTable
	// classes holds the slots of capped classes (classes.go).
	classes classState
	// caughtUp: the consumer has delivered what the stream held at start
	// (till then admission counts what the stream held, adm.floor).
	caughtUp bool

	adm admission
	// Read by the ingress without mu (admission control).
	adaptiveTokens atomic.Int64
	retryAfterMs   atomic.Int64
	admitted       atomic.Uint64
	refused        atomic.Uint64

	consSince   time.Time // when the consumer's Raft leader was elected, as last seen (loop only)
	consCreated time.Time // when the consumer this dispatcher made was made (loop only)

	consMu  sync.Mutex
	cons    jetstream.Consumer
	consume jetstream.ConsumeContext
	kick    chan struct{}
	subs    []*nats.Subscription
	stop    chan struct{}
	done    chan struct{}
	// closedNC and closedOut are closed when the connections are, after
	// their drain.
	closedNC, closedOut chan struct{}

	// Callbacks of the connections (handle) in flight: Close waits for
	// them, and none starts once cbClosed is set.
	cbMu     sync.Mutex
	cbClosed bool
	cbs      sync.WaitGroup
	// acks takes acked requests out of the stream and hands them back
	// to ackDone once JetStream has confirmed it (acks.go).
	acks *ackTracker
	// early holds the answers to jobs not read back yet while the
	// dispatcher starts, handled once its consumer has caught up (mu).
	early []*nats.Msg
	// checks holds a token per answer being checked against the lease
	// store (checkLease): at most maxLeaseChecks.
	checks chan struct{}
}

// parkedFetch is a fetch waiting for work.
type parkedFetch struct {
	req   semaq.FetchRequest
	reply string
	hdr   nats.Header // the request's: who asked (Deps.Interest)
	until time.Time
}

// outMsg is a message to send once mu is released.
type outMsg = nats.Msg

// tick is how often the dispatcher looks at deadlines, delays, leases and
// affinity waits. Timing is accurate to about this much.
const tick = 20 * time.Millisecond

// Start serves the work queue cfg: it reads the queue's stream (named
// cfg.Name, which must exist) from its first request and starts serving
// workers. The consumer is made anew each time: every request still in
// the stream is one not yet done, and comes back queued, or held by the
// worker the lease store says holds it (leases.go). Close stops it.
func Start(ctx context.Context, cfg semaq.QueueConfig, deps Deps) (*Dispatcher, error) {
	if err := deps.check(); err != nil {
		return nil, err
	}
	deps = deps.withDefaults()
	cfg = cfg.WithDefaults()
	log := deps.Log.With("queue", cfg.Name)
	d := &Dispatcher{
		deps:      deps,
		obs:       deps.Observer,
		name:      cfg.Name,
		cfg:       cfg,
		ackWait:   cfg.AckWait.String(),
		log:       log,
		sched:     newScheduler(cfg, deps.Match),
		leaving:   make(map[uint64]bool),
		removing:  make(map[uint64]bool),
		leases:    newLeaseTable(log),
		kick:      make(chan struct{}, 1),
		checks:    make(chan struct{}, maxLeaseChecks),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		closedNC:  make(chan struct{}),
		closedOut: make(chan struct{}),
	}
	d.sched.SetCap(d.capped, d.picked)
	if err := d.start(ctx); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *Dispatcher) start(ctx context.Context) (err error) {
	// Connections of its own: the dispatcher's traffic (consumer
	// deliveries, reads, fetches, answers) does not queue behind the
	// ingress's on the shared connections' read loops.
	d.nc, err = d.deps.Internal(nats.Name("semaq-dispatch-"+d.name), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1),
		nats.ClosedHandler(func(*nats.Conn) { close(d.closedNC) }))
	if err != nil {
		return fmt.Errorf("queue %s: connection: %w", d.name, err)
	}
	d.out, err = d.deps.Egress(nats.Name("semaq-dispatch-egress-"+d.name), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			d.log.Warn("egress connection refused a send", "err", err)
		}),
		nats.ClosedHandler(func(*nats.Conn) { close(d.closedOut) }))
	if err != nil {
		d.nc.Close()
		return fmt.Errorf("queue %s: egress connection: %w", d.name, err)
	}
	defer func() {
		if err != nil {
			d.stopConsuming()
			d.unsubscribe()
			d.payloads.close()
			d.nc.Close()
			d.out.Close()
		}
	}()
	d.acks = newAckTracker(d.nc, d.deps.Gate, d.removeSync, d.ackDone)
	js, err := jetstream.New(d.nc)
	if err != nil {
		return fmt.Errorf("queue %s: %w", d.name, err)
	}
	// JetStream calls at start are retried while a cluster elects leaders
	// (jsutil.Retry): a dispatcher often starts just after one.
	if err := jsutil.Retry(ctx, func(ctx context.Context) (err error) {
		d.stream, err = js.Stream(ctx, d.name)
		return err
	}); err != nil {
		return fmt.Errorf("queue %s: %w", d.name, err)
	}
	if err := d.ensureStreamLimits(ctx, js); err != nil {
		return fmt.Errorf("queue %s: %w", d.name, err)
	}
	info := d.stream.CachedInfo()
	d.loadOwned() // before the lease store: a slot is taken before its lease is recorded
	if err := d.leases.open(ctx, js, d.nc, info, leaseRecords(d.cfg)); err != nil {
		return fmt.Errorf("queue %s: %w", d.name, err)
	}
	if d.payloads, err = newPayloadReader(d.nc, d.name); err != nil {
		return fmt.Errorf("queue %s: %w", d.name, err)
	}
	subs := []struct {
		subj string
		h    nats.MsgHandler
	}{
		{fmt.Sprintf(semaq.APIQueueFetchT, d.name), handle(d, d.onFetch)},
		{semaq.QueueAckPrefix + d.name + ".>", handle(d, d.onAnswer)},
		{d.acks.subject(), handle(d, d.acks.onReply)},
		{fmt.Sprintf(semaq.APIQueueCancelT, d.name), handle(d, d.onCancel)},
	}
	for _, x := range subs {
		sub, err := d.nc.Subscribe(x.subj, x.h)
		if err != nil {
			return fmt.Errorf("queue %s: %w", d.name, err)
		}
		_ = sub.SetPendingLimits(-1, -1)
		d.subs = append(d.subs, sub)
	}
	if err := d.openConsumer(ctx); err != nil {
		return fmt.Errorf("queue %s: %w", d.name, err)
	}
	if info.State.Msgs == 0 {
		// Nothing to deliver, so no delivery will say it caught up.
		d.mu.Lock()
		d.caughtUp = true
		d.mu.Unlock()
	}
	// Other nodes ask admission and status once the dispatcher is whole:
	// till then they find none (dispatch/remote.go).
	for subj, h := range d.remoteSubs() {
		sub, err := d.nc.Subscribe(subj, handle(d, h))
		if err != nil {
			return fmt.Errorf("queue %s: %w", d.name, err)
		}
		_ = sub.SetPendingLimits(-1, -1)
		d.subs = append(d.subs, sub)
	}
	if err := d.nc.Flush(); err != nil {
		return err
	}
	if !d.deps.Gate.Go("loop", func(context.Context) { d.loop() }) {
		close(d.done)
		return fmt.Errorf("queue %s: the node is shutting down", d.name)
	}
	return nil
}

// leaseRecords bounds a queue's lease store: twice the requests it may
// hold, and room for the purge markers of those done.
func leaseRecords(cfg semaq.QueueConfig) int64 {
	return min(cfg.MaxMessages*2+1024, 1<<30)
}

// ensureStreamLimits gives the queue's stream its limits: JetStream's
// backstop behind admission (StreamMaxBytes, DiscardNew), and direct gets
// for reading requests back. Queues made by an earlier version get them
// at their next start.
func (d *Dispatcher) ensureStreamLimits(ctx context.Context, js jetstream.JetStream) error {
	info := d.stream.CachedInfo()
	jc := info.Config
	d.adm.floor = usage{msgs: int64(info.State.Msgs), bytes: int64(info.State.Bytes)}
	want := StreamMaxBytes(d.cfg, d.nc.MaxPayload())
	if jc.MaxBytes == want && jc.Discard == jetstream.DiscardNew && jc.AllowDirect {
		return nil
	}
	jc.MaxBytes, jc.Discard, jc.AllowDirect = want, jetstream.DiscardNew, true
	var st jetstream.Stream
	err := jsutil.Retry(ctx, func(ctx context.Context) (err error) {
		st, err = js.UpdateStream(ctx, jc)
		return err
	})
	if err != nil {
		return fmt.Errorf("setting the stream's limits: %w", err)
	}
	d.stream = st
	return nil
}

func (d *Dispatcher) unsubscribe() {
	for _, sub := range d.subs {
		_ = sub.Unsubscribe()
	}
	d.subs = nil
}

// Close stops serving: parked fetches are ended, the consumer stopped, the
// connections drained. Queued requests stay in the stream. It returns when
// every goroutine the dispatcher started has ended, no callback of its
// connections runs any more and both are closed; or with ctx's error when
// ctx ends before the connections are closed (they then close in the
// background). Closing again returns nil at once.
func (d *Dispatcher) Close(ctx context.Context) error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	parked := d.parked
	d.parked = nil
	d.mu.Unlock()
	d.stopConsuming()
	d.unsubscribe()
	for _, p := range parked {
		d.send([]*outMsg{endOfBatch(p.reply, 409, 0, "queue "+d.name+" is no longer served here")})
	}
	close(d.stop)
	<-d.done
	d.stopConsuming() // one the loop made anew meanwhile
	d.cbMu.Lock()
	d.cbClosed = true
	d.cbMu.Unlock()
	d.cbs.Wait()
	d.acks.close() // their confirmations will not be heard
	d.payloads.close()
	drain(d.out)
	drain(d.nc)
	for _, ch := range []chan struct{}{d.closedOut, d.closedNC} {
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("queue %s: close: %w", d.name, ctx.Err())
		}
	}
	return d.deps.Gate.Close(ctx)
}

// handle wraps a callback of the dispatcher's connections so that Close
// waits for it; once Close has begun, the message is dropped, as it would
// be had it arrived after the unsubscribe.
func handle[M any](d *Dispatcher, h func(M)) func(M) {
	return func(m M) {
		d.cbMu.Lock()
		if d.cbClosed {
			d.cbMu.Unlock()
			return
		}
		d.cbs.Add(1)
		d.cbMu.Unlock()
		defer d.cbs.Done()
		h(m)
	}
}

// drain drains nc, or closes it when it cannot be drained (closed
// already, or closing): its closed handler runs either way.
func drain(nc *nats.Conn) {
	if err := nc.Drain(); err != nil {
		nc.Close()
	}
}

// loop runs the timers: deadlines, delays, leases, affinity waits, parked
// fetches that time out, and the once-a-second statistics.
func (d *Dispatcher) loop() {
	defer close(d.done)
	ticker := time.NewTicker(tick)
	defer ticker.Stop()
	lastStats, lastCheck, lastRotate := time.Now(), time.Now(), time.Now()
	for {
		select {
		case <-d.stop:
			return
		case <-d.kick:
			d.checkConsumer()
			lastCheck = time.Now()
		case now := <-ticker.C:
			d.onTick(now)
			if now.Sub(lastStats) >= time.Second {
				d.mu.Lock()
				d.stats.roll(now.Sub(lastStats), d)
				// Once a second, not every tick: the acks of the last
				// ack wait are many while a backlog drains.
				d.leases.pruneFinished(now)
				d.mu.Unlock()
				lastStats = now
			}
			if now.Sub(lastRotate) >= reserveEpoch {
				d.adm.rotate()
				lastRotate = now
			}
			if now.Sub(lastCheck) >= consumerCheck {
				d.checkConsumer()
				d.retryRemovals()
				lastCheck = time.Now()
			}
		}
	}
}

func (d *Dispatcher) onTick(now time.Time) {
	d.acks.expire(now)
	var (
		out   []*outMsg
		dead  []deadJob
		ships []*shipment
	)
	d.mu.Lock()
	expired, undelayed, lapsed := d.sched.Due(now)
	for _, j := range expired {
		d.stats.expired++
		d.obs.Expired(j)
		dead = append(dead, d.dead(j, "expired", "expired: deadline "+j.Deadline.UTC().Format(time.RFC3339Nano)+" passed in the queue"))
	}
	for _, j := range undelayed {
		d.sched.Undelay(j)
	}
	for _, j := range lapsed {
		if j.Acking {
			continue // JetStream is confirming its ack
		}
		out = append(out, d.cancelNotice(j, "ack wait of "+d.cfg.AckWait.String()+" passed"))
		if d.exhausted(j) {
			dead = append(dead, d.dead(j, "dispatch", semaq.DLQReasonMaxDeliveries))
			continue
		}
		d.stats.redelivered++
		d.unbindLease(j)
		d.sched.Requeue(j)
	}
	d.sched.ExpireWorkers(now)
	var (
		stale []string
		early []*nats.Msg
	)
	if d.caughtUp {
		// Every delivery up to the one that caught up has been indexed
		// (each under mu, in order).
		stale = d.leases.caughtUp(func(seq uint64) bool { return d.sched.BySeq(seq) != nil }, d.cfg.AckWait)
		d.dropOwned()
		early, d.early = d.early, nil
	}
	out2, ships := d.serveParked(now)
	out = append(out, out2...)
	d.publishDepth(usage{})
	d.mu.Unlock()
	d.leases.dropStale(stale)
	d.send(out)
	d.ship(ships)
	d.deadLetter(dead)
	for _, m := range early {
		d.answerJob(m, false)
	}
}

// exhausted reports whether j has been handed out as often as allowed.
func (d *Dispatcher) exhausted(j *sched.Job) bool {
	return d.cfg.MaxDeliver > 0 && j.Deliveries >= d.cfg.MaxDeliver
}

// publishDepth makes the queue's size visible to the ingress; arrived is
// what was just indexed, whose reservations it takes up. mu is held.
func (d *Dispatcher) publishDepth(arrived usage) {
	sc := d.sched
	total := usage{int64(sc.Len()), sc.TokensQueued() + sc.TokensHeld(), sc.Bytes()}
	d.adm.setIndexed(total, arrived, d.caughtUp)
}

// onRequest takes one request from the stream into the index. gen is the
// consumer generation that delivered it (consumer.go).
func (d *Dispatcher) onRequest(gen uint64, jm jetstream.Msg) {
	md, err := jm.Metadata()
	if err != nil {
		d.log.Warn("request without metadata", "err", err)
		return
	}
	seq := md.Sequence.Stream
	now := time.Now()
	d.mu.Lock()
	if d.closed || gen != d.gen {
		d.mu.Unlock()
		return
	}
	if md.NumPending == 0 {
		d.caughtUp = true
	}
	if j := d.sched.BySeq(seq); j != nil {
		// A new consumer delivers again what the index holds: the request
		// keeps its place and lease; acks go to this delivery now.
		j.JSReply, j.ReplyGen = jm.Reply(), gen
		d.mu.Unlock()
		return
	}
	if d.leaving[seq] || d.removing[seq] {
		d.mu.Unlock()
		return
	}
	j := newJob(md, jm, d.cfg)
	j.ReplyGen = gen
	d.classOf(j, jm.Headers())
	var dead []deadJob
	rec, held := d.leases.takeRestored(seq)
	if held {
		held = d.restore(j, rec)
	}
	if !held && d.sched.Add(j) {
		d.stats.arrivals++
		if !j.Deadline.IsZero() && !wallclock.Of(now).Before(j.Deadline) {
			d.stats.expired++
			d.obs.Expired(j)
			dead = append(dead, d.dead(j, "expired", "expired: deadline "+j.Deadline.UTC().Format(time.RFC3339Nano)+" passed before dispatch"))
		}
	}
	out, ships := d.serveParked(now)
	d.publishDepth(requestUsage(tokensDeclared(j), dataLen(j)))
	d.mu.Unlock()
	d.send(out)
	d.ship(ships)
	d.deadLetter(dead)
}

// newScheduler is the scheduler of a queue with configuration cfg, whose
// fetches filter subjects with match.
func newScheduler(cfg semaq.QueueConfig, match func(pattern, subject string) bool) *sched.Scheduler {
	return sched.New(sched.Config{
		AgingStep:    cfg.AgingStep,
		AffinityWait: cfg.AffinityWait,
		AckWait:      cfg.AckWait,
		Match:        match,
	})
}

// parseFetch reads a worker's fetch request.
func parseFetch(data []byte) (semaq.FetchRequest, error) {
	var req semaq.FetchRequest
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("fetch request is not valid JSON: %v", err)
	}
	if dec.More() {
		return req, errors.New("fetch request has data after the JSON object")
	}
	if err := req.Check(); err != nil {
		return req, err
	}
	if req.Max == 0 {
		req.Max = 1
	}
	return req, nil
}

// badReply reports whether a request's reply subject is one the
// dispatcher must not answer (semaq.CheckReplySubject): such a request is
// ignored, counted and logged at debug. "" is not bad: no answer wanted.
func (d *Dispatcher) badReply(m *nats.Msg, what string) bool {
	if m.Reply == "" {
		return false
	}
	err := semaq.CheckReplySubject(m.Reply)
	if err == nil {
		return false
	}
	d.mu.Lock()
	d.stats.badReplies++
	d.mu.Unlock()
	d.log.Debug(what+" ignored: reply subject refused", "reply", m.Reply, "err", err)
	return true
}

func (d *Dispatcher) onFetch(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	if d.badReply(m, "fetch") {
		return
	}
	if d.deps.Authorize != nil {
		if e := d.deps.Authorize(m.Header, d.name); e != nil {
			d.send([]*outMsg{errorEnd(m.Reply, e)})
			return
		}
	}
	req, err := parseFetch(m.Data)
	if err != nil {
		d.send([]*outMsg{errorEnd(m.Reply, semaq.NewAPIError(semaq.ErrBadRequest, "queue %s: %v", d.name, err))})
		return
	}
	now := time.Now()
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		d.send([]*outMsg{errorEnd(m.Reply, semaq.NewAPIError(semaq.ErrQueueNotFound, "queue %s is not served here", d.name))})
		return
	}
	w := d.sched.TouchWorker(req.Worker, req.Labels, now.Add(req.Wait+10*time.Second))
	jobs := d.sched.PickMatching(w, now, req.Max, req.MaxTokens, d.frameLimit(), req.Subject)
	var (
		out  []*outMsg
		ship *shipment
	)
	switch {
	case len(jobs) > 0:
		ship = d.deliver(m.Reply, jobs, now)
		if req.Wait > 0 {
			ship.park = &parkedFetch{req: req, reply: m.Reply, hdr: m.Header, until: now.Add(req.Wait)}
		}
	case req.Wait > 0:
		d.parked = append(d.parked, &parkedFetch{req: req, reply: m.Reply, hdr: m.Header, until: now.Add(req.Wait)})
	default:
		out = []*outMsg{endOfBatch(m.Reply, 408, 0, "no requests")}
	}
	d.stats.dispatched += uint64(len(jobs))
	d.publishDepth(usage{})
	d.mu.Unlock()
	d.send(out)
	if ship != nil {
		d.ship([]*shipment{ship})
	}
}

// serveParked gives waiting fetches what they can take now and ends those
// whose wait is over. mu is held.
func (d *Dispatcher) serveParked(now time.Time) ([]*outMsg, []*shipment) {
	if len(d.parked) == 0 {
		return nil, nil
	}
	var (
		out   []*outMsg
		ships []*shipment
	)
	keep := d.parked[:0]
	for _, p := range d.parked {
		if d.sched.Queued() > 0 {
			if !d.deps.Interest(p.reply, p.hdr) {
				continue // the worker is gone: leasing it work would only delay the work by an ack wait
			}
			// Its own labels: another fetch of the same worker may have
			// announced others (a model version is a requirement).
			w := d.sched.TouchWorker(p.req.Worker, p.req.Labels, p.until.Add(10*time.Second))
			if jobs := d.sched.PickMatching(w, now, p.req.Max, p.req.MaxTokens, d.frameLimit(), p.req.Subject); len(jobs) > 0 {
				d.stats.dispatched += uint64(len(jobs))
				sh := d.deliver(p.reply, jobs, now)
				sh.park = p
				ships = append(ships, sh)
				continue
			}
		}
		if !now.Before(p.until) {
			out = append(out, endOfBatch(p.reply, 408, 0, "no requests within the wait"))
			continue
		}
		keep = append(keep, p)
	}
	for i := len(keep); i < len(d.parked); i++ {
		d.parked[i] = nil
	}
	d.parked = keep
	return out, ships
}

// frameLimit is the most bytes of jobs one fetch reply carries: the
// server's max payload, less room for the reply's own headers.
func (d *Dispatcher) frameLimit() int { return int(d.nc.MaxPayload()) - 4096 }

// deliver leases jobs to a fetch and prepares its reply: one message whose
// body is a batch frame of the jobs (semaq.ParseJobFrame), built by ship
// once the jobs are read back; pick kept it within frameLimit. mu is held.
func (d *Dispatcher) deliver(reply string, jobs []*sched.Job, now time.Time) *shipment {
	sh := &shipment{reply: reply, now: now, jobs: make([]shipJob, len(jobs))}
	leases := newLeases(len(jobs))
	for i, j := range jobs {
		j.Lease, j.LeaseSum = leases[i], leaseSum(leases[i])
		extra := []string{
			semaq.HdrQueue, d.name,
			semaq.HdrQueueSeq, strconv.FormatUint(j.Seq, 10),
			semaq.HdrQueueSubject, j.Subject,
			semaq.HdrQueueDeliver, strconv.Itoa(j.Deliveries),
			semaq.HdrQueueTokens, strconv.FormatInt(j.Tokens, 10),
			semaq.HdrQueueWait, now.Sub(j.Arrived).String(),
			semaq.HdrQueueAckWait, d.ackWait,
		}
		if j.Estimate {
			extra = append(extra, semaq.HdrQueueEstimate, "true")
		}
		if !j.Deadline.IsZero() && !j.HasDL {
			extra = append(extra, semaq.HdrDeadline, j.Deadline.UTC().Format(time.RFC3339Nano))
		}
		d.obs.Dispatched(j, now) // metrics; the span when it is shipped (span.go)
		d.stats.observeWait(now.Sub(j.Arrived))
		// Bound now, before its record's write: the binding travels to the
		// node of the worker's token stream ahead of the job (an answer
		// chained depends on it). A write lost to another dispatcher
		// leaves it bound to a lease never shipped (docs/queues.md).
		d.bindLease(j)
		sh.jobs[i] = shipJob{j: j, seq: j.Seq, lease: j.Lease, subject: j.Subject, arrived: j.Arrived,
			deliveries: j.Deliveries, extra: extra, rec: record(j), rev: d.leases.rev[j.Seq], class: d.classes.pending[j.Seq]}
		delete(d.classes.pending, j.Seq)
	}
	return sh
}

func endOfBatch(reply string, status, count int, desc string) *outMsg {
	h := nats.Header{}
	h.Set(semaq.HdrQueueStatus, strconv.Itoa(status))
	h.Set(semaq.HdrQueueCount, strconv.Itoa(count))
	if desc != "" {
		h.Set(semaq.HdrQueueDescription, desc)
	}
	return &outMsg{Subject: reply, Header: h}
}

// errorEnd ends a fetch with an error: the body is the error reply.
func errorEnd(reply string, e *semaq.APIError) *outMsg {
	m := endOfBatch(reply, e.Code, 0, e.Description)
	m.Data = semaq.MarshalError(e)
	return m
}

// send sends messages to workers: cancel notices, on subjects the broker
// chose, by the internal connection; everything else, addressed to a
// subject a client chose and checked already, by the egress connection.
func (d *Dispatcher) send(out []*outMsg) {
	for _, m := range out {
		nc := d.out
		if strings.HasPrefix(m.Subject, semaq.QueueCancelPrefix) {
			nc = d.nc
		}
		if err := nc.PublishMsg(m); err != nil {
			d.log.Warn("sending to worker", "subject", m.Subject, "err", err)
		}
	}
}

// Name is the queue's name.
func (d *Dispatcher) Name() string { return d.name }

// Config is the queue's configuration, with defaults.
func (d *Dispatcher) Config() semaq.QueueConfig { return d.cfg }

// Status reports the queue's live state.
func (d *Dispatcher) Status(now time.Time) semaq.QueueStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats.status(d, now)
}

// Each calls fn on every request the dispatcher indexes (queued, delayed
// or held), under its lock: fn must not block or call the dispatcher.
func (d *Dispatcher) Each(fn func(j *sched.Job)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sched.Each(fn)
}

// Holds reports whether the queue holds a request whose Nats-Msg-Id is id
// (queued, delayed or held), and if so its tenant (AI-Tenant).
func (d *Dispatcher) Holds(id string) (tenant string, ok bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if j := d.sched.ByID(id); j != nil {
		return j.Tenant, true
	}
	return "", false
}
