package broker

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/dispatch"
	"github.com/semaq/semaq/semaq"
)

// A queue is dispatched by one node of a cluster, the leader of its
// stream; every other node knows it as remote (docs/queues.md). Fetches,
// answers and cancels reach the dispatcher from any node by its own
// subscriptions. What a node does for a remote queue is asked of the
// dispatcher over _SQ_Q.* (dispatch/remote.go): the admission check of a
// request its ingress takes, and the status its API reports.

// remoteAdmitTimeout bounds an admission check asked of another node.
const remoteAdmitTimeout = 2 * time.Second

// remoteQueue is a queue dispatched by another node.
type remoteQueue struct {
	name string
	nc   *nats.Conn // the node's internal connection
	log  func(msg string, args ...any)
}

// Admit asks the queue's dispatcher. With no dispatcher answering (the
// queue's stream is electing a leader, or its dispatcher is starting) the
// request is admitted: JetStream's limits on the stream hold whatever
// admission says (dispatch/admission.go).
func (r *remoteQueue) Admit(env *semaq.Envelope, dataLen int) *semaq.APIError {
	body, _ := json.Marshal(dispatch.RemoteAdmit{Tokens: int64(env.PromptTokens), DataLen: dataLen})
	m, err := r.nc.Request(dispatch.AdmitSubject(r.name), body, remoteAdmitTimeout)
	if err != nil {
		r.log("admission check not answered; admitted (the stream's limits still hold)", "queue", r.name, "err", err)
		return nil
	}
	if len(m.Data) == 0 {
		return nil
	}
	var rep semaq.ErrorReply
	if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Error == nil {
		r.log("admission check answered with something else; admitted", "queue", r.name, "reply", string(m.Data))
		return nil
	}
	return rep.Error
}

// remoteQueueInfo asks the node dispatching queue name for its info. A
// queue whose dispatcher does not answer (its stream is electing a
// leader) is unavailable, not missing.
func (s *Server) remoteQueueInfo(ctx context.Context, name string) (*semaq.QueueInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, api.Timeout)
	defer cancel()
	m, err := s.nc.RequestWithContext(ctx, dispatch.InfoSubject(name), nil)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			return nil, semaq.NewAPIError(semaq.ErrUnavailable, "queue %s has no dispatcher answering right now (its stream is electing a leader?); ask again", name)
		}
		return nil, err
	}
	var qi semaq.QueueInfo
	if err := json.Unmarshal(m.Data, &qi); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "queue %s: its dispatcher answered %q", name, m.Data)
	}
	return &qi, nil
}

// remoteQueueNamed reports whether this node knows queue name as
// dispatched elsewhere.
func (s *Server) remoteQueueNamed(name string) bool {
	s.queues.mu.Lock()
	defer s.queues.mu.Unlock()
	_, ok := s.queues.remote[name]
	return ok
}

// queueSyncRetry is how soon a dispatcher that failed to start (JetStream
// electing leaders, say) is tried again.
const queueSyncRetry = time.Second

// retryQueueSync makes syncStreams run again soon, once, unless the node
// is stopping. queues.mu is held.
func (s *Server) retryQueueSync() {
	if s.queues.stopped || s.queues.retry != nil {
		return
	}
	s.queues.retry = time.AfterFunc(queueSyncRetry, func() {
		s.queues.mu.Lock()
		s.queues.retry = nil
		stopped := s.queues.stopped
		s.queues.mu.Unlock()
		if stopped {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), api.Timeout)
		defer cancel()
		if err := s.syncStreams(ctx); err != nil {
			s.log.Warn("serving queues", "err", err)
		}
	})
}
