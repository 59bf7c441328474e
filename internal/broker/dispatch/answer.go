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

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/dispatch/sched"
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
		done  *removal
	)
	d.mu.Lock()
	j := d.sched.HeldJob(seq)
	if j == nil || !leaseMatches(j.Lease, lease) {
		d.mu.Unlock()
		d.answer(m, semaq.NewAPIError(semaq.ErrLeaseLost, "queue %s: job %d is no longer held by this worker (ack wait passed, cancelled, or answered already)", d.name, seq))
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
		d.sched.Charge(j.Tenant, rep.OutputTokens)
		if rep.OutputTokens > 0 {
			d.deps.Served(j.Tenant, rep.OutputTokens)
		}
		d.stats.observeService(now.Sub(j.Fetched), j.Tokens+rep.OutputTokens)
		d.stats.acked++
		d.stats.outputTokens += uint64(rep.OutputTokens)
		rm := d.removal(j)
		done = &rm
		d.unbindLease(j)
		d.sched.Forget(j)
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
	d.publishDepth(usage{})
	d.mu.Unlock()
	d.answer(m, nil) // the worker waits on this; JetStream does not
	if done != nil {
		d.remove(*done)
	}
	d.send(out)
	d.ship(ships)
	d.deadLetter(dead)
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
	d.mu.Lock()
	j := d.sched.ByID(req.ID)
	if j == nil {
		if seq, err := strconv.ParseUint(req.ID, 10, 64); err == nil {
			j = d.sched.BySeq(seq)
		}
	}
	if j == nil {
		d.mu.Unlock()
		d.reply(m, semaq.MarshalError(semaq.NewAPIError(semaq.ErrRequestNotFound, "queue %s holds no request %q (never there, done, expired or cancelled)", d.name, req.ID)))
		return
	}
	resp := semaq.CancelResponse{Seq: j.Seq, Result: "removed"}
	var out []*outMsg
	if j.State == sched.JobHeld {
		resp.Result, resp.Worker = "notified", j.Worker
		out = append(out, d.cancelNotice(j, "cancelled"))
	}
	rm := d.removal(j)
	d.stats.cancelled++
	d.obs.Cancelled(j)
	d.unbindLease(j)
	d.sched.Forget(j)
	d.publishDepth(usage{})
	id := j.ID
	d.mu.Unlock()
	d.remove(rm)
	d.send(out)
	if req.EndStream != nil {
		d.deps.EndJob(id, req.EndStream)
	}
	body, _ := json.Marshal(resp)
	d.reply(m, body)
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
	if j.ReplyGen == d.gen {
		return removal{seq: j.Seq, reply: j.JSReply}
	}
	return removal{seq: j.Seq}
}

// remove takes a done request out of the stream: an ack to the current
// consumer's delivery (the workqueue stream drops it), or, when its latest
// delivery was by a consumer that is gone, a delete by sequence. mu is not
// held.
func (d *Dispatcher) remove(rm removal) {
	if rm.reply != "" {
		_ = d.nc.Publish(rm.reply, []byte("+ACK"))
		return
	}
	d.removeBySeq(rm.seq)
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
		d.mu.Unlock()
		d.remove(rm)
		d.mu.Lock()
		delete(d.leaving, j.Seq)
		d.mu.Unlock()
		d.log.Debug("request dead-lettered", "seq", j.Seq, "reason", dj.reason)
	}
}

// bindLease makes the holder of j's lease the only writer of j's token
// stream (Deps.BindJob; the request id is its Nats-Msg-Id). A redelivered
// job is bound again with its new lease, which ends the previous holder's
// right. mu is held; BindJob takes only its own lock.
func (d *Dispatcher) bindLease(j *sched.Job) {
	if j.ID != "" {
		d.deps.BindJob(j.ID, j.Lease)
	}
}

// unbindLease marks where a lease ends. The token store keeps the last
// holder's binding until the job is delivered again (BindJob replaces it)
// or its stream ends, so there is nothing to undo here.
func (d *Dispatcher) unbindLease(*sched.Job) {}
