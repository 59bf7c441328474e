package broker

import (
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/semaq/semaq/internal/broker/dispatch/sched"
	"github.com/semaq/semaq/internal/metrics"
)

// Observability of work queues (package dispatch): queue state read at
// scrape time, and per request the wait and the end-to-end delivery
// latency. The dispatcher records its dispatch span itself, with the
// node's tracer.

// queueSource reports every dispatcher of the node to the metrics.
type queueSource struct{ s *Server }

// QueueStats scans the queued requests of every dispatcher, one dispatcher
// lock at a time: O(queued requests) per scrape.
func (q queueSource) QueueStats() []metrics.QueueStat {
	type key struct {
		tenant, model string
		prio          int
	}
	now := time.Now()
	var out []metrics.QueueStat
	for _, d := range q.s.dispatchers() {
		idx := map[key]int{}
		d.Each(func(j *sched.Job) {
			if j.State == sched.JobHeld {
				return // with a worker: not waiting
			}
			k := key{j.Tenant, j.Model, j.Prio}
			i, ok := idx[k]
			if !ok {
				i = len(out)
				idx[k] = i
				out = append(out, metrics.QueueStat{Tenant: j.Tenant, Priority: j.Prio, Model: j.Model})
			}
			st := &out[i]
			st.Depth++
			st.TokensWaiting += j.Tokens
			st.OldestAge = max(st.OldestAge, now.Sub(j.Arrived))
		})
	}
	return out
}

// dispatchObserver is the dispatchers' dispatch.Observer: the node's
// metrics. Its methods run under a dispatcher's lock and take only leaf
// locks.
type dispatchObserver struct{ s *Server }

// Dispatched records a request handed to a worker after waiting since it
// arrived.
func (o dispatchObserver) Dispatched(j *sched.Job, now time.Time) {
	s := o.s
	wait := now.Sub(j.Arrived)
	s.metrics.Queue(j.Tenant, j.Prio, j.Model).Dispatched(wait)
	if s.served != nil && s.metrics != nil {
		if p := s.served.PatternFor(j.Subject); p != "" {
			s.metrics.Subject(p).Delivered(wait)
		}
	}
}

// Expired and Cancelled record a request that left its queue undispatched.
func (o dispatchObserver) Expired(j *sched.Job) {
	o.s.metrics.Queue(j.Tenant, j.Prio, j.Model).Dropped(metrics.DropExpired)
}

func (o dispatchObserver) Cancelled(j *sched.Job) {
	o.s.metrics.Queue(j.Tenant, j.Prio, j.Model).Dropped(metrics.DropCanceled)
}

// DeadLettered counts a request of queue stored in the dead-letter queue.
func (o dispatchObserver) DeadLettered(queue, reason string) { o.s.metrics.DeadLetter(queue, reason) }

// dispatchTracer is the tracer of the dispatch spans: nil without tracing,
// so the dispatcher skips span work altogether.
func (s *Server) dispatchTracer() trace.Tracer {
	if s.tracing == nil {
		return nil
	}
	return s.tracing.Tracer()
}
