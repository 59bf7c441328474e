package sched

import "time"

// Placement by labels (docs/queues.md, Hardware classes). A worker
// announces labels with its fetches (TouchWorker); a request may require
// labels, which only a worker announcing all of them gets, and prefer
// labels, which a worker lacking them gets only while no live worker has
// them all, or once the request has waited AffinityWait, like a model
// affinity. A cap outside the scheduler (a class's max concurrency,
// counted across the cluster by the dispatcher) holds a request back
// while Config.Capped says so; Config.Picked is told of each request a
// pick hands out, before the next is chosen, so the cap counts it.

// placeable reports whether w may ever take j: it has j's required labels
// and j's cap is not reached.
func (s *Scheduler) placeable(j *Job, w *Worker) bool {
	if !hasAll(w.labels, j.Require) {
		return false
	}
	return j.Class == "" || s.cfg.Capped == nil || !s.cfg.Capped(j)
}

// preferred reports whether w may take j before it has waited
// AffinityWait: w has j's preferred labels, or no live worker has them.
func (s *Scheduler) preferred(j *Job, w *Worker, now time.Time) bool {
	if len(j.Prefer) == 0 || hasAll(w.labels, j.Prefer) {
		return true
	}
	for _, o := range s.workers {
		if o != w && now.Before(o.Expires) && hasAll(o.labels, j.Prefer) && hasAll(o.labels, j.Require) {
			return false
		}
	}
	return true
}

// hasAll reports whether labels has every label of want.
func hasAll(labels, want map[string]string) bool {
	for k, v := range want {
		if have, ok := labels[k]; !ok || have != v {
			return false
		}
	}
	return true
}

// Labels are the labels w announced last.
func (w *Worker) Labels() map[string]string { return w.labels }

// SetCap sets Config.Capped and Config.Picked.
func (s *Scheduler) SetCap(capped func(j *Job) bool, picked func(j *Job)) {
	s.cfg.Capped, s.cfg.Picked = capped, picked
}
