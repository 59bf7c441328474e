// Package sched is the scheduler of a SemaQ work queue: which queued
// request a fetching worker gets. It is a plain data structure with no
// locking and no I/O; the dispatcher (internal/broker/dispatch) owns one
// per queue and calls it under its mutex.
//
// Order of decisions for one pick (docs/queues.md):
//  1. a request past its deadline is never handed out (Due expires it);
//  2. strict priority on the effective level: the request's priority,
//     raised one level per AgingStep it has waited (anti-starvation);
//  3. within a level, the tenant with the smallest virtual token counter
//     (VTC): a tenant is charged its prompt tokens at dispatch and twice its
//     output tokens at ack; a tenant that becomes backlogged is lifted to
//     the smallest counter of the backlogged tenants, so idling earns no
//     credit (work-conserving fair share with a bounded service gap);
//  4. FIFO within a tenant and level;
//  5. affinity: a request for a model or adapter that some live worker
//     holds is skipped by workers that do not hold it, until it has waited
//     AffinityWait.
//
// A pick with a subject filter (PickMatching) sees only the requests
// published on subjects it matches, whatever they waited: how the workers
// of several models share one queue (ai.infer.>). Like an affinity skip it
// looks at most ScanLimit requests into each tenant's list at each level.
package sched

import (
	"container/heap"
	"container/list"
	"strings"
	"time"

	"github.com/semaq/semaq/internal/wallclock"
)

// Config is what the scheduler needs of a queue's configuration.
type Config struct {
	// AgingStep raises a waiting request one priority level per step
	// (0: no aging).
	AgingStep time.Duration
	// AffinityWait is how long a request for a held model or adapter waits
	// for a worker holding it before any worker may take it (negative:
	// always).
	AffinityWait time.Duration
	// AckWait is the lease a pick gives: a held request whose lease ran out
	// is lapsed (Due).
	AckWait time.Duration
	// Match reports whether a subject filter matches a request's subject;
	// nil: the filter must equal the subject.
	Match func(filter, subject string) bool
	// Capped and Picked are a cap outside the scheduler (labels.go).
	Capped func(j *Job) bool
	Picked func(j *Job)
}

// VTC weights: output tokens cost more than prompt tokens, as they do on
// the GPU (decode is sequential).
const (
	vtcInputWeight  = 1.0
	vtcOutputWeight = 2.0
	// ScanLimit bounds how far into one tenant's list a pick looks for a
	// request the worker may take (affinity skips, subject filter).
	ScanLimit = 256
)

// State is where a Job is.
type State uint8

// The states of a Job.
const (
	JobQueued  State = iota // waiting to be picked
	JobDelayed              // given back with a delay; queued again when it ends
	JobHeld                 // leased to a worker
	JobGone                 // forgotten
)

// Job is one request in a queue: an index entry. The payload and the
// stored headers stay in the stream; the dispatcher reads them back by
// sequence when it hands the request out. The caller fills the fields up
// to Deadline before Add; the scheduler keeps State and the fields after
// it. JSReply, ReplyGen, Estimate, HasDL, Lease, LeaseSum and Acking are
// the dispatcher's: the scheduler carries them (and clears Lease, LeaseSum
// and Acking on release) without reading them.
type Job struct {
	Seq      uint64
	ID       string // Nats-Msg-Id, may be empty
	Subject  string
	JSReply  string // ack subject of its latest delivery by the stream consumer
	ReplyGen uint64 // the consumer generation that delivered jsReply
	Tenant   string
	// Publisher is the store user that published it (AI-Publisher, auth
	// on); CancelSum the SHA-256 of its cancel token (AI-Cancel-Sum).
	// Who may cancel it is decided from them (dispatch/answer.go).
	Publisher string
	CancelSum string
	Model     string
	Version   string // bound by the model registry: only a worker announcing it takes the request
	Adapter   string
	// Session is its AI-Session, read only for a queue that chains its
	// answers (semaq.QueueConfig.ChainAnswers).
	Session  string
	Prio     int
	Tokens   int64
	Bytes    int64 // what it counts toward MaxBytes: payload + semaq.QueueRequestOverhead
	Size     int   // bytes it takes in a batch frame, about
	Estimate bool
	HasDL    bool      // its stored headers carry AI-Deadline
	Arrived  time.Time // AI-Received: when the ingress took it
	Deadline time.Time // zero: none

	// Class is its hardware class; Require and Prefer the labels a worker
	// must and should have (labels.go).
	Class           string
	Require, Prefer map[string]string

	State      State
	Deliveries int
	NotBefore  time.Time // delayed until
	Lease      string    // the lease's secret; "" for a lease restored from the lease store
	LeaseSum   string    // SHA-256 of the lease, what answers are checked against
	Acking     bool      // an ack of it is being confirmed by JetStream
	Worker     string
	Fetched    time.Time
	LeaseUntil time.Time
	elem       *list.Element // in its tenant list while queued

	deadlineIdx int // index in the deadline heap, -1 when not in it
}

// tenantList is one tenant's FIFO at one priority level.
type tenantList struct {
	tenant string
	jobs   list.List
}

type schedLevel struct {
	tenants map[string]*tenantList
}

// Worker is what the Scheduler knows of a worker.
type Worker struct {
	ID       string
	models   []string // its "model" label, split at commas
	versions []string // its "version" label: the model versions it serves
	adapters []string
	labels   map[string]string
	Expires  time.Time // live until then unless it fetches or answers again
	Held     int       // requests leased to it
}

func (w *Worker) has(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// Retained is the bytes of strings the index keeps for j.
func (j *Job) Retained() int {
	return len(j.ID) + len(j.Subject) + len(j.JSReply) + len(j.Tenant) + len(j.Model) + len(j.Version) + len(j.Adapter) + len(j.Class) + len(j.Session) +
		len(j.Lease) + len(j.LeaseSum) + len(j.Worker)
}

// splitLabel reads a comma-separated label value.
func splitLabel(v string) []string {
	if v == "" {
		return nil
	}
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

type Scheduler struct {
	cfg    Config
	levels [10]schedLevel

	queued       int
	tokensQueued int64 // queued and delayed
	tokensHeld   int64
	bytes        int64              // of every request indexed (Job.bytes)
	backlog      map[string]int     // queued requests per tenant
	tenantTokens map[string]int64   // queued and delayed tokens per tenant (tenant quotas)
	counter      map[string]float64 // VTC
	lastCharged  float64            // counter of the tenant served last
	deadlines    deadlineHeap       // queued and delayed requests with a deadline
	delayed      map[uint64]*Job
	held         map[uint64]*Job
	bySeq        map[uint64]*Job
	byID         map[string]*Job
	workers      map[string]*Worker
	holders      map[string]int // "m:"+model / "a:"+adapter -> live workers holding it

	// promptSum and promptSq track prompt tokens of queued requests, for
	// the coefficient of variation adaptive admission uses.
	promptSum, promptSq float64
}

// New returns an empty scheduler.
func New(cfg Config) *Scheduler {
	s := &Scheduler{
		cfg:     cfg,
		backlog: make(map[string]int),
		counter: make(map[string]float64),
		delayed: make(map[uint64]*Job),
		held:    make(map[uint64]*Job),
		bySeq:   make(map[uint64]*Job),
		byID:    make(map[string]*Job),
		workers: make(map[string]*Worker),
		holders: make(map[string]int),
	}
	for i := range s.levels {
		s.levels[i].tenants = make(map[string]*tenantList)
	}
	return s
}

// Add takes a new request in. It reports false for a sequence it holds
// already.
func (s *Scheduler) Add(j *Job) bool {
	if _, ok := s.bySeq[j.Seq]; ok {
		return false
	}
	j.deadlineIdx = -1
	s.bySeq[j.Seq] = j
	s.bytes += j.Bytes
	if j.ID != "" {
		s.byID[j.ID] = j
	}
	s.enqueue(j)
	return true
}

// enqueue puts j at the back of its tenant's list at its priority.
func (s *Scheduler) enqueue(j *Job) {
	lvl := &s.levels[j.Prio]
	tl := lvl.tenants[j.Tenant]
	if tl == nil {
		tl = &tenantList{tenant: j.Tenant}
		lvl.tenants[j.Tenant] = tl
	}
	if s.backlog[j.Tenant] == 0 {
		s.lift(j.Tenant)
	}
	s.backlog[j.Tenant]++
	j.State = JobQueued
	// New requests go to the back; one given back goes to its place by
	// sequence, so a redelivery keeps the tenant's FIFO order.
	e := tl.jobs.Back()
	for e != nil && e.Value.(*Job).Seq > j.Seq {
		e = e.Prev()
	}
	if e == nil {
		j.elem = tl.jobs.PushFront(j)
	} else {
		j.elem = tl.jobs.InsertAfter(j, e)
	}
	s.watchDeadline(j)
	s.queued++
	s.addQueuedTokens(j, j.Tokens)
	t := float64(j.Tokens)
	s.promptSum += t
	s.promptSq += t * t
}

// lift is VTC's rule for a tenant that becomes backlogged: its counter
// rises to the smallest counter among backlogged tenants (or, with none,
// the counter of the tenant served last), so a tenant cannot bank credit
// while idle and then starve the others.
func (s *Scheduler) lift(tenant string) {
	floor, found := 0.0, false
	for t, n := range s.backlog {
		if n > 0 && t != tenant {
			if c := s.counter[t]; !found || c < floor {
				floor, found = c, true
			}
		}
	}
	if !found {
		floor = s.lastCharged
	}
	if s.counter[tenant] < floor {
		s.counter[tenant] = floor
	}
}

// unqueue takes j out of its tenant list.
func (s *Scheduler) unqueue(j *Job) {
	if j.State != JobQueued {
		return
	}
	lvl := &s.levels[j.Prio]
	if tl := lvl.tenants[j.Tenant]; tl != nil {
		tl.jobs.Remove(j.elem)
		if tl.jobs.Len() == 0 {
			delete(lvl.tenants, j.Tenant)
		}
	}
	j.elem = nil
	s.queued--
	s.addQueuedTokens(j, -j.Tokens)
	t := float64(j.Tokens)
	s.promptSum -= t
	s.promptSq -= t * t
	if s.backlog[j.Tenant]--; s.backlog[j.Tenant] <= 0 {
		delete(s.backlog, j.Tenant)
	}
}

// Forget removes j for good (acked, expired, cancelled, dead-lettered).
func (s *Scheduler) Forget(j *Job) {
	switch j.State {
	case JobQueued:
		s.unqueue(j)
	case JobDelayed:
		delete(s.delayed, j.Seq)
		s.addQueuedTokens(j, -j.Tokens)
	case JobHeld:
		s.release(j)
	}
	if j.deadlineIdx >= 0 {
		heap.Remove(&s.deadlines, j.deadlineIdx)
	}
	delete(s.bySeq, j.Seq)
	s.bytes -= j.Bytes
	if j.ID != "" && s.byID[j.ID] == j {
		delete(s.byID, j.ID)
	}
	j.State = JobGone
}

// release ends j's lease.
func (s *Scheduler) release(j *Job) {
	delete(s.held, j.Seq)
	s.tokensHeld -= j.Tokens
	if w := s.workers[j.Worker]; w != nil {
		w.Held--
	}
	j.Lease, j.LeaseSum, j.Acking, j.Worker = "", "", false, ""
}

// AddHeld takes in a request that a worker holds already: a lease made
// before a restart or by another node, restored by the dispatcher with its
// holder, deliveries and end (LeaseSum, Worker, Deliveries, Fetched and
// LeaseUntil set by the caller). The worker is live until its lease ends.
// It reports false for a sequence it holds already.
func (s *Scheduler) AddHeld(j *Job) bool {
	if _, ok := s.bySeq[j.Seq]; ok {
		return false
	}
	j.deadlineIdx = -1
	s.bySeq[j.Seq] = j
	s.bytes += j.Bytes
	if j.ID != "" {
		s.byID[j.ID] = j
	}
	w := s.TouchWorker(j.Worker, nil, j.LeaseUntil)
	j.State = JobHeld
	s.held[j.Seq] = j
	s.tokensHeld += j.Tokens
	w.Held++
	return true
}

// Delay gives a held request back, to be queued again at until.
func (s *Scheduler) Delay(j *Job, until time.Time) {
	s.release(j)
	if !until.After(time.Time{}) {
		s.enqueue(j)
		return
	}
	j.State = JobDelayed
	j.NotBefore = until
	s.delayed[j.Seq] = j
	s.addQueuedTokens(j, j.Tokens)
	s.watchDeadline(j)
}

// watchDeadline puts j in the deadline heap unless it is there. Held
// requests leave the heap when their deadline passes (the worker's context
// ends then) and come back if they are queued again.
func (s *Scheduler) watchDeadline(j *Job) {
	if !j.Deadline.IsZero() && j.deadlineIdx < 0 {
		heap.Push(&s.deadlines, j)
	}
}

// Requeue puts a held request back at once (its lease ran out or the
// worker gave it back without delay).
func (s *Scheduler) Requeue(j *Job) {
	s.release(j)
	s.enqueue(j)
}

// effLevel is the priority level j competes at now.
func (s *Scheduler) effLevel(j *Job, now time.Time) int {
	lvl := j.Prio
	if step := s.cfg.AgingStep; step > 0 && lvl > 0 {
		if up := int(now.Sub(j.Arrived) / step); up > 0 {
			lvl -= up
			if lvl < 0 {
				lvl = 0
			}
		}
	}
	return lvl
}

// eligible reports whether worker w may take j now.
func (s *Scheduler) eligible(j *Job, w *Worker, now time.Time) bool {
	if !j.Deadline.IsZero() && !wallclock.Of(now).Before(j.Deadline) { // a deadline is wall-clock time
		return false
	}
	// A bound version is a requirement, never waived by waiting: a
	// request admitted for v1 is served by v1 (docs/models.md).
	if j.Version != "" && !w.has(w.versions, j.Version) || !s.placeable(j, w) {
		return false
	}
	waited := s.cfg.AffinityWait >= 0 && now.Sub(j.Arrived) >= s.cfg.AffinityWait
	if waited {
		return true
	}
	if !s.preferred(j, w, now) {
		return false
	}
	if j.Adapter != "" && !w.has(w.adapters, j.Adapter) && s.holders["a:"+j.Adapter] > 0 {
		return false
	}
	if j.Model != "" && !w.has(w.models, j.Model) && s.holders["m:"+j.Model] > 0 {
		return false
	}
	return true
}

// best is the request worker w should get next, or nil; with a subject
// filter, only a request published on a subject it matches.
func (s *Scheduler) best(w *Worker, now time.Time, filter string) *Job {
	var (
		bj   *Job
		bEff int
		bCnt float64
	)
	for lvl := range s.levels {
		for _, tl := range s.levels[lvl].tenants {
			var j *Job
			n := 0
			for e := tl.jobs.Front(); e != nil && n < ScanLimit; e, n = e.Next(), n+1 {
				if c := e.Value.(*Job); (filter == "" || s.match(filter, c.Subject)) && s.eligible(c, w, now) {
					j = c
					break
				}
			}
			if j == nil {
				continue
			}
			eff, cnt := s.effLevel(j, now), s.counter[j.Tenant]
			if bj == nil || eff < bEff || eff == bEff && (cnt < bCnt || cnt == bCnt && j.Seq < bj.Seq) {
				bj, bEff, bCnt = j, eff, cnt
			}
		}
	}
	return bj
}

// Pick hands worker w up to max requests whose prompt tokens fit maxTokens
// and whose frame size fits maxBytes (0: no bound). The first request is
// handed out even when it alone is over a bound; after it, the batch stops
// at the first request that does not fit, so the schedule's order is kept.
func (s *Scheduler) Pick(w *Worker, now time.Time, max int, maxTokens int64, maxBytes int) []*Job {
	return s.PickMatching(w, now, max, maxTokens, maxBytes, "")
}

// PickMatching is Pick of the requests whose subject matches filter ("":
// any).
func (s *Scheduler) PickMatching(w *Worker, now time.Time, max int, maxTokens int64, maxBytes int, filter string) []*Job {
	var (
		out   []*Job
		sum   int64
		bytes int
	)
	for len(out) < max {
		j := s.best(w, now, filter)
		if j == nil {
			break
		}
		if len(out) > 0 && (maxTokens > 0 && sum+j.Tokens > maxTokens || maxBytes > 0 && bytes+j.Size > maxBytes) {
			break
		}
		bytes += j.Size
		s.unqueue(j)
		s.counter[j.Tenant] += vtcInputWeight * float64(j.Tokens)
		s.lastCharged = s.counter[j.Tenant]
		j.State = JobHeld
		j.Deliveries++
		j.Worker = w.ID
		j.Fetched = now
		j.LeaseUntil = now.Add(s.cfg.AckWait)
		s.held[j.Seq] = j
		s.tokensHeld += j.Tokens
		w.Held++
		if s.cfg.Picked != nil {
			s.cfg.Picked(j)
		}
		out = append(out, j)
		sum += j.Tokens
		if maxTokens > 0 && sum >= maxTokens {
			break
		}
	}
	return out
}

// Charge adds output tokens reported at ack to the tenant's counter.
func (s *Scheduler) Charge(tenant string, outputTokens int64) {
	if outputTokens > 0 {
		s.counter[tenant] += vtcOutputWeight * float64(outputTokens)
	}
}

// TouchWorker records a worker's labels and keeps it live until expires.
func (s *Scheduler) TouchWorker(id string, labels map[string]string, expires time.Time) *Worker {
	w := s.workers[id]
	if w == nil {
		w = &Worker{ID: id}
		s.workers[id] = w
	} else {
		s.countHolder(w, -1)
	}
	if labels != nil {
		w.labels = labels
		w.models = splitLabel(labels["model"])
		w.adapters = splitLabel(labels["adapter"])
		w.versions = splitLabel(labels["version"])
	}
	if expires.After(w.Expires) {
		w.Expires = expires
	}
	s.countHolder(w, +1)
	return w
}

func (s *Scheduler) countHolder(w *Worker, d int) {
	for _, m := range w.models {
		if s.holders["m:"+m] += d; s.holders["m:"+m] <= 0 {
			delete(s.holders, "m:"+m)
		}
	}
	for _, a := range w.adapters {
		if s.holders["a:"+a] += d; s.holders["a:"+a] <= 0 {
			delete(s.holders, "a:"+a)
		}
	}
}

// ExpireWorkers forgets workers that neither fetched nor hold work.
func (s *Scheduler) ExpireWorkers(now time.Time) {
	for id, w := range s.workers {
		if w.Held <= 0 && now.After(w.Expires) {
			s.countHolder(w, -1)
			delete(s.workers, id)
		}
	}
}

// Due returns requests that expired, delayed requests whose delay ended,
// and held requests whose lease ran out, as of now.
func (s *Scheduler) Due(now time.Time) (expired, undelayed, lapsed []*Job) {
	wall := wallclock.Of(now) // a deadline is wall-clock time, perhaps another node's
	for s.deadlines.Len() > 0 && !wall.Before(s.deadlines[0].Deadline) {
		j := s.deadlines[0]
		heap.Pop(&s.deadlines)
		if j.State == JobHeld {
			continue // the worker has it; its own deadline tells it to stop
		}
		expired = append(expired, j)
	}
	for _, j := range s.delayed {
		if !now.Before(j.NotBefore) {
			undelayed = append(undelayed, j)
		}
	}
	for _, j := range s.held {
		if now.After(j.LeaseUntil) {
			lapsed = append(lapsed, j)
		}
	}
	return expired, undelayed, lapsed
}

// Undelay queues a delayed request again.
func (s *Scheduler) Undelay(j *Job) {
	delete(s.delayed, j.Seq)
	s.addQueuedTokens(j, -j.Tokens)
	s.enqueue(j)
}

// deadlineHeap orders requests by deadline.
type deadlineHeap []*Job

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, k int) bool { return h[i].Deadline.Before(h[k].Deadline) }
func (h deadlineHeap) Swap(i, k int) {
	h[i], h[k] = h[k], h[i]
	h[i].deadlineIdx = i
	h[k].deadlineIdx = k
}
func (h *deadlineHeap) Push(x any) {
	j := x.(*Job)
	j.deadlineIdx = len(*h)
	*h = append(*h, j)
}
func (h *deadlineHeap) Pop() any {
	old := *h
	n := len(old)
	j := old[n-1]
	old[n-1] = nil
	j.deadlineIdx = -1
	*h = old[:n-1]
	return j
}

// match applies the configured subject matcher.
func (s *Scheduler) match(filter, subject string) bool {
	if s.cfg.Match == nil {
		return filter == subject
	}
	return s.cfg.Match(filter, subject)
}

// BySeq is the request with stream sequence seq, or nil.
func (s *Scheduler) BySeq(seq uint64) *Job { return s.bySeq[seq] }

// ByID is the request with Nats-Msg-Id id, or nil.
func (s *Scheduler) ByID(id string) *Job { return s.byID[id] }

// HeldJob is the request with sequence seq when it is leased, or nil.
func (s *Scheduler) HeldJob(seq uint64) *Job { return s.held[seq] }

// Worker is the worker with id, or nil.
func (s *Scheduler) Worker(id string) *Worker { return s.workers[id] }

// Counter is tenant's virtual token counter.
func (s *Scheduler) Counter(tenant string) float64 { return s.counter[tenant] }

// Len is the number of requests indexed: queued, delayed and held.
func (s *Scheduler) Len() int { return len(s.bySeq) }

// Queued is the number of requests waiting to be picked.
func (s *Scheduler) Queued() int { return s.queued }

// Held is the number of requests leased to workers.
func (s *Scheduler) Held() int { return len(s.held) }

// Delayed is the number of requests given back with a delay.
func (s *Scheduler) Delayed() int { return len(s.delayed) }

// TokensQueued is the prompt tokens of the queued and delayed requests.
func (s *Scheduler) TokensQueued() int64 { return s.tokensQueued }

// TenantTokensQueued is TokensQueued of one tenant's requests.
func (s *Scheduler) TenantTokensQueued(tenant string) int64 { return s.tenantTokens[tenant] }

// addQueuedTokens counts n more tokens queued or delayed, j's tenant's
// among them. A tenant's entry lives while it has tokens waiting, so the
// map is bounded by the requests held.
func (s *Scheduler) addQueuedTokens(j *Job, n int64) {
	s.tokensQueued += n
	if s.tenantTokens == nil {
		s.tenantTokens = make(map[string]int64)
	}
	if t := s.tenantTokens[j.Tenant] + n; t != 0 {
		s.tenantTokens[j.Tenant] = t
	} else {
		delete(s.tenantTokens, j.Tenant)
	}
}

// TokensHeld is the prompt tokens of the held requests.
func (s *Scheduler) TokensHeld() int64 { return s.tokensHeld }

// Bytes is what the indexed requests count toward MaxBytes (Job.Bytes).
func (s *Scheduler) Bytes() int64 { return s.bytes }

// PromptMoments is the sum and the sum of squares of the prompt tokens of
// the queued requests, for their coefficient of variation.
func (s *Scheduler) PromptMoments() (sum, sumSq float64) { return s.promptSum, s.promptSq }

// Each calls f for every indexed request, in no order.
func (s *Scheduler) Each(f func(*Job)) {
	for _, j := range s.bySeq {
		f(j)
	}
}

// EachWaiting calls f for every queued or delayed request, in no order.
func (s *Scheduler) EachWaiting(f func(*Job)) {
	for i := range s.levels {
		for _, tl := range s.levels[i].tenants {
			for e := tl.jobs.Front(); e != nil; e = e.Next() {
				f(e.Value.(*Job))
			}
		}
	}
	for _, j := range s.delayed {
		f(j)
	}
}

// EachWorker calls f for every worker known, in no order.
func (s *Scheduler) EachWorker(f func(*Worker)) {
	for _, w := range s.workers {
		f(w)
	}
}

// EachBacklogged calls f with every tenant that has queued requests and
// its counter, in no order.
func (s *Scheduler) EachBacklogged(f func(tenant string, counter float64)) {
	for t, n := range s.backlog {
		if n > 0 {
			f(t, s.counter[t])
		}
	}
}
