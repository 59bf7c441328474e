package broker

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
	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/semaq"
)

// dispatcher serves one work queue on this node. It reads every request of
// the queue's stream through one consumer of its own (never acked until the
// request is done, so JetStream keeps it: a broker restart loses nothing
// queued), keeps the scheduling index in memory (dispatch_sched.go), and
// answers workers' fetches, acks and cancels. The request's payload stays in
// memory while it is queued; the queue's limits bound that memory.
//
// Locking: mu guards sched, parked and the statistics. NATS messages are
// built under mu and sent after it is released; JetStream calls (dead
// letters) are made without it.
type dispatcher struct {
	s    *Server
	name string
	cfg  semaq.QueueConfig // with defaults
	log  *slog.Logger
	nc   *nats.Conn

	mu     sync.Mutex
	sched  *scheduler
	parked []*parkedFetch
	stats  queueStats
	closed bool

	// Read by the ingress without mu (admission control).
	depthMsgs      atomic.Int64
	depthTokens    atomic.Int64
	adaptiveTokens atomic.Int64
	retryAfterMs   atomic.Int64
	admitted       atomic.Uint64
	refused        atomic.Uint64

	consume jetstream.ConsumeContext
	subs    []*nats.Subscription
	stop    chan struct{}
	done    chan struct{}
}

// parkedFetch is a fetch waiting for work.
type parkedFetch struct {
	req   semaq.FetchRequest
	reply string
	until time.Time
}

// outMsg is a message to send once mu is released.
type outMsg = nats.Msg

// dispatchTick is how often the dispatcher looks at deadlines, delays,
// leases and affinity waits. Timing is accurate to about this much.
const dispatchTick = 20 * time.Millisecond

func newDispatcher(s *Server, cfg semaq.QueueConfig) *dispatcher {
	cfg = cfg.WithDefaults()
	return &dispatcher{
		s:     s,
		name:  cfg.Name,
		cfg:   cfg,
		log:   s.log.With("component", "dispatch", "queue", cfg.Name),
		sched: newScheduler(cfg),
		stop:  make(chan struct{}),
		done:  make(chan struct{}),
	}
}

// start reads the queue's stream from its first request and starts serving
// workers. The consumer is made anew each time: every request still in the
// stream is one not yet done, and comes back queued.
func (d *dispatcher) start(ctx context.Context) (err error) {
	// A connection of its own: the dispatcher's traffic (consumer
	// deliveries, fetches, answers) does not queue behind the ingress's
	// on the shared internal connection's read loop.
	d.nc, err = nats.Connect("", nats.InProcessServer(d.s.ns), d.s.internalAuth(),
		nats.Name("semaq-dispatch-"+d.name), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1))
	if err != nil {
		return fmt.Errorf("queue %s: connection: %w", d.name, err)
	}
	defer func() {
		if err != nil {
			d.nc.Close()
		}
	}()
	js, err := jetstream.New(d.nc)
	if err != nil {
		return fmt.Errorf("queue %s: %w", d.name, err)
	}
	st, err := js.Stream(ctx, d.name)
	if err != nil {
		return fmt.Errorf("queue %s: %w", d.name, err)
	}
	if err := st.DeleteConsumer(ctx, semaq.DispatchConsumer); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("queue %s: resetting dispatch consumer: %w", d.name, err)
	}
	maxPending := d.cfg.MaxMessages*2 + 1024
	if maxPending > 1<<30 {
		maxPending = 1 << 30
	}
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       semaq.DispatchConsumer,
		Description:   "SemaQ dispatcher: holds every request until it is done",
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		// The dispatcher acks when a request is done, however long it
		// waits; a redelivery after this is recognised by sequence.
		AckWait:       24 * time.Hour,
		MaxDeliver:    -1,
		MaxAckPending: int(maxPending),
	})
	if err != nil {
		return fmt.Errorf("queue %s: dispatch consumer: %w", d.name, err)
	}
	subs := []struct {
		subj string
		h    nats.MsgHandler
	}{
		{fmt.Sprintf(semaq.APIQueueFetchT, d.name), d.onFetch},
		{semaq.QueueAckPrefix + d.name + ".>", d.onAnswer},
		{fmt.Sprintf(semaq.APIQueueCancelT, d.name), d.onCancel},
	}
	for _, x := range subs {
		sub, err := d.nc.Subscribe(x.subj, x.h)
		if err != nil {
			d.unsubscribe()
			return fmt.Errorf("queue %s: %w", d.name, err)
		}
		_ = sub.SetPendingLimits(-1, -1)
		d.subs = append(d.subs, sub)
	}
	cc, err := cons.Consume(d.onRequest, jetstream.PullMaxMessages(1024),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !errors.Is(err, jetstream.ErrNoHeartbeat) {
				d.log.Debug("dispatch consumer", "err", err)
			}
		}))
	if err != nil {
		d.unsubscribe()
		return fmt.Errorf("queue %s: consuming: %w", d.name, err)
	}
	d.consume = cc
	if err := d.nc.Flush(); err != nil {
		d.consume.Stop()
		d.unsubscribe()
		return err
	}
	go d.loop()
	return nil
}

func (d *dispatcher) unsubscribe() {
	for _, sub := range d.subs {
		_ = sub.Unsubscribe()
	}
	d.subs = nil
}

// close stops serving. Queued requests stay in the stream.
func (d *dispatcher) close() {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.closed = true
	parked := d.parked
	d.parked = nil
	d.mu.Unlock()
	if d.consume != nil {
		d.consume.Stop()
	}
	d.unsubscribe()
	for _, p := range parked {
		d.send([]*outMsg{endOfBatch(p.reply, 409, 0, "queue "+d.name+" is no longer served here")})
	}
	close(d.stop)
	<-d.done
	_ = d.nc.Drain()
}

// loop runs the timers: deadlines, delays, leases, affinity waits, parked
// fetches that time out, and the once-a-second statistics.
func (d *dispatcher) loop() {
	defer close(d.done)
	tick := time.NewTicker(dispatchTick)
	defer tick.Stop()
	lastStats := time.Now()
	for {
		select {
		case <-d.stop:
			return
		case now := <-tick.C:
			d.onTick(now)
			if now.Sub(lastStats) >= time.Second {
				d.mu.Lock()
				d.stats.roll(now.Sub(lastStats), d)
				d.mu.Unlock()
				lastStats = now
			}
		}
	}
}

func (d *dispatcher) onTick(now time.Time) {
	var (
		out  []*outMsg
		dead []deadJob
	)
	d.mu.Lock()
	expired, undelayed, lapsed := d.sched.due(now)
	for _, j := range expired {
		d.stats.expired++
		d.s.observeDrop(j, metrics.DropExpired)
		dead = append(dead, deadJob{j: j, consumer: "expired", reason: "expired: deadline " + j.deadline.UTC().Format(time.RFC3339Nano) + " passed in the queue"})
		d.sched.forget(j)
	}
	for _, j := range undelayed {
		d.sched.undelay(j)
	}
	for _, j := range lapsed {
		out = append(out, d.cancelNotice(j, "ack wait of "+d.cfg.AckWait.String()+" passed"))
		if d.exhausted(j) {
			dead = append(dead, deadJob{j: j, consumer: "dispatch", reason: semaq.DLQReasonMaxDeliveries})
			d.sched.forget(j)
			continue
		}
		d.stats.redelivered++
		d.sched.requeue(j)
	}
	d.sched.expireWorkers(now)
	out = append(out, d.serveParked(now)...)
	d.publishDepth()
	d.mu.Unlock()
	d.send(out)
	d.deadLetter(dead)
}

// exhausted reports whether j has been handed out as often as allowed.
func (d *dispatcher) exhausted(j *qjob) bool {
	return d.cfg.MaxDeliver > 0 && j.deliveries >= d.cfg.MaxDeliver
}

// publishDepth makes the queue's size visible to the ingress. mu is held.
func (d *dispatcher) publishDepth() {
	d.depthMsgs.Store(int64(len(d.sched.bySeq)))
	d.depthTokens.Store(d.sched.tokensQueued + d.sched.tokensHeld)
}

// onRequest takes one request from the stream into the index.
func (d *dispatcher) onRequest(jm jetstream.Msg) {
	md, err := jm.Metadata()
	if err != nil {
		d.log.Warn("request without metadata", "err", err)
		return
	}
	j := newJob(md, jm, d.cfg)
	now := time.Now()
	var dead []deadJob
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	if d.sched.add(j) {
		d.stats.arrivals++
		if !j.deadline.IsZero() && !now.Before(j.deadline) {
			d.stats.expired++
			d.s.observeDrop(j, metrics.DropExpired)
			dead = append(dead, deadJob{j: j, consumer: "expired", reason: "expired: deadline " + j.deadline.UTC().Format(time.RFC3339Nano) + " passed before dispatch"})
			d.sched.forget(j)
		}
	}
	out := d.serveParked(now)
	d.publishDepth()
	d.mu.Unlock()
	d.send(out)
	d.deadLetter(dead)
}

// newJob reads the scheduling fields of a stored request.
func newJob(md *jetstream.MsgMetadata, jm jetstream.Msg, cfg semaq.QueueConfig) *qjob {
	hdr := jm.Headers()
	j := &qjob{
		seq:     md.Sequence.Stream,
		subject: jm.Subject(),
		hdr:     hdr,
		data:    jm.Data(),
		jsReply: jm.Reply(),
		arrived: md.Timestamp,
		prio:    int(semaq.PriorityDefault),
		tokens:  -1,
	}
	if hdr != nil {
		j.id = hdr.Get(semaq.HdrMsgID)
		j.tenant = hdr.Get(semaq.HdrTenant)
		j.model = hdr.Get(semaq.HdrModel)
		j.adapter = hdr.Get(semaq.HdrAdapter)
		if p, err := semaq.ParsePriority(hdr.Get(semaq.HdrPriority)); err == nil {
			j.prio = int(p)
		}
		if n, err := strconv.ParseInt(hdr.Get(semaq.HdrPromptTokens), 10, 64); err == nil && n >= 0 {
			j.tokens = n
		}
		if t, err := time.Parse(time.RFC3339Nano, hdr.Get(semaq.HdrReceived)); err == nil {
			j.arrived = t
		}
		if t, err := time.Parse(time.RFC3339Nano, hdr.Get(semaq.HdrDeadline)); err == nil {
			j.deadline = t
		}
	}
	if j.tokens < 0 {
		j.tokens = estimateTokens(len(j.data))
		j.estimate = true
	}
	j.size = len(j.data) + frameJobOverhead
	for k, vs := range hdr {
		for _, v := range vs {
			j.size += len(k) + len(v) + 4
		}
	}
	if j.deadline.IsZero() && cfg.DefaultTimeout > 0 {
		j.deadline = j.arrived.Add(cfg.DefaultTimeout)
	}
	return j
}

// frameJobOverhead is what a job's frame entry adds to its stored headers
// and data: the reply subject and the Semaq-* headers, generously.
const frameJobOverhead = 640

// estimateTokens guesses the prompt tokens of a payload that does not say:
// about four bytes a token for English text and JSON.
func estimateTokens(n int) int64 {
	return int64((n + semaq.CharsPerToken - 1) / semaq.CharsPerToken)
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

func (d *dispatcher) onFetch(m *nats.Msg) {
	if m.Reply == "" {
		return
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
	w := d.sched.touchWorker(req.Worker, req.Labels, now.Add(req.Wait+10*time.Second))
	jobs := d.sched.pick(w, now, req.Max, req.MaxTokens, d.frameLimit())
	var out []*outMsg
	switch {
	case len(jobs) > 0:
		out = d.deliver(m.Reply, jobs, now)
	case req.Wait > 0:
		d.parked = append(d.parked, &parkedFetch{req: req, reply: m.Reply, until: now.Add(req.Wait)})
	default:
		out = []*outMsg{endOfBatch(m.Reply, 408, 0, "no requests")}
	}
	d.stats.dispatched += uint64(len(jobs))
	d.publishDepth()
	d.mu.Unlock()
	d.send(out)
}

// serveParked gives waiting fetches what they can take now and ends those
// whose wait is over. mu is held.
func (d *dispatcher) serveParked(now time.Time) []*outMsg {
	if len(d.parked) == 0 {
		return nil
	}
	var out []*outMsg
	keep := d.parked[:0]
	for _, p := range d.parked {
		if d.sched.queued > 0 {
			if !d.s.ns.GlobalAccount().SubscriptionInterest(p.reply) {
				continue // the worker is gone: leasing it work would only delay the work by an ack wait
			}
			w := d.sched.touchWorker(p.req.Worker, nil, p.until.Add(10*time.Second))
			if jobs := d.sched.pick(w, now, p.req.Max, p.req.MaxTokens, d.frameLimit()); len(jobs) > 0 {
				d.stats.dispatched += uint64(len(jobs))
				out = append(out, d.deliver(p.reply, jobs, now)...)
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
	return out
}

// frameLimit is the most bytes of jobs one fetch reply carries: the
// server's max payload, less room for the reply's own headers.
func (d *dispatcher) frameLimit() int { return int(d.nc.MaxPayload()) - 4096 }

// deliver builds the reply of a fetch: one message whose body is a batch
// frame of the jobs (semaq.ParseJobFrame); pick kept it within frameLimit.
// mu is held.
func (d *dispatcher) deliver(reply string, jobs []*qjob, now time.Time) []*outMsg {
	frame := semaq.AppendJobFrameHeader(make([]byte, 0, 64+d.batchSize(jobs)))
	for _, j := range jobs {
		j.lease = nuid.Next()
		extra := []string{
			semaq.HdrQueue, d.name,
			semaq.HdrQueueSeq, strconv.FormatUint(j.seq, 10),
			semaq.HdrQueueSubject, j.subject,
			semaq.HdrQueueDeliver, strconv.Itoa(j.deliveries),
			semaq.HdrQueueTokens, strconv.FormatInt(j.tokens, 10),
			semaq.HdrQueueWait, now.Sub(j.arrived).String(),
			semaq.HdrQueueAckWait, d.cfg.AckWait.String(),
		}
		if j.estimate {
			extra = append(extra, semaq.HdrQueueEstimate, "true")
		}
		if !j.deadline.IsZero() && j.hdr.Get(semaq.HdrDeadline) == "" {
			extra = append(extra, semaq.HdrDeadline, j.deadline.UTC().Format(time.RFC3339Nano))
		}
		extra = d.s.observeDispatch(d.name, j, extra, now) // metrics and dispatch span (observe_dispatch.go)
		ack := semaq.QueueAckPrefix + d.name + "." + strconv.FormatUint(j.seq, 10) + "." + j.lease
		frame = semaq.AppendFrameJob(frame, ack, j.hdr, extra, j.data)
		d.stats.observeWait(now.Sub(j.arrived))
	}
	m := endOfBatch(reply, 204, len(jobs), "")
	m.Data = frame
	return []*outMsg{m}
}

func (d *dispatcher) batchSize(jobs []*qjob) int {
	n := 0
	for _, j := range jobs {
		n += j.size
	}
	return n
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

func (d *dispatcher) send(out []*outMsg) {
	for _, m := range out {
		if err := d.nc.PublishMsg(m); err != nil {
			d.log.Warn("sending to worker", "subject", m.Subject, "err", err)
		}
	}
}

// cancelNotice tells j's worker to stop. mu is held.
func (d *dispatcher) cancelNotice(j *qjob, reason string) *outMsg {
	body, _ := json.Marshal(semaq.CancelNotice{Queue: d.name, Seq: j.seq, ID: j.id, Reason: reason})
	return &outMsg{Subject: semaq.QueueCancelPrefix + j.worker, Data: body}
}

// onAnswer handles a worker's ack, nak, in-progress or term of a job:
// subject QueueAckPrefix+"<queue>.<seq>.<lease>".
func (d *dispatcher) onAnswer(m *nats.Msg) {
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
		out  []*outMsg
		dead []deadJob
		ack  string
	)
	d.mu.Lock()
	j := d.sched.held[seq]
	if j == nil || j.lease != lease {
		d.mu.Unlock()
		d.answer(m, semaq.NewAPIError(semaq.ErrLeaseLost, "queue %s: job %d is no longer held by this worker (ack wait passed, cancelled, or answered already)", d.name, seq))
		return
	}
	if w := d.sched.workers[j.worker]; w != nil && now.Add(10*time.Second).After(w.expires) {
		w.expires = now.Add(10 * time.Second)
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
		d.sched.charge(j.tenant, rep.OutputTokens)
		d.stats.observeService(now.Sub(j.fetched), j.tokens+rep.OutputTokens)
		d.stats.acked++
		d.stats.outputTokens += uint64(rep.OutputTokens)
		ack = j.jsReply
		d.sched.forget(j)
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
			dead = append(dead, deadJob{j: j, consumer: "dispatch", reason: semaq.DLQReasonMaxDeliveries})
			d.sched.forget(j)
			break
		}
		if delay > 0 {
			d.sched.delay(j, now.Add(delay))
		} else {
			d.sched.requeue(j)
			out = d.serveParked(now)
		}
	case semaq.JobInProgress:
		j.leaseUntil = now.Add(d.cfg.AckWait)
	case semaq.JobTerm:
		reason := semaq.DLQReasonTerminated
		if arg = strings.TrimSpace(arg); arg != "" {
			reason += ": " + arg
		}
		dead = append(dead, deadJob{j: j, consumer: "dispatch", reason: reason})
		d.sched.forget(j)
	default:
		d.mu.Unlock()
		d.answer(m, semaq.NewAPIError(semaq.ErrBadRequest, "queue %s: %q is not one of %s, %s, %s, %s", d.name, verb,
			semaq.JobAck, semaq.JobNak, semaq.JobInProgress, semaq.JobTerm))
		return
	}
	d.publishDepth()
	d.mu.Unlock()
	d.answer(m, nil) // the worker waits on this; JetStream does not
	if ack != "" {
		_ = d.nc.Publish(ack, []byte("+ACK"))
	}
	d.send(out)
	d.deadLetter(dead)
}

func (d *dispatcher) answer(m *nats.Msg, e *semaq.APIError) {
	if m.Reply == "" {
		return
	}
	body := jobReplyOK
	if e != nil {
		body, _ = json.Marshal(semaq.JobReply{Error: e})
	}
	_ = d.nc.Publish(m.Reply, body)
}

// jobReplyOK is the JSON of a JobReply accepting an answer.
var jobReplyOK = []byte(`{"ok":true}`)

// onCancel removes a queued request, or tells the worker holding it to
// stop.
func (d *dispatcher) onCancel(m *nats.Msg) {
	var req semaq.CancelRequest
	if err := json.Unmarshal(m.Data, &req); err != nil || strings.TrimSpace(req.ID) == "" {
		d.s.replyErr(m, semaq.NewAPIError(semaq.ErrBadRequest, "queue %s: cancel needs {\"id\":\"<Nats-Msg-Id or sequence>\"}", d.name))
		return
	}
	d.mu.Lock()
	j := d.sched.byID[req.ID]
	if j == nil {
		if seq, err := strconv.ParseUint(req.ID, 10, 64); err == nil {
			j = d.sched.bySeq[seq]
		}
	}
	if j == nil {
		d.mu.Unlock()
		d.s.replyErr(m, semaq.NewAPIError(semaq.ErrRequestNotFound, "queue %s holds no request %q (never there, done, expired or cancelled)", d.name, req.ID))
		return
	}
	resp := semaq.CancelResponse{Seq: j.seq, Result: "removed"}
	var out []*outMsg
	if j.state == jobHeld {
		resp.Result, resp.Worker = "notified", j.worker
		out = append(out, d.cancelNotice(j, "cancelled"))
	}
	ack := j.jsReply
	d.stats.cancelled++
	d.s.observeDrop(j, metrics.DropCanceled)
	d.sched.forget(j)
	d.publishDepth()
	d.mu.Unlock()
	_ = d.nc.Publish(ack, []byte("+ACK"))
	d.send(out)
	d.s.replyJSON(m, resp)
}

// deadJob is a request leaving the queue for the dead-letter queue.
type deadJob struct {
	j        *qjob
	consumer string // the DLQ subject's last token: expired or dispatch
	reason   string
}

// deadLetter stores each job in SQ_DLQ with its payload, then lets the
// stream drop it. A job whose dead letter cannot be stored stays in the
// stream (it is out of the index, so it comes back only after a restart)
// rather than being lost.
func (d *dispatcher) deadLetter(dead []deadJob) {
	for _, dj := range dead {
		j := dj.j
		ev := dlqEvent{stream: d.name, consumer: dj.consumer, seq: j.seq, deliveries: uint64(j.deliveries), reason: dj.reason}
		dl := semaq.DeadLetter{
			Stream: d.name, Consumer: dj.consumer, StreamSeq: j.seq, Subject: j.subject,
			Deliveries: uint64(j.deliveries), Reason: dj.reason, Time: time.Now(), Stored: j.arrived,
		}
		ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
		_, err := d.s.storeDeadLetter(ctx, ev, &dl, j.hdr, j.data)
		cancel()
		if err != nil {
			d.log.Error("request could not be dead-lettered; it stays in the queue's stream", "seq", j.seq, "reason", dj.reason, "err", err)
			continue
		}
		d.mu.Lock()
		d.stats.deadLetters++
		d.s.metrics.DeadLetter(d.name, dj.reason)
		d.mu.Unlock()
		_ = d.nc.Publish(j.jsReply, []byte("+ACK"))
		d.log.Debug("request dead-lettered", "seq", j.seq, "reason", dj.reason)
	}
}

// admit is the ingress's admission check for a request to this queue. It
// reads atomics only: it runs on the ingress's hot path.
func (d *dispatcher) admit(env *semaq.Envelope, dataLen int) *semaq.APIError {
	tokens := int64(env.PromptTokens)
	if tokens < 0 {
		tokens = estimateTokens(dataLen)
	}
	why := d.saturation(tokens)
	if why == "" {
		d.admitted.Add(1)
		return nil
	}
	d.refused.Add(1)
	retry := d.retryAfterMs.Load()
	if retry <= 0 {
		retry = 1000
	}
	e := semaq.NewAPIError(semaq.ErrOverloaded, "queue %s is overloaded: %s; retry after %s", d.name, why,
		(time.Duration(retry) * time.Millisecond).String())
	e.RetryAfterMs = retry
	return e
}

// saturation says why a request of tokens prompt tokens would be refused
// now, or "" when it would be admitted. An empty queue admits anything
// (up to MaxMessages), so one oversize request is never refused forever.
func (d *dispatcher) saturation(tokens int64) string {
	msgs, toks := d.depthMsgs.Load(), d.depthTokens.Load()
	switch {
	case msgs >= d.cfg.MaxMessages:
		return fmt.Sprintf("%d requests held, limit %d", msgs, d.cfg.MaxMessages)
	case d.cfg.MaxTokens > 0 && msgs > 0 && toks+tokens > d.cfg.MaxTokens:
		return fmt.Sprintf("%d prompt tokens held and %d more asked, limit %d", toks, tokens, d.cfg.MaxTokens)
	}
	if thr := d.adaptiveTokens.Load(); thr > 0 && msgs > 0 && toks+tokens > thr {
		return fmt.Sprintf("%d prompt tokens held and %d more asked, adaptive limit %d for a wait of %s", toks, tokens, thr, d.cfg.MaxWait)
	}
	return ""
}

// status reports the queue's live state.
func (d *dispatcher) status(now time.Time) semaq.QueueStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stats.status(d, now)
}
