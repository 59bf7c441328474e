package dispatch

// Answers to jobs (ack, nak, in progress, term), cancels, and how a done
// request leaves the stream or goes to the dead-letter queue.

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/dispatch/sched"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/semaq"
)

// cancelNotice tells j's worker to stop. mu is held.
func (d *Dispatcher) cancelNotice(j *sched.Job, reason string) *outMsg {
	body, _ := json.Marshal(semaq.CancelNotice{Queue: d.name, Seq: j.Seq, ID: j.ID, Reason: reason})
	return &outMsg{Subject: semaq.QueueCancelPrefix + j.Worker, Data: body}
}

// onAnswer handles a worker's ack, nak, in-progress or term of a job:
// subject QueueAckPrefix+"<queue>.<seq>.<lease>".
func (d *Dispatcher) onAnswer(m *nats.Msg) {
	if d.badReply(m, "answer") {
		return
	}
	d.answerJob(m, false)
}

// answerJob handles an answer; checked: its lease was found in the lease
// store (checkLease) and adopted.
func (d *Dispatcher) answerJob(m *nats.Msg, checked bool) {
	rest := strings.TrimPrefix(m.Subject, semaq.QueueAckPrefix+d.name+".")
	seqStr, lease, ok := strings.Cut(rest, ".")
	seq, err := strconv.ParseUint(seqStr, 10, 64)
	if !ok || err != nil || lease == "" {
		d.answer(m, semaq.NewAPIError(semaq.ErrBadRequest, "queue %s: %q is not a job reply subject", d.name, m.Subject))
		return
	}
	verb, arg, _ := strings.Cut(string(m.Data), " ")
	now := time.Now()
	var (
		out   []*outMsg
		ships []*shipment
		dead  []deadJob
		ack   *semaq.JobAckReport
		wpi   *leaseRecord
		wrev  uint64
	)
	d.mu.Lock()
	j := d.sched.HeldJob(seq)
	// A lease past its end is lost even before the loop's next tick
	// takes the job back (a node that was paused runs its answers first).
	if j == nil || !leaseMatches(j, lease) || !j.Acking && now.After(j.LeaseUntil) {
		finished := j == nil && d.leases.finishedAck(seq, lease)
		repeat := finished && verb == semaq.JobAck
		starting := j == nil && d.leases.restoredLease(seq, lease)
		if starting && len(d.early) < maxEarlyAnswers {
			// Not read back yet: handled once the consumer has caught
			// up (onTick), rather than told to ask again — another
			// dispatcher still serving the queue (the one this one took
			// over from, not yet told) may answer meanwhile, and an
			// "ask again" would be heard before it.
			d.early = append(d.early, m)
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
		switch {
		case repeat:
			d.answer(m, nil) // acked before this dispatcher started; its answer was lost
		case finished:
			d.answer(m, errLeaseLost(d.name, seq)) // anything but an ack, after the ack
		case starting:
			// Past the bound: the worker's wait ends and it asks again.
		case !checked && len(lease) == leaseLen:
			// Another dispatcher of the queue (one that has not heard it
			// no longer leads, or this one's successor) may have leased
			// it: the lease store says.
			d.checkLease(m, seq, lease, verb)
		default:
			d.answer(m, errLeaseLost(d.name, seq))
		}
		return
	}
	if j.Acking {
		d.mu.Unlock()
		d.answer(m, semaq.NewAPIError(semaq.ErrUnavailable, "queue %s: job %d: its ack is being confirmed; ask again", d.name, seq))
		return
	}
	if w := d.sched.Worker(j.Worker); w != nil && now.Add(10*time.Second).After(w.Expires) {
		w.Expires = now.Add(10 * time.Second)
	}
	switch verb {
	case semaq.JobAck:
		var rep semaq.JobAckReport
		if arg != "" {
			if err := json.Unmarshal([]byte(arg), &rep); err != nil || rep.OutputTokens < 0 {
				d.mu.Unlock()
				d.answer(m, semaq.NewAPIError(semaq.ErrBadRequest, "queue %s: ack report %q is not {\"output_tokens\":N}", d.name, arg))
				return
			}
		}
		// Done once JetStream confirms the request left the stream
		// (ackDone): an ack answered ok is not served again, whichever
		// dispatcher serves the queue next (but for a request an ack
		// through a consumer made anew left in the stream: docs/queues.md).
		j.Acking = true
		ack = &rep
	case semaq.JobNak:
		var delay time.Duration
		if arg != "" {
			var nd struct {
				DelayMs int64 `json:"delay_ms"`
			}
			if err := json.Unmarshal([]byte(arg), &nd); err != nil || nd.DelayMs < 0 {
				d.mu.Unlock()
				d.answer(m, semaq.NewAPIError(semaq.ErrBadRequest, "queue %s: nak %q is not {\"delay_ms\":N}", d.name, arg))
				return
			}
			delay = time.Duration(nd.DelayMs) * time.Millisecond
		}
		d.stats.nacked++
		if d.exhausted(j) {
			dead = append(dead, d.dead(j, "dispatch", semaq.DLQReasonMaxDeliveries))
			break
		}
		d.unbindLease(j)
		if delay > 0 {
			d.sched.Delay(j, now.Add(delay))
		} else {
			d.sched.Requeue(j)
			out, ships = d.serveParked(now)
		}
	case semaq.JobInProgress:
		j.LeaseUntil = now.Add(d.cfg.AckWait)
		rec := record(j)
		wpi, wrev = &rec, d.leases.rev[seq]
	case semaq.JobTerm:
		reason := semaq.DLQReasonTerminated
		if arg = strings.TrimSpace(arg); arg != "" {
			reason += ": " + arg
		}
		dead = append(dead, d.dead(j, "dispatch", reason))
	default:
		d.mu.Unlock()
		d.answer(m, semaq.NewAPIError(semaq.ErrBadRequest, "queue %s: %q is not one of %s, %s, %s, %s", d.name, verb,
			semaq.JobAck, semaq.JobNak, semaq.JobInProgress, semaq.JobTerm))
		return
	}
	var rm removal
	if ack != nil {
		rm = d.removal(j)
	}
	d.publishDepth(usage{})
	d.mu.Unlock()
	switch {
	case ack != nil:
		// Answered once JetStream confirms (ackDone, from the ack
		// tracker): answers keep flowing meanwhile.
		d.acks.track(&pendingAck{m: m, j: j, rm: rm, rep: *ack})
		return
	case wpi != nil:
		// The new end is stored before the worker hears it: a dispatcher
		// taking over honours it.
		if !d.extend(seq, *wpi, wrev) {
			d.answer(m, errLeaseLost(d.name, seq))
			return
		}
		d.extendSlot(seq, wpi.Until)
	}
	d.answer(m, nil) // the worker waits on this; JetStream does not
	d.send(out)
	d.ship(ships)
	d.deadLetter(dead)
}

// ackDone finishes an ack once its request's removal from the stream has
// been tried (err: removeSync's, nil once JetStream confirmed the ack;
// the ack tracker calls it, acks.go): the job leaves the index and the
// worker hears ok once the request is gone; unavailable (the job still
// held, under the same lease) when JetStream could not be reached, so
// that the worker asks again. mu is not held.
func (d *Dispatcher) ackDone(p *pendingAck, err error) {
	m, j, rep := p.m, p.j, p.rep
	d.mu.Lock()
	if err != nil {
		if j.State == sched.JobHeld {
			j.Acking = false
		}
		d.mu.Unlock()
		d.log.Warn("ack not confirmed by JetStream; the worker is told to ask again", "seq", j.Seq, "err", err)
		d.answer(m, semaq.NewAPIError(semaq.ErrUnavailable, "queue %s: job %d: the ack could not be stored (%v); ask again", d.name, j.Seq, err))
		return
	}
	if j.State == sched.JobHeld {
		now := time.Now()
		// A worker that did not hear this answer in time asks again:
		// it hears ok until the lease would have ended.
		d.leases.finish(j.Seq, j.LeaseSum, max(j.LeaseUntil.UnixMilli(), now.Add(d.cfg.AckWait).UnixMilli()))
		d.sched.Charge(j.Tenant, rep.OutputTokens)
		if rep.OutputTokens > 0 {
			d.deps.Served(j.Tenant, rep.OutputTokens)
		}
		d.stats.observeService(now.Sub(j.Fetched), j.Tokens+rep.OutputTokens)
		d.stats.acked++
		d.stats.outputTokens += uint64(rep.OutputTokens)
		d.unbindLease(j)
		d.sched.Forget(j)
		d.publishDepth(usage{})
	} // else cancelled meanwhile: gone either way
	d.mu.Unlock()
	// The worker hears first: if the node goes between the two, the
	// record left makes the next dispatcher answer the repeated ack ok.
	d.answer(m, nil)
	d.mu.Lock()
	d.leases.done(j.Seq, j.LeaseSum)
	d.mu.Unlock()
}

// errLeaseLost refuses an answer under a lease that is not (or no longer)
// the job's.
func errLeaseLost(queue string, seq uint64) *semaq.APIError {
	return semaq.NewAPIError(semaq.ErrLeaseLost, "queue %s: job %d is no longer held by this worker (ack wait passed, cancelled, or answered already)", queue, seq)
}

// leaseLen is the length of a lease (newLeases): an answer under anything
// else is refused without a look at the lease store.
const leaseLen = 22

// maxEarlyAnswers bounds the answers a starting dispatcher keeps until its
// consumer has caught up (answerJob); past it they are not answered.
const maxEarlyAnswers = 4096

// maxLeaseChecks bounds the answers under leases this dispatcher does not
// know that are being checked against the lease store at once; past it
// the worker is told to ask again.
const maxLeaseChecks = 16

// checkLease answers m, an answer to job seq under a lease the dispatcher
// does not hold, from the lease store, on a goroutine of the gate's: a
// lease the store names as the job's, in a record this dispatcher had not
// heard of, is adopted (the job held by that worker for an ack wait, as
// restore does) and the answer handled; an ack repeated under the lease a
// job was acked under is answered ok; a lease the store does not name, or
// names in a record this dispatcher knows (it took the lease back), is
// refused. When it cannot tell (too many checks at once, the store not
// answering, the job not read back yet) it does not answer: another
// dispatcher that knows the lease may. mu is not held.
func (d *Dispatcher) checkLease(m *nats.Msg, seq uint64, lease, verb string) {
	select {
	case d.checks <- struct{}{}:
	default:
		// Past the bound the answer is left to the dispatcher that leased
		// the job, if another does; with none, the worker's wait ends and
		// it asks again. A dispatcher that does not know the lease never
		// says "ask again": it would be heard before the one that does.
		d.stats.leaseChecksRefused++
		return
	}
	if d.deps.Gate.Go("lease-check", func(ctx context.Context) {
		defer func() { <-d.checks }()
		ctx, cancel := context.WithTimeout(ctx, api.Timeout)
		defer cancel()
		t, err := d.leases.read(ctx, seq)
		if err != nil {
			d.log.Debug("an answer's lease could not be checked; left unanswered", "seq", seq, "err", err)
			return
		}
		switch {
		case t.gone && t.done != "" && sumMatches(t.done, lease):
			if verb == semaq.JobAck {
				d.answer(m, nil) // acked under this lease, through another dispatcher
			} else {
				d.answer(m, errLeaseLost(d.name, seq))
			}
		case t.rec != nil && sumMatches(t.rec.Sum, lease):
			// The store still names this lease, so no other worker was
			// given the job since, whatever its end reads on this
			// node's clock.
			d.mu.Lock()
			j := d.sched.BySeq(seq)
			if j == nil || j.Acking {
				// Not read back yet (its consumer made anew), or answered
				// under another lease: the dispatcher that leased it
				// answers; with none, the worker's wait ends and it asks
				// again.
				d.mu.Unlock()
				return
			}
			if j.State != sched.JobHeld || !leaseMatches(j, lease) {
				if d.leases.known(seq) >= t.rev {
					// A record this dispatcher wrote or read already: it
					// took the lease back itself (its ack wait passed on
					// this node's clock, or it was cancelled).
					d.mu.Unlock()
					d.answer(m, errLeaseLost(d.name, seq))
					return
				}
				d.takeRecord(j, t, time.Now())
				d.stats.leaseConflicts++
			}
			d.mu.Unlock()
			d.answerJob(m, true)
		default:
			d.answer(m, errLeaseLost(d.name, seq))
		}
	}) {
		return
	}
	<-d.checks // the node is stopping
}

// extend stores a held job's longer lease (rec, over the record of
// revision rev) before the worker hears it, so that a dispatcher taking
// over honours it. It reports false when the store says the job's lease
// is another's (another dispatcher leased it again): the job then becomes
// what the store says. A store that cannot be reached leaves the longer
// lease on this node only. mu is not held.
func (d *Dispatcher) extend(seq uint64, rec leaseRecord, rev uint64) bool {
	ctx, cancel := context.WithTimeout(context.Background(), leaseTimeout)
	defer cancel()
	nrev, err := d.leases.put(ctx, seq, rec, rev)
	if moved(err) {
		var t *leaseTaken
		if t, err = d.leases.read(ctx, seq); err == nil {
			if t.rec == nil || t.rec.Sum != rec.Sum {
				d.mu.Lock()
				if j := d.sched.HeldJob(seq); j != nil && j.LeaseSum == rec.Sum {
					d.takeRecord(j, t, time.Now())
				}
				d.mu.Unlock()
				return false
			}
			nrev, err = d.leases.put(ctx, seq, rec, t.rev) // its own record, at a revision it had not heard of
		}
	}
	if err != nil {
		d.log.Warn("lease extension not stored; it holds on this node only", "seq", seq, "err", err)
		return true
	}
	d.mu.Lock()
	if j := d.sched.HeldJob(seq); j != nil && j.LeaseSum == rec.Sum {
		d.leases.leased(seq, nrev)
	}
	d.mu.Unlock()
	return true
}

func (d *Dispatcher) answer(m *nats.Msg, e *semaq.APIError) {
	if m.Reply == "" {
		return
	}
	body := jobReplyOK
	if e != nil {
		body, _ = json.Marshal(semaq.JobReply{Error: e})
	}
	_ = d.out.Publish(m.Reply, body) // checked by badReply
}

// jobReplyOK is the JSON of a JobReply accepting an answer.
var jobReplyOK = []byte(`{"ok":true}`)

// onCancel removes a queued request, or tells the worker holding it to
// stop.
func (d *Dispatcher) onCancel(m *nats.Msg) {
	if d.badReply(m, "cancel") {
		return
	}
	var req semaq.CancelRequest
	if err := api.Decode(m.Data, &req); err != nil {
		d.reply(m, semaq.MarshalError(semaq.NewAPIError(semaq.ErrBadRequest, "queue %s: cancel: request is not valid: %v", d.name, err)))
		return
	}
	if err := req.Check(); err != nil {
		d.reply(m, semaq.MarshalError(semaq.NewAPIError(semaq.ErrBadRequest, "queue %s: %v", d.name, err)))
		return
	}
	var rights CancelRights
	if d.deps.CancelRights != nil {
		rights = d.deps.CancelRights(m.Header)
	}
	d.mu.Lock()
	j := d.sched.ByID(req.ID)
	if j == nil {
		if seq, err := strconv.ParseUint(req.ID, 10, 64); err == nil {
			j = d.sched.BySeq(seq)
		}
	}
	if j == nil && !d.caughtUp {
		d.mu.Unlock()
		d.reply(m, semaq.MarshalError(semaq.NewAPIError(semaq.ErrUnavailable, "queue %s: the dispatcher is starting and has not read every request back yet; ask again", d.name)))
		return
	}
	if j == nil {
		d.mu.Unlock()
		d.reply(m, semaq.MarshalError(semaq.NewAPIError(semaq.ErrRequestNotFound, "queue %s holds no request %q (never there, done, expired or cancelled)", d.name, req.ID)))
		return
	}
	if e := d.mayCancel(rights, j, req.Token); e != nil {
		d.stats.cancelsRefused++
		d.mu.Unlock()
		d.reply(m, semaq.MarshalError(e))
		return
	}
	resp := semaq.CancelResponse{Seq: j.Seq, Result: "removed"}
	var out []*outMsg
	if j.State == sched.JobHeld {
		resp.Result, resp.Worker = "notified", j.Worker
		out = append(out, d.cancelNotice(j, "its publisher withdrew it"))
	}
	rm := d.removal(j)
	d.stats.cancelled++
	d.obs.Cancelled(j)
	d.unbindLease(j)
	d.sched.Forget(j)
	d.removing[j.Seq] = true
	d.publishDepth(usage{})
	id, tenant := j.ID, j.Tenant
	d.mu.Unlock()
	d.remove(rm)
	d.send(out)
	if req.EndStream != nil {
		d.deps.EndJob(id, tenant, req.EndStream)
	}
	body, _ := json.Marshal(resp)
	d.reply(m, body)
}

// mayCancel says whether the sender of a cancel with rights and token
// may cancel j: its token does, and so do the rights of its publisher, a
// service of its tenant and admins (auth on). mu is held.
func (d *Dispatcher) mayCancel(rights CancelRights, j *sched.Job, token string) *semaq.APIError {
	if token != "" && j.CancelSum != "" && sumMatches(j.CancelSum, token) {
		return nil
	}
	if rights.may(j.Publisher, j.Tenant) {
		return nil
	}
	id := j.ID
	if id == "" {
		id = strconv.FormatUint(j.Seq, 10)
	}
	switch {
	case token != "":
		return semaq.NewAPIError(semaq.ErrForbidden, "queue %s: request %s: the cancel token is not the one it was published with", d.name, id)
	case rights.Who != "":
		return semaq.NewAPIError(semaq.ErrForbidden, "queue %s: request %s: %s may not cancel it: its publisher, a service of its tenant or an admin may, or anyone with its cancel token", d.name, id, rights.Who)
	case j.CancelSum == "":
		return semaq.NewAPIError(semaq.ErrForbidden, "queue %s: request %s was published without a cancel token (%s), so nobody may cancel it without auth", d.name, id, semaq.HdrCancelToken)
	default:
		return semaq.NewAPIError(semaq.ErrForbidden, "queue %s: request %s: cancelling it needs the cancel token it was published with (%s)", d.name, id, semaq.HdrCancelToken)
	}
}

// reply answers a request whose reply subject badReply accepted, by the
// egress connection.
func (d *Dispatcher) reply(m *nats.Msg, body []byte) {
	if m.Reply == "" {
		return
	}
	if err := d.out.Publish(m.Reply, body); err != nil {
		d.log.Warn("reply", "subject", m.Subject, "err", err)
	}
}

// removal is how a done request leaves the stream, decided under mu.
type removal struct {
	seq   uint64
	reply string // ack subject of a delivery by the current consumer; "" to delete by sequence
}

// removal says how j, done, leaves the stream. mu is held.
func (d *Dispatcher) removal(j *sched.Job) removal {
	rm := removal{seq: j.Seq}
	if j.ReplyGen == d.gen {
		rm.reply = j.JSReply
	}
	return rm
}

// removeSync takes a done request out of the stream and returns once
// JetStream has confirmed it: an ack to the current consumer's delivery,
// answered (the workqueue stream drops the request), or, when that fails
// or its latest delivery was by a consumer that is gone, a delete by
// sequence. A request already gone is no error. mu is not held.
func (d *Dispatcher) removeSync(rm removal) error {
	if rm.reply != "" {
		if _, err := d.nc.Request(rm.reply, []byte("+ACK"), ackTimeout); err == nil {
			return nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), api.Timeout)
	defer cancel()
	if err := jsutil.DeleteMsg(ctx, d.nc, d.name, rm.seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return err
	}
	return nil
}

// remove takes a request that is out of the index (and in removing) out
// of the stream and its lease record out of the lease store. One JetStream
// did not confirm stays in removing, for the loop to try again
// (retryRemovals): until then a delivery of it is left alone. mu is not
// held.
func (d *Dispatcher) remove(rm removal) {
	if err := d.removeSync(rm); err != nil {
		d.log.Warn("done request not removed from the stream yet; trying again", "seq", rm.seq, "err", err)
		return
	}
	d.mu.Lock()
	delete(d.removing, rm.seq)
	d.leases.done(rm.seq, "")
	d.mu.Unlock()
}

// retryRemovals tries again to remove what remove could not. It runs on
// the loop's goroutine.
func (d *Dispatcher) retryRemovals() {
	d.mu.Lock()
	var seqs []uint64
	for seq := range d.removing {
		seqs = append(seqs, seq)
	}
	d.mu.Unlock()
	for _, seq := range seqs {
		select {
		case <-d.stop:
			return
		default:
		}
		d.remove(removal{seq: seq})
	}
}

// dead takes j out of the index on its way to the dead-letter queue; it
// stays in the stream, marked leaving, until it is stored there. mu is
// held.
func (d *Dispatcher) dead(j *sched.Job, consumer, reason string) deadJob {
	dj := deadJob{j: j, consumer: consumer, reason: reason, rm: d.removal(j)}
	d.leaving[j.Seq] = true
	if j.State == sched.JobHeld {
		d.unbindLease(j)
	}
	d.sched.Forget(j)
	return dj
}

// deadJob is a request leaving the queue for the dead-letter queue.
type deadJob struct {
	j        *sched.Job
	consumer string // the DLQ subject's last token: expired or dispatch
	reason   string
	rm       removal
}

// deadLetter stores each job in SQ_DLQ with its payload, read back from
// the stream, then lets the stream drop it. A job whose dead letter cannot
// be stored stays in the stream (it is out of the index, so it comes back
// only after a restart) rather than being lost.
func (d *Dispatcher) deadLetter(dead []deadJob) {
	if len(dead) == 0 {
		return
	}
	seqs := make([]uint64, len(dead))
	for i, dj := range dead {
		seqs[i] = dj.j.Seq
	}
	got := d.payloads.read(seqs)
	for i, dj := range dead {
		j := dj.j
		if errors.Is(got[i].err, errPayloadGone) {
			d.log.Warn("request to dead-letter left the stream behind the dispatcher's back", "seq", j.Seq, "reason", dj.reason)
			d.mu.Lock()
			delete(d.leaving, j.Seq)
			d.leases.done(j.Seq, "")
			d.mu.Unlock()
			continue
		}
		err := got[i].err
		if err == nil {
			dl := semaq.DeadLetter{
				Stream: d.name, Consumer: dj.consumer, StreamSeq: j.Seq, Subject: j.Subject,
				Deliveries: uint64(j.Deliveries), Reason: dj.reason, Time: time.Now(), Stored: j.Arrived,
			}
			ctx, cancel := context.WithTimeout(context.Background(), api.Timeout)
			err = d.deps.StoreDeadLetter(ctx, &dl, got[i].hdr, got[i].data)
			cancel()
		}
		if err != nil {
			d.log.Error("request could not be dead-lettered; it stays in the queue's stream", "seq", j.Seq, "reason", dj.reason, "err", err)
			continue // stays in leaving: a new consumer's delivery of it is left alone
		}
		d.mu.Lock()
		d.stats.deadLetters++
		d.obs.DeadLettered(d.name, dj.reason)
		rm := dj.rm
		if rm.reply != "" && d.gen != dj.j.ReplyGen {
			rm.reply = "" // the consumer changed meanwhile
		}
		delete(d.leaving, j.Seq)
		d.removing[j.Seq] = true
		d.mu.Unlock()
		d.remove(rm)
		d.log.Debug("request dead-lettered", "seq", j.Seq, "reason", dj.reason)
	}
}

// bindLease makes the holder of j's lease the only writer of j's token
// stream (Deps.BindJob; the request id is its Nats-Msg-Id), and says
// where its answer is chained, if the queue chains answers and the
// request names a session. A redelivered job is bound again with its new
// lease, which ends the previous holder's right. mu is held; BindJob
// takes only its own lock.
func (d *Dispatcher) bindLease(j *sched.Job) {
	if j.ID == "" {
		return
	}
	var ch api.AnswerChain
	if d.cfg.ChainAnswers != "" && j.Session != "" {
		ch = api.AnswerChain{Subject: d.cfg.ChainAnswers, Session: j.Session, Tenant: j.Tenant}
	}
	d.deps.BindJob(j.ID, j.Tenant, j.Lease, ch)
}

// unbindLease marks where a lease ends. The token store keeps the last
// holder's binding until the job is delivered again (BindJob replaces it)
// or its stream ends, so there is nothing to undo here.
func (d *Dispatcher) unbindLease(j *sched.Job) { d.releaseSlot(j) }
