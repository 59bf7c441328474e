package dispatch

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/semaq/semaq/internal/broker/dispatch/sched"
	"github.com/semaq/semaq/semaq"
)

// queueStats are a dispatcher's counters and moving averages, the signals
// for autoscaling and adaptive admission. The dispatcher's mu guards them.
type queueStats struct {
	arrivals, dispatched, acked, nacked, redelivered uint64
	expired, cancelled, deadLetters, outputTokens    uint64
	badReplies, consumerRecoveries                   uint64
	cancelsRefused, leaseConflicts                   uint64
	leaseChecksRefused                               uint64 // answers past maxLeaseChecks, left unanswered

	// per-interval accumulators, folded into the averages by roll
	intervalAcks   uint64
	intervalTokens int64
	lastArrivals   uint64

	arrivalRate, serviceRate, tokenRate float64 // EWMA, per second
	// service time (fetch to ack) EWMA mean and variance, in seconds
	svcMean, svcVar float64
	svcSeen         bool
	promptCV        float64
	// wait is the queueing delay of dispatched requests (for metrics).
	waitSum   time.Duration
	waitCount uint64
}

// rateWindow is the horizon of the moving averages.
const rateWindow = 60 * time.Second

func (st *queueStats) observeService(d time.Duration, tokens int64) {
	st.intervalAcks++
	st.intervalTokens += tokens
	x := d.Seconds()
	if !st.svcSeen {
		st.svcMean, st.svcVar, st.svcSeen = x, 0, true
		return
	}
	// Exponentially weighted mean and variance (West's update), weight
	// about the last 100 acks.
	const a = 0.01
	diff := x - st.svcMean
	incr := a * diff
	st.svcMean += incr
	st.svcVar = (1 - a) * (st.svcVar + diff*incr)
}

func (st *queueStats) observeWait(w time.Duration) {
	st.waitSum += w
	st.waitCount++
}

// roll folds the last interval into the moving averages and recomputes the
// admission figures the ingress reads. d.mu is held.
func (st *queueStats) roll(dt time.Duration, d *Dispatcher) {
	if dt <= 0 {
		return
	}
	a := 1 - math.Exp(-dt.Seconds()/rateWindow.Seconds())
	sec := dt.Seconds()
	arr := float64(st.arrivals-st.lastArrivals) / sec
	st.lastArrivals = st.arrivals
	st.arrivalRate += a * (arr - st.arrivalRate)
	st.serviceRate += a * (float64(st.intervalAcks)/sec - st.serviceRate)
	st.tokenRate += a * (float64(st.intervalTokens)/sec - st.tokenRate)
	st.intervalAcks, st.intervalTokens = 0, 0

	sc := d.sched
	st.promptCV = 0
	promptSum, promptSq := sc.PromptMoments()
	if n := float64(sc.Queued()); n > 1 && promptSum > 0 {
		mean := promptSum / n
		if v := promptSq/n - mean*mean; v > 0 {
			st.promptCV = math.Sqrt(v) / mean
		}
	}
	d.adaptiveTokens.Store(st.adaptiveThreshold(d.cfg.MaxWait, sc))
	d.retryAfterMs.Store(st.retryAfter(d).Milliseconds())
}

// latencyCV is the coefficient of variation of service times.
func (st *queueStats) latencyCV() float64 {
	if !st.svcSeen || st.svcMean <= 0 {
		return 0
	}
	return math.Sqrt(st.svcVar) / st.svcMean
}

// adaptiveThreshold is the token limit of adaptive admission:
//
//	T = tokenRate × MaxWait / (1 + CVprompt × CVlatency)
//
// what the workers are seen to serve in MaxWait, tightened when prompt
// lengths and service times both vary (long prompts then hold up short
// ones). It is never below twice the mean queued prompt, and 0 (off) until
// the queue has seen service.
func (st *queueStats) adaptiveThreshold(maxWait time.Duration, sc *sched.Scheduler) int64 {
	if maxWait <= 0 || st.tokenRate <= 0 {
		return 0
	}
	t := st.tokenRate * maxWait.Seconds() / (1 + st.promptCV*st.latencyCV())
	if n := sc.Queued(); n > 0 {
		promptSum, _ := sc.PromptMoments()
		if floor := 2 * promptSum / float64(n); t < floor {
			t = floor
		}
	}
	if t < 1 {
		t = 1
	}
	return int64(t)
}

// retryAfter estimates when a refused publisher should try again: the time
// the workers need to serve the excess, between 1 s and 60 s.
func (st *queueStats) retryAfter(d *Dispatcher) time.Duration {
	sc := d.sched
	var secs float64
	switch {
	case st.serviceRate > 0 && int64(sc.Len()) >= d.cfg.MaxMessages:
		secs = float64(int64(sc.Len())-d.cfg.MaxMessages+1) / st.serviceRate
	case st.tokenRate > 0:
		limit := d.cfg.MaxTokens
		if thr := d.adaptiveTokens.Load(); thr > 0 && (limit <= 0 || thr < limit) {
			limit = thr
		}
		if excess := sc.TokensQueued() + sc.TokensHeld() - limit; limit > 0 && excess > 0 {
			secs = float64(excess) / st.tokenRate
		}
	}
	r := time.Duration(secs * float64(time.Second))
	return min(max(r, time.Second), time.Minute)
}

// recommendedWorkers applies Little's law: keeping up with arrivals takes
// arrivalRate × serviceTime busy workers (at 80 % utilisation), and
// draining the backlog within the drain target takes backlog × serviceTime
// / target more. Before any service is seen, a backlog asks for one.
func (st *queueStats) recommendedWorkers(d *Dispatcher) int {
	sc := d.sched
	backlog := float64(sc.Queued() + sc.Delayed())
	if !st.svcSeen {
		if backlog > 0 {
			return 1
		}
		return 0
	}
	drain := d.cfg.MaxWait
	if drain <= 0 {
		drain = time.Minute
	}
	n := st.arrivalRate*st.svcMean/0.8 + backlog*st.svcMean/drain.Seconds()
	return int(math.Ceil(n))
}

// status builds the QueueStatus. d.mu is held.
func (st *queueStats) status(d *Dispatcher, now time.Time) semaq.QueueStatus {
	sc := d.sched
	out := semaq.QueueStatus{
		Queued:        sc.Queued(),
		Held:          sc.Held(),
		Delayed:       sc.Delayed(),
		TokensQueued:  sc.TokensQueued(),
		TokensHeld:    sc.TokensHeld(),
		Bytes:         sc.Bytes(),
		ArrivalRate:   st.arrivalRate,
		ServiceRate:   st.serviceRate,
		TokenRate:     st.tokenRate,
		ServiceTimeMs: st.svcMean * 1000,
		Admission: semaq.AdmissionStatus{
			MaxMessages:    d.cfg.MaxMessages,
			MaxTokens:      d.cfg.MaxTokens,
			MaxBytes:       d.cfg.MaxBytes,
			Reserved:       d.adm.pending(),
			AdaptiveTokens: d.adaptiveTokens.Load(),
			PromptCV:       st.promptCV,
			LatencyCV:      st.latencyCV(),
		},
		Counters: semaq.QueueCounters{
			Admitted: d.admitted.Load(), Refused: d.refused.Load(),
			Dispatched: st.dispatched, Acked: st.acked, Nacked: st.nacked, Redelivered: st.redelivered,
			Expired: st.expired, Cancelled: st.cancelled, DeadLetters: st.deadLetters, OutputToks: st.outputTokens,
			BadReplies: st.badReplies, ConsumerRecoveries: st.consumerRecoveries, CancelsRefused: st.cancelsRefused,
			LeaseConflicts: st.leaseConflicts, LeaseChecksUnanswered: st.leaseChecksRefused,
		},
	}
	out.Admission.Saturated = d.saturation(1) != ""
	sc.EachWorker(func(w *sched.Worker) {
		if w.Held > 0 || now.Before(w.Expires) {
			out.Workers++
		}
	})
	out.RecommendedWorkers = st.recommendedWorkers(d)
	byPrio := map[string]*semaq.QueueGroupStat{}
	byTenant := map[string]*semaq.QueueGroupStat{}
	byModel := map[string]*semaq.QueueGroupStat{}
	add := func(m map[string]*semaq.QueueGroupStat, key string, j *sched.Job) {
		g := m[key]
		if g == nil {
			g = &semaq.QueueGroupStat{Key: key}
			m[key] = g
		}
		g.Queued++
		g.Tokens += j.Tokens
		if age := now.Sub(j.Arrived); age > g.OldestAge {
			g.OldestAge = age
		}
	}
	each := func(j *sched.Job) {
		if age := now.Sub(j.Arrived); age > out.OldestAge {
			out.OldestAge = age
		}
		add(byPrio, strconv.Itoa(j.Prio), j)
		add(byTenant, orDash(j.Tenant), j)
		add(byModel, orDash(j.Model), j)
	}
	sc.EachWaiting(each)
	byVersion := map[string]*semaq.QueueGroupStat{}
	sc.Each(func(j *sched.Job) {
		if j.Version != "" {
			add(byVersion, semaq.ModelVersionKey(j.Model, j.Version), j)
		}
	})
	out.ByVersion = sortedGroups(byVersion)
	out.ByPriority = sortedGroups(byPrio)
	out.ByTenant = sortedGroups(byTenant)
	out.ByModel = sortedGroups(byModel)
	sc.EachBacklogged(func(t string, c float64) {
		out.Fairness = append(out.Fairness, semaq.TenantCounter{Tenant: orDash(t), Counter: c})
	})
	slices.SortFunc(out.Fairness, func(a, b semaq.TenantCounter) int {
		if a.Tenant < b.Tenant {
			return -1
		}
		if a.Tenant > b.Tenant {
			return 1
		}
		return 0
	})
	out.Classes = d.classStats()
	return out
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func sortedGroups(m map[string]*semaq.QueueGroupStat) []semaq.QueueGroupStat {
	out := make([]semaq.QueueGroupStat, 0, len(m))
	for _, g := range m {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b semaq.QueueGroupStat) int {
		if a.Key < b.Key {
			return -1
		}
		if a.Key > b.Key {
			return 1
		}
		return 0
	})
	return out
}
