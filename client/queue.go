package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/client/internal/denial"
	"github.com/semaq/semaq/semaq"
)

// ErrJobCancelled is the cause of a Job's context when the request was
// cancelled, or its lease lapsed, while the worker held it
// (context.Cause(job.Context())).
var ErrJobCancelled = errors.New("client: job cancelled")

// AddQueue creates a work queue.
func (c *Client) AddQueue(ctx context.Context, cfg semaq.QueueConfig) (*semaq.QueueInfo, error) {
	if err := semaq.CheckStreamName(cfg.Name); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadQueue, "client: queue name: %v", err)
	}
	ctx, cancel := c.withChangeTimeout(ctx)
	defer cancel()
	var out semaq.QueueInfo
	if err := c.request(ctx, fmt.Sprintf(semaq.APIQueueCreateT, cfg.Name), cfg, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// QueueInfo returns a queue's configuration and live status.
func (c *Client) QueueInfo(ctx context.Context, name string) (*semaq.QueueInfo, error) {
	var out semaq.QueueInfo
	if err := c.request(ctx, fmt.Sprintf(semaq.APIQueueInfoT, name), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Queues lists the work queues.
func (c *Client) Queues(ctx context.Context) ([]semaq.QueueInfo, error) {
	var out semaq.QueueListResponse
	if err := c.request(ctx, semaq.APIQueueList, nil, &out); err != nil {
		return nil, err
	}
	return out.Queues, nil
}

// DeleteQueue removes a queue and every request in it.
func (c *Client) DeleteQueue(ctx context.Context, name string) error {
	return c.request(ctx, fmt.Sprintf(semaq.APIQueueDeleteT, name), nil, nil)
}

// Cancel cancels a request by its Nats-Msg-Id (or its sequence in the
// queue): a queued request is removed; a request a worker holds is removed
// and the worker's Job context is cancelled. An unknown request returns
// semaq.ErrRequestNotFound; a request the caller may not cancel (not its
// own, without its token: CancelToken) semaq.ErrForbidden. A request this
// client published lately is cancelled with the token it was published
// with, remembered for the last 10,000 publishes.
func (c *Client) Cancel(ctx context.Context, queue, id string, opts ...CancelOption) (*semaq.CancelResponse, error) {
	var out semaq.CancelResponse
	co := cancelOptions{req: semaq.CancelRequest{ID: id}}
	for _, o := range opts {
		o(&co)
	}
	req := co.req
	if !co.tokenGiven {
		req.Token = c.cancels.token(queue, id) // this client published it
	}
	if err := req.Check(); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: Cancel: %v", err)
	}
	subj := fmt.Sprintf(semaq.APIQueueCancelT, queue)
	if err := c.request(ctx, subj, req, &out); err != nil {
		if errors.Is(err, semaq.ErrUnavailable) {
			return nil, semaq.NewAPIError(semaq.ErrQueueNotFound, "queue %s not found", queue)
		}
		return nil, err
	}
	return &out, nil
}

// CancelOption configures one Cancel.
type CancelOption func(*cancelOptions)

type cancelOptions struct {
	req        semaq.CancelRequest
	tokenGiven bool // CancelToken was given, even "": no remembered token
}

// CancelToken cancels with the request's cancel token (PubAck.CancelToken
// of its publish): without auth the broker cancels a request only with it;
// with auth its publisher, a service of its tenant and admins need none.
// A CancelToken, even "", replaces the token this client remembers of its
// own publish: a front door acting for others passes its caller's.
func CancelToken(token string) CancelOption {
	return func(o *cancelOptions) { o.req.Token, o.tokenGiven = token, true }
}

// CancelEndStream also ends the request's token stream with te, unless it
// has ended: for a request whose worker is gone, whose stream no one else
// may write.
func CancelEndStream(te *semaq.TokenError) CancelOption {
	return func(o *cancelOptions) { o.req.EndStream = te }
}

// FetchOption configures one Fetch.
type FetchOption func(*semaq.FetchRequest) error

// FetchMax asks for up to n jobs (default 1, at most semaq.MaxFetchBatch).
func FetchMax(n int) FetchOption {
	return func(r *semaq.FetchRequest) error {
		if n < 1 || n > semaq.MaxFetchBatch {
			return fmt.Errorf("fetch max %d is outside 1..%d", n, semaq.MaxFetchBatch)
		}
		r.Max = n
		return nil
	}
}

// FetchMaxTokens bounds the prompt tokens of the batch. A single request
// over the bound is delivered alone.
func FetchMaxTokens(n int64) FetchOption {
	return func(r *semaq.FetchRequest) error {
		if n < 1 {
			return fmt.Errorf("fetch max tokens %d is not positive", n)
		}
		r.MaxTokens = n
		return nil
	}
}

// FetchWait waits up to d for the first job; without it Fetch returns at
// once, possibly with none.
func FetchWait(d time.Duration) FetchOption {
	return func(r *semaq.FetchRequest) error {
		if d < 0 || d > semaq.MaxFetchWait {
			return fmt.Errorf("fetch wait %s is outside 0..%s", d, semaq.MaxFetchWait)
		}
		r.Wait = d
		return nil
	}
}

// FetchSubject restricts the fetch to requests published on subjects
// matching subject (wildcards allowed): a worker of one model on a queue
// shared by several (ai.infer.>) fetches semaq.InferSubject(model).
func FetchSubject(subject string) FetchOption {
	return func(r *semaq.FetchRequest) error {
		if len(subject) > 256 {
			return fmt.Errorf("fetch subject %.40q... is longer than 256 bytes", subject)
		}
		if err := semaq.CheckSubject(subject, true); err != nil {
			return fmt.Errorf("fetch subject: %w", err)
		}
		r.Subject = subject
		return nil
	}
}

// FetchLabels describes the worker: "model" and "adapter" (comma-separated
// lists of what it has loaded) give it the requests that need them first.
func FetchLabels(labels map[string]string) FetchOption {
	return func(r *semaq.FetchRequest) error {
		r.Labels = labels
		return nil
	}
}

// FetchWorker fetches on behalf of worker id instead of this client's own
// identity. Gateways that hand jobs to workers of their own (the HTTP front
// door) use it; cancel notices for such jobs go to semaq.QueueCancelPrefix+id,
// which this client does not watch.
func FetchWorker(id string) FetchOption {
	return func(r *semaq.FetchRequest) error {
		if err := semaq.CheckConsumerName(id); err != nil {
			return fmt.Errorf("fetch worker: %w", err)
		}
		r.Worker = id
		return nil
	}
}

// worker is a client's identity as a worker: cancel notices for the jobs it
// holds arrive on one subscription and cancel their contexts.
type worker struct {
	once sync.Once
	err  error
	id   string
	mu   sync.Mutex
	jobs map[jobKey]*Job
}

// jobKey names a job among those a worker holds.
type jobKey struct {
	queue string
	seq   uint64
}

func (c *Client) workerID() (string, error) {
	w := &c.work
	w.once.Do(func() {
		w.id = nuid.Next()
		w.jobs = make(map[jobKey]*Job)
		_, w.err = c.nc.Subscribe(semaq.QueueCancelPrefix+w.id, func(m *nats.Msg) {
			var n semaq.CancelNotice
			if json.Unmarshal(m.Data, &n) != nil {
				return
			}
			w.mu.Lock()
			j := w.jobs[jobKey{n.Queue, n.Seq}]
			w.mu.Unlock()
			if j != nil {
				j.cancel(fmt.Errorf("%w: %s", ErrJobCancelled, n.Reason))
			}
		})
		if w.err == nil {
			w.err = c.nc.Flush()
		}
	})
	return w.id, w.err
}

// Fetch asks queue for work and returns the jobs the dispatcher picked:
// possibly none when no FetchWait was given or it passed. Each job must be
// answered (Ack, Nak, Term) within its ack wait, or extended with
// InProgress; otherwise it goes back to the queue for another worker.
func (c *Client) Fetch(ctx context.Context, queue string, opts ...FetchOption) ([]*Job, error) {
	id, err := c.workerID()
	if err != nil {
		return nil, fmt.Errorf("client: fetch: cancel subscription: %w", err)
	}
	req := semaq.FetchRequest{Worker: id, Max: 1}
	for _, o := range opts {
		if err := o(&req); err != nil {
			return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: %v", err)
		}
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Wait+c.timeout)
		defer cancel()
	}
	body, _ := json.Marshal(req)
	subj := fmt.Sprintf(semaq.APIQueueFetchT, queue)
	// One fetch, one reply: the dispatcher fits the batch in one message.
	// A fetch that ends early (ctx) is not lost: jobs sent after it go back
	// to the queue when their ack wait passes.
	ctx, done := c.denied.Watch(ctx, subj)
	defer done()
	m, err := c.nc.RequestWithContext(ctx, subj, body)
	switch {
	case err != nil && denial.Cause(ctx) != nil:
		return nil, denial.Cause(ctx)
	case errors.Is(err, nats.ErrNoResponders):
		return nil, semaq.NewAPIError(semaq.ErrQueueNotFound, "queue %s not found (no dispatcher answers on %s)", queue, subj)
	case err != nil:
		return nil, fmt.Errorf("client: fetch from %s: %w", queue, err)
	}
	var jobs []*Job
	if st := m.Header.Get(semaq.HdrQueueStatus); st == "204" && len(m.Data) > 0 {
		fjs, err := semaq.ParseJobFrame(m.Data)
		if err != nil {
			return nil, fmt.Errorf("client: fetch from %s: %w", queue, err)
		}
		for _, fj := range fjs {
			jobs = append(jobs, c.newJob(queue, fj))
		}
	}
	return c.endFetch(queue, m, jobs)
}

func (c *Client) endFetch(queue string, m *nats.Msg, jobs []*Job) ([]*Job, error) {
	switch st := m.Header.Get(semaq.HdrQueueStatus); st {
	case "204", "408":
		return jobs, nil
	default:
		if len(m.Data) > 0 {
			if err := decodeReply(m.Data, nil); err != nil {
				return jobs, err
			}
		}
		return jobs, fmt.Errorf("client: fetch from %s: status %s: %s", queue, st, m.Header.Get(semaq.HdrQueueDescription))
	}
}

// AckSubject is the subject the job is answered on (semaq.JobAck and the
// other Job* bodies), for workers that answer it without this Job.
func (j *Job) AckSubject() string { return j.reply }

// Detach stops this client watching the job: its context ends now and
// cancel notices are ignored. The job must still be answered, through
// AckSubject, by whoever took it over.
func (j *Job) Detach() { j.release() }

// Job is one request handed to this worker. Its fields are read-only.
type Job struct {
	Queue   string
	Subject string // the subject the request was published on
	Seq     uint64 // its sequence in the queue
	ID      string // its Nats-Msg-Id, if it had one
	Header  nats.Header
	Data    []byte
	// Deliveries is 1 the first time the request is handed out.
	Deliveries int
	// Tokens is the prompt tokens it was charged (Estimated when the
	// request did not say).
	Tokens    int64
	Estimated bool
	// Waited is how long it was queued.
	Waited time.Duration

	c     *Client
	reply string

	// The context is made on first use (most of a batch's jobs may never
	// need one, and a deadline costs a timer); mu guards it and the cause
	// of a cancellation that came first.
	mu       sync.Mutex
	deadline time.Time
	ctx      context.Context
	cancelFn context.CancelCauseFunc
	stopFn   context.CancelFunc
	cause    error
}

func (c *Client) newJob(queue string, fj semaq.FrameJob) *Job {
	h := nats.Header(fj.Header)
	j := &Job{Queue: queue, Subject: h.Get(semaq.HdrQueueSubject), ID: h.Get(semaq.HdrMsgID), Header: h, Data: fj.Data, c: c, reply: fj.Reply}
	j.Seq, _ = strconv.ParseUint(h.Get(semaq.HdrQueueSeq), 10, 64)
	j.Deliveries, _ = strconv.Atoi(h.Get(semaq.HdrQueueDeliver))
	j.Tokens, _ = strconv.ParseInt(h.Get(semaq.HdrQueueTokens), 10, 64)
	j.Estimated = h.Get(semaq.HdrQueueEstimate) == "true"
	j.Waited, _ = time.ParseDuration(h.Get(semaq.HdrQueueWait))
	if v := h.Get(semaq.HdrDeadline); v != "" {
		if dl, err := time.Parse(time.RFC3339Nano, v); err == nil {
			j.deadline = dl
		}
	}
	w := &c.work
	w.mu.Lock()
	w.jobs[jobKey{queue, j.Seq}] = j
	w.mu.Unlock()
	return j
}

func (j *Job) key() string { return j.Queue + "." + strconv.FormatUint(j.Seq, 10) }

// Context is done when the request's deadline passes, when it is cancelled
// (context.Cause is ErrJobCancelled with the reason), or once the job is
// answered.
func (j *Job) Context() context.Context {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.ctx == nil {
		base, cancel := context.WithCancelCause(context.Background())
		j.ctx, j.cancelFn, j.stopFn = base, cancel, func() {}
		if !j.deadline.IsZero() {
			j.ctx, j.stopFn = context.WithDeadline(base, j.deadline)
		}
		if j.cause != nil {
			j.cancelFn(j.cause)
			j.stopFn()
		}
	}
	return j.ctx
}

// cancel ends the job's context with cause; the first cause wins, also
// when the context is made later.
func (j *Job) cancel(cause error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.cause == nil {
		j.cause = cause
	}
	if j.cancelFn != nil {
		j.cancelFn(cause)
		j.stopFn()
	}
}

// release forgets the job: its context ends, cancel notices are ignored.
func (j *Job) release() {
	w := &j.c.work
	w.mu.Lock()
	if k := (jobKey{j.Queue, j.Seq}); w.jobs[k] == j {
		delete(w.jobs, k)
	}
	w.mu.Unlock()
	j.cancel(context.Canceled)
}

// AckOption adds to an Ack.
type AckOption func(*semaq.JobAckReport)

// AckOutputTokens reports the tokens the worker generated; they count
// toward the tenant's fair share.
func AckOutputTokens(n int64) AckOption {
	return func(r *semaq.JobAckReport) { r.OutputTokens = n }
}

// Ack says the request is done; the queue forgets it. It waits for the
// dispatcher's confirmation: semaq.ErrLeaseLost means the job was no longer
// this worker's (its ack wait passed or it was cancelled).
func (j *Job) Ack(ctx context.Context, opts ...AckOption) error {
	var rep semaq.JobAckReport
	for _, o := range opts {
		o(&rep)
	}
	body := semaq.JobAck
	if rep.OutputTokens != 0 {
		if rep.OutputTokens < 0 {
			return semaq.NewAPIError(semaq.ErrBadRequest, "client: output tokens %d is negative", rep.OutputTokens)
		}
		b, _ := json.Marshal(rep)
		body += " " + string(b)
	}
	return j.answer(ctx, body, true)
}

// AckNoWait is Ack without waiting for the dispatcher's confirmation,
// like a JetStream Ack: cheaper, but an ack lost on the way (broker
// restart, lease already lapsed) goes unnoticed and the request is served
// again. Use Ack when a duplicate would matter.
func (j *Job) AckNoWait(opts ...AckOption) error {
	var rep semaq.JobAckReport
	for _, o := range opts {
		o(&rep)
	}
	body := semaq.JobAck
	if rep.OutputTokens < 0 {
		return semaq.NewAPIError(semaq.ErrBadRequest, "client: output tokens %d is negative", rep.OutputTokens)
	}
	if rep.OutputTokens > 0 {
		b, _ := json.Marshal(rep)
		body += " " + string(b)
	}
	j.release()
	if err := j.c.nc.Publish(j.reply, []byte(body)); err != nil {
		return fmt.Errorf("client: job %d: %w", j.Seq, err)
	}
	return nil
}

// Nak gives the request back to the queue, to be handed out again after
// delay (at once when 0). Past the queue's max deliveries it is
// dead-lettered instead.
func (j *Job) Nak(ctx context.Context, delay time.Duration) error {
	body := semaq.JobNak
	if delay > 0 {
		body += fmt.Sprintf(` {"delay_ms":%d}`, delay.Milliseconds())
	}
	return j.answer(ctx, body, true)
}

// InProgress restarts the job's ack wait.
func (j *Job) InProgress(ctx context.Context) error {
	return j.answer(ctx, semaq.JobInProgress, false)
}

// Term dead-letters the request with reason; it is never handed out again.
func (j *Job) Term(ctx context.Context, reason string) error {
	body := semaq.JobTerm
	if reason != "" {
		body += " " + reason
	}
	return j.answer(ctx, body, true)
}

func (j *Job) answer(ctx context.Context, body string, final bool) error {
	var (
		m   *nats.Msg
		err error
	)
	if _, ok := ctx.Deadline(); !ok && ctx.Done() == nil {
		// Nothing can end ctx: the client's timeout alone, without a
		// context and its timer for each answer.
		if m, err = j.c.nc.Request(j.reply, []byte(body), j.c.timeout); errors.Is(err, nats.ErrTimeout) {
			err = context.DeadlineExceeded // as with a context's timeout
		}
	} else {
		ctx, cancel := j.c.withTimeout(ctx)
		m, err = j.c.nc.RequestWithContext(ctx, j.reply, []byte(body))
		cancel()
	}
	if err != nil {
		return transportError(err, j.reply)
	}
	var r semaq.JobReply
	if string(m.Data) == `{"ok":true}` {
		r.OK = true // the common answer, without reflection
	} else if err := json.Unmarshal(m.Data, &r); err != nil {
		return fmt.Errorf("client: job %d: reply is not JSON: %w", j.Seq, err)
	}
	if final || !r.OK {
		j.release()
	}
	if !r.OK {
		if r.Error != nil {
			return r.Error
		}
		return fmt.Errorf("client: job %d: refused", j.Seq)
	}
	return nil
}

// jobJSON is the JSON form of a Job (semaq work fetch --json).
type jobJSON struct {
	Queue      string            `json:"queue"`
	Subject    string            `json:"subject"`
	Seq        uint64            `json:"seq"`
	ID         string            `json:"id,omitempty"`
	Deliveries int               `json:"deliveries"`
	Tokens     int64             `json:"tokens"`
	Estimated  bool              `json:"tokens_estimated,omitempty"`
	WaitedMs   float64           `json:"waited_ms"`
	AckSubject string            `json:"ack_subject"`
	Headers    map[string]string `json:"headers,omitempty"`
	Data       *string           `json:"data,omitempty"`
	DataB64    []byte            `json:"data_b64,omitempty"`
}

// MarshalJSON renders the job as one JSON object: its queue fields, the
// subject to answer it on (ack_subject), headers (name to first value), and
// data as UTF-8 text, or data_b64 when the payload is not valid UTF-8.
func (j *Job) MarshalJSON() ([]byte, error) {
	out := jobJSON{Queue: j.Queue, Subject: j.Subject, Seq: j.Seq, ID: j.ID, Deliveries: j.Deliveries,
		Tokens: j.Tokens, Estimated: j.Estimated, WaitedMs: float64(j.Waited.Microseconds()) / 1000, AckSubject: j.reply}
	if len(j.Header) > 0 {
		out.Headers = make(map[string]string, len(j.Header))
		for k, v := range j.Header {
			if len(v) > 0 {
				out.Headers[k] = v[0]
			}
		}
	}
	if utf8.Valid(j.Data) {
		s := string(j.Data)
		out.Data = &s
	} else {
		out.DataB64 = j.Data
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
