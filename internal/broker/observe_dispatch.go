package broker

import (
	"time"

	"github.com/semaq/semaq/internal/broker/dispatch/sched"
	"github.com/semaq/semaq/internal/metrics"
)

// Observability of work queues (package dispatch): per request the wait
// and the end-to-end delivery latency. The dispatcher records its dispatch
// span itself, with the node's tracer (dispatchDeps, wiring.go); the queue
// state a scrape reads is the streams subsystem's (streams.Manager
// QueueStats).

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
