package streams

import (
	"context"
	"time"

	"github.com/semaq/semaq/internal/broker/api"
)

// A queue is dispatched by one node of a cluster, the leader of its
// stream; every other node knows it as remote (docs/queues.md). Fetches,
// answers and cancels reach the dispatcher from any node by its own
// subscriptions. What a node does for a remote queue is asked of the
// dispatcher over _SQ_Q.* (dispatch/remote.go, reached through
// Deps.Remote): the admission check of a request its ingress takes, and
// the status its API reports.

// remoteQueue is queue name as this node knows it dispatched elsewhere;
// nil when it does not.
func (m *Manager) remoteQueue(name string) Remote {
	m.queues.mu.Lock()
	defer m.queues.mu.Unlock()
	return m.queues.remote[name]
}

// queueSyncRetry is how soon a dispatcher that failed to start (JetStream
// electing leaders, say) is tried again.
const queueSyncRetry = time.Second

// resync is a dispatcher's way to ask for a Sync (dispatch.Deps.Resync):
// its node no longer leads its queue's stream.
func (m *Manager) resync() {
	m.queues.mu.Lock()
	m.retryQueueSync()
	m.queues.mu.Unlock()
}

// retryQueueSync makes Sync run again soon, once, unless the node is
// stopping; the sync runs on the gate, which Close waits for. queues.mu
// is held.
func (m *Manager) retryQueueSync() {
	if m.queues.stopped || m.queues.retry != nil {
		return
	}
	m.queues.retry = time.AfterFunc(queueSyncRetry, func() {
		m.queues.mu.Lock()
		m.queues.retry = nil
		stopped := m.queues.stopped
		m.queues.mu.Unlock()
		if stopped {
			return
		}
		m.deps.Gate.Go("resync", func(ctx context.Context) {
			ctx, cancel := context.WithTimeout(ctx, api.Timeout)
			defer cancel()
			if err := m.Sync(ctx); err != nil {
				m.log.Warn("serving queues", "err", err)
			}
		})
	})
}
