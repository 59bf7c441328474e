package broker

import (
	"container/heap"
	"container/list"
	"strings"
	"time"

	"github.com/semaq/semaq/semaq"
)

// The scheduler of a work queue: which queued request a fetching worker
// gets. It is a plain data structure with no locking and no I/O; the
// dispatcher (dispatch.go) owns one and calls it under its mutex.
//
// Order of decisions for one pick (docs/queues.md):
//  1. a request past its deadline is never handed out (sweep expires it);
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
// A fetch with a subject filter (FetchRequest.Subject) sees only the
// requests published on subjects it matches, whatever they waited: how
// the workers of several models share one queue (ai.infer.>). Like an
// affinity skip it looks at most schedScanLimit requests into each
// tenant's list at each level.

// VTC weights: output tokens cost more than prompt tokens, as they do on
// the GPU (decode is sequential).
const (
	vtcInputWeight  = 1.0
	vtcOutputWeight = 2.0
	// schedScanLimit bounds how far into one tenant's list a pick looks
	// for a request the worker may take (affinity skips).
	schedScanLimit = 256
)

type jobState uint8

const (
	jobQueued jobState = iota
	jobDelayed
	jobHeld
	jobGone
)

// qjob is one request in a queue: an index entry. The payload and the
// stored headers stay in the stream; the dispatcher reads them back by
// sequence when it hands the request out (dispatch_payload.go).
type qjob struct {
	seq      uint64
	id       string // Nats-Msg-Id, may be empty
	subject  string
	jsReply  string // ack subject of its latest delivery by the stream consumer
	replyGen uint64 // the consumer generation that delivered jsReply
	tenant   string
	model    string
	adapter  string
	prio     int
	tokens   int64
	bytes    int64 // what it counts toward MaxBytes: payload + semaq.QueueRequestOverhead
	size     int   // bytes it takes in a batch frame, about
	estimate bool
	hasDL    bool      // its stored headers carry AI-Deadline
	arrived  time.Time // AI-Received: when the ingress took it
	deadline time.Time // zero: none

	state      jobState
	deliveries int
	notBefore  time.Time // delayed until
	lease      string
	worker     string
	fetched    time.Time
	leaseUntil time.Time
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

// workerInfo is what the scheduler knows of a worker.
type workerInfo struct {
	id       string
	models   []string
	adapters []string
	labels   map[string]string
	expires  time.Time // live until then unless it fetches or answers again
	held     int
}

func (w *workerInfo) has(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

// retained is the bytes of strings the index keeps for j.
func (j *qjob) retained() int {
	return len(j.id) + len(j.subject) + len(j.jsReply) + len(j.tenant) + len(j.model) + len(j.adapter) +
		len(j.lease) + len(j.worker)
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

type scheduler struct {
	cfg    semaq.QueueConfig
	levels [10]schedLevel

	queued       int
	tokensQueued int64 // queued and delayed
	tokensHeld   int64
	bytes        int64              // of every request indexed (qjob.bytes)
	backlog      map[string]int     // queued requests per tenant
	counter      map[string]float64 // VTC
	lastCharged  float64            // counter of the tenant served last
	deadlines    deadlineHeap       // queued and delayed requests with a deadline
	delayed      map[uint64]*qjob
	held         map[uint64]*qjob
	bySeq        map[uint64]*qjob
	byID         map[string]*qjob
	workers      map[string]*workerInfo
	holders      map[string]int // "m:"+model / "a:"+adapter -> live workers holding it

	// promptSum and promptSq track prompt tokens of queued requests, for
	// the coefficient of variation adaptive admission uses.
	promptSum, promptSq float64
}

func newScheduler(cfg semaq.QueueConfig) *scheduler {
	s := &scheduler{
		cfg:     cfg,
		backlog: make(map[string]int),
		counter: make(map[string]float64),
		delayed: make(map[uint64]*qjob),
		held:    make(map[uint64]*qjob),
		bySeq:   make(map[uint64]*qjob),
		byID:    make(map[string]*qjob),
		workers: make(map[string]*workerInfo),
		holders: make(map[string]int),
	}
	for i := range s.levels {
		s.levels[i].tenants = make(map[string]*tenantList)
	}
	return s
}

// add takes a new request in. It reports false for a sequence it holds
// already.
func (s *scheduler) add(j *qjob) bool {
	if _, ok := s.bySeq[j.seq]; ok {
		return false
	}
	j.deadlineIdx = -1
	s.bySeq[j.seq] = j
	s.bytes += j.bytes
	if j.id != "" {
		s.byID[j.id] = j
	}
	s.enqueue(j)
	return true
}

// enqueue puts j at the back of its tenant's list at its priority.
func (s *scheduler) enqueue(j *qjob) {
	lvl := &s.levels[j.prio]
	tl := lvl.tenants[j.tenant]
	if tl == nil {
		tl = &tenantList{tenant: j.tenant}
		lvl.tenants[j.tenant] = tl
	}
	if s.backlog[j.tenant] == 0 {
		s.lift(j.tenant)
	}
	s.backlog[j.tenant]++
	j.state = jobQueued
	// New requests go to the back; one given back goes to its place by
	// sequence, so a redelivery keeps the tenant's FIFO order.
	e := tl.jobs.Back()
	for e != nil && e.Value.(*qjob).seq > j.seq {
		e = e.Prev()
	}
	if e == nil {
		j.elem = tl.jobs.PushFront(j)
	} else {
		j.elem = tl.jobs.InsertAfter(j, e)
	}
	s.watchDeadline(j)
	s.queued++
	s.tokensQueued += j.tokens
	t := float64(j.tokens)
	s.promptSum += t
	s.promptSq += t * t
}

// lift is VTC's rule for a tenant that becomes backlogged: its counter
// rises to the smallest counter among backlogged tenants (or, with none,
// the counter of the tenant served last), so a tenant cannot bank credit
// while idle and then starve the others.
func (s *scheduler) lift(tenant string) {
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
func (s *scheduler) unqueue(j *qjob) {
	if j.state != jobQueued {
		return
	}
	lvl := &s.levels[j.prio]
	if tl := lvl.tenants[j.tenant]; tl != nil {
		tl.jobs.Remove(j.elem)
		if tl.jobs.Len() == 0 {
			delete(lvl.tenants, j.tenant)
		}
	}
	j.elem = nil
	s.queued--
	s.tokensQueued -= j.tokens
	t := float64(j.tokens)
	s.promptSum -= t
	s.promptSq -= t * t
	if s.backlog[j.tenant]--; s.backlog[j.tenant] <= 0 {
		delete(s.backlog, j.tenant)
	}
}

// forget removes j for good (acked, expired, cancelled, dead-lettered).
func (s *scheduler) forget(j *qjob) {
	switch j.state {
	case jobQueued:
		s.unqueue(j)
	case jobDelayed:
		delete(s.delayed, j.seq)
		s.tokensQueued -= j.tokens
	case jobHeld:
		s.release(j)
	}
	if j.deadlineIdx >= 0 {
		heap.Remove(&s.deadlines, j.deadlineIdx)
	}
	delete(s.bySeq, j.seq)
	s.bytes -= j.bytes
	if j.id != "" && s.byID[j.id] == j {
		delete(s.byID, j.id)
	}
	j.state = jobGone
}

// release ends j's lease.
func (s *scheduler) release(j *qjob) {
	delete(s.held, j.seq)
	s.tokensHeld -= j.tokens
	if w := s.workers[j.worker]; w != nil {
		w.held--
	}
	j.lease, j.worker = "", ""
}

// delay gives a held request back, to be queued again at until.
func (s *scheduler) delay(j *qjob, until time.Time) {
	s.release(j)
	if !until.After(time.Time{}) {
		s.enqueue(j)
		return
	}
	j.state = jobDelayed
	j.notBefore = until
	s.delayed[j.seq] = j
	s.tokensQueued += j.tokens
	s.watchDeadline(j)
}

// watchDeadline puts j in the deadline heap unless it is there. Held
// requests leave the heap when their deadline passes (the worker's context
// ends then) and come back if they are queued again.
func (s *scheduler) watchDeadline(j *qjob) {
	if !j.deadline.IsZero() && j.deadlineIdx < 0 {
		heap.Push(&s.deadlines, j)
	}
}

// requeue puts a held request back at once (its lease ran out or the
// worker gave it back without delay).
func (s *scheduler) requeue(j *qjob) {
	s.release(j)
	s.enqueue(j)
}

// effLevel is the priority level j competes at now.
func (s *scheduler) effLevel(j *qjob, now time.Time) int {
	lvl := j.prio
	if step := s.cfg.AgingStep; step > 0 && lvl > 0 {
		if up := int(now.Sub(j.arrived) / step); up > 0 {
			lvl -= up
			if lvl < 0 {
				lvl = 0
			}
		}
	}
	return lvl
}

// eligible reports whether worker w may take j now.
func (s *scheduler) eligible(j *qjob, w *workerInfo, now time.Time) bool {
	if !j.deadline.IsZero() && !now.Before(j.deadline) {
		return false
	}
	waited := s.cfg.AffinityWait >= 0 && now.Sub(j.arrived) >= s.cfg.AffinityWait
	if waited {
		return true
	}
	if j.adapter != "" && !w.has(w.adapters, j.adapter) && s.holders["a:"+j.adapter] > 0 {
		return false
	}
	if j.model != "" && !w.has(w.models, j.model) && s.holders["m:"+j.model] > 0 {
		return false
	}
	return true
}

// best is the request worker w should get next, or nil; with a subject
// filter, only a request published on a subject it matches.
func (s *scheduler) best(w *workerInfo, now time.Time, filter string) *qjob {
	var (
		bj   *qjob
		bEff int
		bCnt float64
	)
	for lvl := range s.levels {
		for _, tl := range s.levels[lvl].tenants {
			var j *qjob
			n := 0
			for e := tl.jobs.Front(); e != nil && n < schedScanLimit; e, n = e.Next(), n+1 {
				if c := e.Value.(*qjob); (filter == "" || subjectMatches(filter, c.subject)) && s.eligible(c, w, now) {
					j = c
					break
				}
			}
			if j == nil {
				continue
			}
			eff, cnt := s.effLevel(j, now), s.counter[j.tenant]
			if bj == nil || eff < bEff || eff == bEff && (cnt < bCnt || cnt == bCnt && j.seq < bj.seq) {
				bj, bEff, bCnt = j, eff, cnt
			}
		}
	}
	return bj
}

// pick hands worker w up to max requests whose prompt tokens fit maxTokens
// and whose frame size fits maxBytes (0: no bound). The first request is
// handed out even when it alone is over a bound; after it, the batch stops
// at the first request that does not fit, so the schedule's order is kept.
func (s *scheduler) pick(w *workerInfo, now time.Time, max int, maxTokens int64, maxBytes int) []*qjob {
	return s.pickMatching(w, now, max, maxTokens, maxBytes, "")
}

// pickMatching is pick of the requests whose subject matches filter ("":
// any).
func (s *scheduler) pickMatching(w *workerInfo, now time.Time, max int, maxTokens int64, maxBytes int, filter string) []*qjob {
	var (
		out   []*qjob
		sum   int64
		bytes int
	)
	for len(out) < max {
		j := s.best(w, now, filter)
		if j == nil {
			break
		}
		if len(out) > 0 && (maxTokens > 0 && sum+j.tokens > maxTokens || maxBytes > 0 && bytes+j.size > maxBytes) {
			break
		}
		bytes += j.size
		s.unqueue(j)
		s.counter[j.tenant] += vtcInputWeight * float64(j.tokens)
		s.lastCharged = s.counter[j.tenant]
		j.state = jobHeld
		j.deliveries++
		j.worker = w.id
		j.fetched = now
		j.leaseUntil = now.Add(s.cfg.AckWait)
		s.held[j.seq] = j
		s.tokensHeld += j.tokens
		w.held++
		out = append(out, j)
		sum += j.tokens
		if maxTokens > 0 && sum >= maxTokens {
			break
		}
	}
	return out
}

// charge adds output tokens reported at ack to the tenant's counter.
func (s *scheduler) charge(tenant string, outputTokens int64) {
	if outputTokens > 0 {
		s.counter[tenant] += vtcOutputWeight * float64(outputTokens)
	}
}

// touchWorker records a worker's labels and keeps it live until expires.
func (s *scheduler) touchWorker(id string, labels map[string]string, expires time.Time) *workerInfo {
	w := s.workers[id]
	if w == nil {
		w = &workerInfo{id: id}
		s.workers[id] = w
	} else {
		s.countHolder(w, -1)
	}
	if labels != nil {
		w.labels = labels
		w.models = splitLabel(labels["model"])
		w.adapters = splitLabel(labels["adapter"])
	}
	if expires.After(w.expires) {
		w.expires = expires
	}
	s.countHolder(w, +1)
	return w
}

func (s *scheduler) countHolder(w *workerInfo, d int) {
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

// expireWorkers forgets workers that neither fetched nor hold work.
func (s *scheduler) expireWorkers(now time.Time) {
	for id, w := range s.workers {
		if w.held <= 0 && now.After(w.expires) {
			s.countHolder(w, -1)
			delete(s.workers, id)
		}
	}
}

// due returns requests that expired, delayed requests whose delay ended,
// and held requests whose lease ran out, as of now.
func (s *scheduler) due(now time.Time) (expired, undelayed, lapsed []*qjob) {
	for s.deadlines.Len() > 0 && !now.Before(s.deadlines[0].deadline) {
		j := s.deadlines[0]
		heap.Pop(&s.deadlines)
		if j.state == jobHeld {
			continue // the worker has it; its own deadline tells it to stop
		}
		expired = append(expired, j)
	}
	for _, j := range s.delayed {
		if !now.Before(j.notBefore) {
			undelayed = append(undelayed, j)
		}
	}
	for _, j := range s.held {
		if now.After(j.leaseUntil) {
			lapsed = append(lapsed, j)
		}
	}
	return expired, undelayed, lapsed
}

// undelay queues a delayed request again.
func (s *scheduler) undelay(j *qjob) {
	delete(s.delayed, j.seq)
	s.tokensQueued -= j.tokens
	s.enqueue(j)
}

// deadlineHeap orders requests by deadline.
type deadlineHeap []*qjob

func (h deadlineHeap) Len() int           { return len(h) }
func (h deadlineHeap) Less(i, k int) bool { return h[i].deadline.Before(h[k].deadline) }
func (h deadlineHeap) Swap(i, k int) {
	h[i], h[k] = h[k], h[i]
	h[i].deadlineIdx = i
	h[k].deadlineIdx = k
}
func (h *deadlineHeap) Push(x any) {
	j := x.(*qjob)
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
