package streams

import (
	"slices"
	"time"

	"github.com/semaq/semaq/internal/broker/dispatch/sched"
	"github.com/semaq/semaq/internal/metrics"
)

// What the node reads of its work queues: the queue state a scrape
// reports, the token status API's and the quotas' look-ups, and the
// queues the cluster status says this node dispatches. Each dispatcher's
// lock is taken alone, never with queues.mu.

// QueueStats scans the queued requests of every dispatcher, one dispatcher
// lock at a time: O(queued requests) per scrape (metrics.QueueStatsSource).
func (m *Manager) QueueStats() []metrics.QueueStat {
	type key struct {
		tenant, model string
		prio          int
	}
	now := time.Now()
	var out []metrics.QueueStat
	for _, d := range m.dispatchers() {
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

// QueuedJob reports whether a work queue of this node holds a request
// whose Nats-Msg-Id is id (queued, delayed or held), and its tenant: the
// token status API asks it last (tokens.Deps.QueuedJob).
func (m *Manager) QueuedJob(id string) (tenant string, ok bool) {
	for _, d := range m.dispatchers() {
		if tenant, ok := d.Holds(id); ok {
			return tenant, true
		}
	}
	return "", false
}

// TenantQueued sums tenant's prompt tokens waiting in the work queues this
// node dispatches, and their workers' token rates (quota.Deps.QueuedTokens:
// the ingress asks it). It takes no lock of its own: it reads the
// dispatchers last given to the ingress.
func (m *Manager) TenantQueued(tenant string) (tokens int64, rate float64) {
	if m == nil {
		return 0, 0
	}
	local := m.local.Load()
	if local == nil {
		return 0, 0
	}
	for _, d := range *local {
		n, r := d.TenantQueued(tenant)
		tokens += n
		rate += r
	}
	return tokens, rate
}

// Dispatching are the queues this node dispatches, sorted; nil for none.
func (m *Manager) Dispatching() []string {
	if m == nil {
		return nil
	}
	m.queues.mu.Lock()
	var names []string
	for name := range m.queues.all {
		names = append(names, name)
	}
	m.queues.mu.Unlock()
	slices.Sort(names)
	return names
}
