package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/clustersync"
	"github.com/semaq/semaq/internal/broker/dispatch"
	"github.com/semaq/semaq/internal/broker/ingress"
	"github.com/semaq/semaq/semaq"
)

// queues are the work queues this node dispatches. A queue is a SemaQ
// stream (workqueue retention, DiscardNew at MaxMessages and about
// MaxBytes) whose metadata
// holds the queue configuration; its requests come in through the ingress
// like any message, are admitted or refused there (dispatch.Dispatcher
// Admit), and are handed to workers by the queue's dispatcher (package
// dispatch).
type queues struct {
	mu  sync.Mutex
	all map[string]*dispatch.Dispatcher
	// remote are the queues another node of the cluster dispatches
	// (queue_cluster.go).
	remote  map[string]*remoteQueue
	retry   *time.Timer // a syncStreams to come (retryQueueSync)
	stopped bool
}

// dispatching are the queues this node dispatches (the cluster status's
// node report).
func (q *queues) dispatching() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := make([]string, 0, len(q.all))
	for name := range q.all {
		out = append(out, name)
	}
	return out
}

// queueHandlers are the $SQ.API.QUEUE.* management handlers. Fetch and
// cancel are subscribed by each dispatcher on its own node.
func (s *Server) queueHandlers() map[string]nats.MsgHandler {
	return map[string]nats.MsgHandler{
		fmt.Sprintf(semaq.APIQueueCreateT, "*"): s.apiQueueCreate,
		fmt.Sprintf(semaq.APIQueueInfoT, "*"):   s.apiQueueInfo,
		fmt.Sprintf(semaq.APIQueueDeleteT, "*"): s.apiQueueDelete,
		semaq.APIQueueList:                      s.apiQueueList,
	}
}

// queueConfigOf reads the queue configuration of a stream, if it is a queue.
func queueConfigOf(c *jetstream.StreamConfig) (semaq.QueueConfig, bool) {
	raw := c.Metadata[semaq.MetadataQueue]
	if raw == "" {
		return semaq.QueueConfig{}, false
	}
	var qc semaq.QueueConfig
	if err := json.Unmarshal([]byte(raw), &qc); err != nil {
		return semaq.QueueConfig{}, false
	}
	qc.Name = c.Name
	return qc, true
}

func (s *Server) apiQueueCreate(m *nats.Msg) {
	name := api.LastToken(m.Subject)
	api.Op(s.log, "queue create", func(ctx context.Context, req *semaq.QueueConfig) (out any, err error) {
		defer s.audit(ctx, semaq.AuditOpQueueCreate, name)(&out, &err)
		if req.Name == "" {
			req.Name = name
		}
		if req.Name != name {
			return nil, semaq.NewAPIError(semaq.ErrBadRequest, "queue create: name %q in the body differs from %q in the subject", req.Name, name)
		}
		return s.createQueue(ctx, *req)
	}, api.Error("queue "+name))(m)
}

func (s *Server) createQueue(ctx context.Context, qc semaq.QueueConfig) (*semaq.QueueInfo, error) {
	if err := qc.Check(); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadQueue, "%v", err)
	}
	full := qc.WithDefaults()
	if qc.Replicas == 0 {
		// Queued work is SemaQ's state as much as its own streams are:
		// a node's loss loses none of it, nor its leases (the lease store
		// takes the queue's replicas).
		qc.Replicas = s.ownReplicas()
	}
	jc, err := s.jsConfig(&semaq.StreamConfig{
		Name: qc.Name, Description: qc.Description, Subjects: qc.Subjects, Storage: full.Storage, Replicas: qc.Replicas,
		Retention: "workqueue", MaxMsgs: full.MaxMessages, MaxBytes: dispatch.StreamMaxBytes(full, s.nc.MaxPayload()),
	})
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadQueue, "queue %s: %v", qc.Name, err)
	}
	// JetStream refuses what the admission check let through: the message
	// and byte limits hold whatever happens (dispatch/admission.go).
	jc.Discard = jetstream.DiscardNew
	meta, _ := json.Marshal(qc)
	jc.Metadata[semaq.MetadataQueue] = string(meta)

	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	if _, err := s.js.Stream(ctx, qc.Name); err == nil {
		return nil, semaq.NewAPIError(semaq.ErrStreamExists, "a stream or queue named %s already exists", qc.Name)
	}
	if err := s.overlapping(ctx, "queue", qc.Name, qc.Subjects); err != nil {
		return nil, err
	}
	st, err := s.js.CreateStream(ctx, jc)
	if err != nil {
		return nil, api.JSError(err, "queue %s", qc.Name)
	}
	info, err := s.streamLeader(ctx, st)
	if err != nil {
		_ = s.js.DeleteStream(ctx, qc.Name)
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "queue %s: %v", qc.Name, err)
	}
	if s.isQueueLeader(info) {
		if err := s.serveQueue(ctx, qc); err != nil {
			_ = s.js.DeleteStream(ctx, qc.Name)
			return nil, semaq.NewAPIError(semaq.ErrUnavailable, "queue %s: %v", qc.Name, err)
		}
	} else {
		// Its leader's node dispatches it, once JetStream's advisory
		// reaches it.
		s.queues.mu.Lock()
		if s.queues.remote == nil {
			s.queues.remote = make(map[string]*remoteQueue)
		}
		s.queues.remote[qc.Name] = &remoteQueue{name: qc.Name, nc: s.nc, log: s.log.Debug}
		s.publishQueues()
		s.queues.mu.Unlock()
	}
	if err := s.serveStream(qc.Name, qc.Subjects, s.durability(&jc)); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "queue %s created but not served: %v", qc.Name, err)
	}
	s.log.Info("queue added", "queue", qc.Name, "subjects", qc.Subjects)
	// Served by every node's ingress, and its dispatcher started by its
	// leader's node, before the add returns (clustersync).
	s.syncer.Sync(ctx, clustersync.Request{Streams: true, Subjects: qc.Subjects})
	for {
		qi, err := s.queueInfo(ctx, qc.Name)
		if err == nil || !errors.Is(err, semaq.ErrUnavailable) || ctx.Err() != nil {
			return qi, err
		}
		select { // the leader's dispatcher is starting
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// streamLeader is the info of a stream just made once it has a leader: in
// a cluster JetStream elects one after the create returns.
func (s *Server) streamLeader(ctx context.Context, st jetstream.Stream) (*jetstream.StreamInfo, error) {
	info := st.CachedInfo()
	for s.cfg.Clustered() && (info.Cluster == nil || info.Cluster.Leader == "") {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no leader elected: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
		var err error
		if info, err = st.Info(ctx); err != nil {
			return nil, err
		}
	}
	return info, nil
}

// overlapping names the stream (queue or not) that already captures one of
// subjects, which JetStream would refuse with only "subjects overlap with
// an existing stream": the user needs to know which stream, and that a
// queue capturing a model's subject is one its workers can use. nil when
// none does (or the streams cannot be listed: JetStream still refuses an
// overlap). streamsMu is held.
func (s *Server) overlapping(ctx context.Context, what, name string, subjects []string) error {
	code, lead := semaq.ErrBadQueue, ""
	if what != "queue" {
		// JetStream's own word, which stream clients already look for.
		code, lead = semaq.ErrBadStream, "subjects overlap: "
	}
	lister := s.js.ListStreams(ctx)
	for info := range lister.Info() {
		if !isSemaqStream(&info.Config) {
			continue
		}
		kind := "stream"
		if _, ok := queueConfigOf(&info.Config); ok {
			kind = "queue"
		}
		for _, have := range publicSubjects(&info.Config) {
			for _, subj := range subjects {
				if !subjectsOverlap(have, subj) {
					continue
				}
				if subjectMatches(have, subj) {
					return semaq.NewAPIError(code, "%s %s: %ssubject %s is already captured by %s %s (pattern %s)",
						what, name, lead, subj, kind, info.Config.Name, have)
				}
				return semaq.NewAPIError(code, "%s %s: %ssubject %s overlaps %s %s (pattern %s)",
					what, name, lead, subj, kind, info.Config.Name, have)
			}
		}
	}
	if s.tenancy != nil {
		if err := s.tenancy.checkStreamSubjects(subjects); err != nil {
			return semaq.NewAPIError(code, "%s %s: %v", what, name, err)
		}
	}
	return nil
}

// serveQueue starts the dispatcher of a queue unless it runs already.
// streamsMu is held.
func (s *Server) serveQueue(ctx context.Context, qc semaq.QueueConfig) error {
	s.queues.mu.Lock()
	defer s.queues.mu.Unlock()
	if s.queues.all == nil {
		s.queues.all = make(map[string]*dispatch.Dispatcher)
	}
	if _, ok := s.queues.all[qc.Name]; ok || s.queues.stopped {
		return nil
	}
	d, err := dispatch.Start(ctx, qc, s.dispatchDeps())
	if err != nil {
		return err
	}
	s.queues.all[qc.Name] = d
	delete(s.queues.remote, qc.Name)
	s.publishQueues()
	s.log.Info("dispatching queue", "queue", qc.Name)
	return nil
}

// unserveQueue stops a queue's dispatcher. streamsMu is held.
func (s *Server) unserveQueue(name string) {
	s.queues.mu.Lock()
	d := s.queues.all[name]
	delete(s.queues.all, name)
	s.publishQueues()
	s.queues.mu.Unlock()
	if d != nil {
		s.log.Info("no longer dispatching queue", "queue", name)
		ctx, cancel := context.WithTimeout(context.Background(), api.Timeout)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			s.log.Warn("queue dispatcher did not stop in time", "err", err)
		}
	}
}

// publishQueues gives the ingress a fresh copy of the admission table:
// this node's dispatchers and the queues dispatched elsewhere. queues.mu
// is held.
func (s *Server) publishQueues() {
	m := make(map[string]ingress.Admitter, len(s.queues.all)+len(s.queues.remote))
	for k, v := range s.queues.remote {
		m[k] = v
	}
	for k, v := range s.queues.all {
		m[k] = v
	}
	s.ingress.SetQueues(m)
}

// syncQueues runs the dispatchers of the queues in have (stream name ->
// queue config), those this node leads, and stops the others; remote are
// the queues other nodes dispatch; a queue in unknown (a stream the list
// left out: unlistedStreams) stays as it is. A dispatcher that fails to
// start is tried again soon. streamsMu is held.
func (s *Server) syncQueues(ctx context.Context, have, remote map[string]semaq.QueueConfig, unknown map[string]bool) error {
	s.queues.mu.Lock()
	var gone []string
	for name := range s.queues.all {
		if _, ok := have[name]; !ok && !unknown[name] {
			gone = append(gone, name)
		}
	}
	was := s.queues.remote
	s.queues.remote = make(map[string]*remoteQueue, len(remote)+len(gone))
	for name := range remote {
		s.queues.remote[name] = &remoteQueue{name: name, nc: s.nc, log: s.log.Debug}
	}
	for name := range unknown {
		if rq, ok := was[name]; ok {
			s.queues.remote[name] = rq
		}
	}
	s.queues.mu.Unlock()
	// Those no longer led here go first: the new leader's dispatcher
	// takes over their consumer.
	for _, name := range gone {
		s.unserveQueue(name)
	}
	var errs []error
	for _, qc := range have {
		if err := s.serveQueue(ctx, qc); err != nil {
			errs = append(errs, err)
		}
	}
	s.queues.mu.Lock()
	if len(errs) > 0 {
		s.retryQueueSync()
	}
	s.publishQueues()
	s.queues.mu.Unlock()
	return errors.Join(errs...)
}

// stopQueues stops every dispatcher (shutdown) and waits for them, within
// ctx.
func (s *Server) stopQueues(ctx context.Context) error {
	s.queues.mu.Lock()
	all := s.queues.all
	s.queues.all = nil
	s.queues.stopped = true
	if s.queues.retry != nil {
		s.queues.retry.Stop()
		s.queues.retry = nil
	}
	s.queues.mu.Unlock()
	var errs []error
	for _, d := range all {
		errs = append(errs, d.Close(ctx))
	}
	return errors.Join(errs...)
}

// dispatchers is every dispatcher of this node, in no order. Callers take
// each one's lock alone, never with queues.mu.
func (s *Server) dispatchers() []*dispatch.Dispatcher {
	s.queues.mu.Lock()
	defer s.queues.mu.Unlock()
	ds := make([]*dispatch.Dispatcher, 0, len(s.queues.all))
	for _, d := range s.queues.all {
		ds = append(ds, d)
	}
	return ds
}

// dispatcherOf returns the dispatcher of queue name on this node.
func (s *Server) dispatcherOf(name string) *dispatch.Dispatcher {
	s.queues.mu.Lock()
	defer s.queues.mu.Unlock()
	return s.queues.all[name]
}

func (s *Server) queueInfo(ctx context.Context, name string) (*semaq.QueueInfo, error) {
	d := s.dispatcherOf(name)
	if d == nil {
		if s.remoteQueueNamed(name) {
			return s.remoteQueueInfo(ctx, name)
		}
		return nil, semaq.NewAPIError(semaq.ErrQueueNotFound, "queue %s not found", name)
	}
	return &semaq.QueueInfo{Config: d.Config(), Status: d.Status(time.Now())}, nil
}

func (s *Server) apiQueueInfo(m *nats.Msg) {
	name := api.LastToken(m.Subject)
	api.Op(s.log, "queue info", func(ctx context.Context, _ *struct{}) (any, error) {
		return s.queueInfo(ctx, name)
	}, api.Error("queue "+name))(m)
}

func (s *Server) apiQueueList(m *nats.Msg) {
	api.Op(s.log, "queue list", func(ctx context.Context, _ *struct{}) (any, error) {
		s.queues.mu.Lock()
		names := make([]string, 0, len(s.queues.all)+len(s.queues.remote))
		for n := range s.queues.all {
			names = append(names, n)
		}
		for n := range s.queues.remote {
			names = append(names, n)
		}
		s.queues.mu.Unlock()
		slices.Sort(names)
		names = slices.Compact(names)
		out := semaq.QueueListResponse{Queues: []semaq.QueueInfo{}}
		for _, n := range names {
			if qi, err := s.queueInfo(ctx, n); err == nil {
				out.Queues = append(out.Queues, *qi)
			}
		}
		return out, nil
	}, api.Error("queue list"))(m)
}

func (s *Server) apiQueueDelete(m *nats.Msg) {
	name := api.LastToken(m.Subject)
	api.Op(s.log, "queue delete", func(ctx context.Context, _ *struct{}) (out any, err error) {
		defer s.audit(ctx, semaq.AuditOpQueueDelete, name)(&out, &err)
		s.streamsMu.Lock()
		defer s.streamsMu.Unlock()
		st, err := s.js.Stream(ctx, name)
		if err != nil {
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return nil, semaq.NewAPIError(semaq.ErrQueueNotFound, "queue %s not found", name)
			}
			return nil, err
		}
		if _, ok := queueConfigOf(&st.CachedInfo().Config); !ok {
			return nil, semaq.NewAPIError(semaq.ErrQueueNotFound, "%s is a stream, not a queue; use stream rm", name)
		}
		s.ingress.Remove(name)
		s.unserveQueue(name)
		if err := s.js.DeleteStream(ctx, name); err != nil {
			return nil, err
		}
		if err := dispatch.DeleteLeases(ctx, s.js, name); err != nil {
			s.log.Warn("queue removed; its lease store stays", "queue", name, "err", err)
		}
		s.log.Info("queue removed", "queue", name)
		return semaq.QueueDeleteResponse{Deleted: true}, nil
	}, api.Error("queue "+name))(m)
}

// isQueueLeader reports whether this node should dispatch a queue: the
// leader of its stream in a cluster, always on a single node. While a
// cluster elects the stream's leader, a node keeps doing what it did:
// starting dispatchers on a view without a leader would run several.
func (s *Server) isQueueLeader(info *jetstream.StreamInfo) bool {
	if !s.cfg.Clustered() {
		return true
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return s.dispatcherOf(info.Config.Name) != nil
	}
	return strings.EqualFold(info.Cluster.Leader, s.ns.Name())
}
