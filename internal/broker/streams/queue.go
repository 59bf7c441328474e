package streams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/subjects"
	"github.com/semaq/semaq/semaq"
)

// queues are the work queues this node dispatches. A queue is a SemaQ
// stream (workqueue retention, DiscardNew at MaxMessages and about
// MaxBytes) whose metadata
// holds the queue configuration; its requests come in through the ingress
// like any message, are admitted or refused there (the Dispatcher's
// Admit), and are handed to workers by the queue's dispatcher (package
// dispatch, through Deps.Dispatch).
type queues struct {
	mu  sync.Mutex
	all map[string]Dispatcher
	// remote are the queues another node of the cluster dispatches
	// (queue_remote.go).
	remote  map[string]Remote
	retry   *time.Timer // a Sync to come (retryQueueSync)
	stopped bool
}

// queueHandlers are the $SQ.API.QUEUE.* management handlers. Fetch and
// cancel are subscribed by each dispatcher on its own node.
func (m *Manager) queueHandlers() api.Handlers {
	return api.Handlers{
		fmt.Sprintf(semaq.APIQueueCreateT, "*"): m.apiQueueCreate,
		fmt.Sprintf(semaq.APIQueueInfoT, "*"):   m.apiQueueInfo,
		fmt.Sprintf(semaq.APIQueueDeleteT, "*"): m.apiQueueDelete,
		semaq.APIQueueList:                      m.apiQueueList,
	}
}

// QueueConfigOf reads the queue configuration of a stream, if it is a queue.
func QueueConfigOf(c *jetstream.StreamConfig) (semaq.QueueConfig, bool) {
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

func (m *Manager) apiQueueCreate(msg *nats.Msg) {
	name := api.LastToken(msg.Subject)
	api.Op(m.log, "queue create", func(ctx context.Context, req *semaq.QueueConfig) (out any, err error) {
		defer m.deps.Audit(ctx, semaq.AuditOpQueueCreate, name)(&out, &err)
		if req.Name == "" {
			req.Name = name
		}
		if req.Name != name {
			return nil, semaq.NewAPIError(semaq.ErrBadRequest, "queue create: name %q in the body differs from %q in the subject", req.Name, name)
		}
		return m.createQueue(ctx, *req)
	}, api.Error("queue "+name))(msg)
}

func (m *Manager) createQueue(ctx context.Context, qc semaq.QueueConfig) (*semaq.QueueInfo, error) {
	if err := qc.Check(); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadQueue, "%v", err)
	}
	if qc.Class != "" && m.deps.ClassKnown != nil && !m.deps.ClassKnown(qc.Class) {
		return nil, semaq.NewAPIError(semaq.ErrClassNotFound, "queue %s: class %s is not defined (semaq queue class add)", qc.Name, qc.Class)
	}
	full := qc.WithDefaults()
	if qc.Replicas == 0 {
		// Queued work is SemaQ's state as much as its own streams are:
		// a node's loss loses none of it, nor its leases (the lease store
		// takes the queue's replicas).
		qc.Replicas = m.deps.Replicas()
	}
	jc, err := m.jsConfig(&semaq.StreamConfig{
		Name: qc.Name, Description: qc.Description, Subjects: qc.Subjects, Storage: full.Storage, Replicas: qc.Replicas,
		Retention: "workqueue", MaxMsgs: full.MaxMessages, MaxBytes: m.deps.QueueMaxBytes(full),
	})
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadQueue, "queue %s: %v", qc.Name, err)
	}
	// JetStream refuses what the admission check let through: the message
	// and byte limits hold whatever happens (dispatch/admission.go).
	jc.Discard = jetstream.DiscardNew
	meta, _ := json.Marshal(qc)
	jc.Metadata[semaq.MetadataQueue] = string(meta)

	m.streamsMu.Lock()
	defer m.streamsMu.Unlock()
	if _, err := m.deps.JS.Stream(ctx, qc.Name); err == nil {
		return nil, semaq.NewAPIError(semaq.ErrStreamExists, "a stream or queue named %s already exists", qc.Name)
	}
	if err := m.overlapping(ctx, "queue", qc.Name, qc.Subjects); err != nil {
		return nil, err
	}
	if err := m.checkAnswerChain(ctx, qc); err != nil {
		return nil, err
	}
	st, err := m.deps.JS.CreateStream(ctx, jc)
	if err != nil {
		return nil, api.JSError(err, "queue %s", qc.Name)
	}
	info, err := m.streamLeader(ctx, st)
	if err != nil {
		_ = m.deps.JS.DeleteStream(ctx, qc.Name)
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "queue %s: %v", qc.Name, err)
	}
	if m.isQueueLeader(info) {
		if err := m.serveQueue(ctx, qc); err != nil {
			_ = m.deps.JS.DeleteStream(ctx, qc.Name)
			return nil, semaq.NewAPIError(semaq.ErrUnavailable, "queue %s: %v", qc.Name, err)
		}
	} else {
		// Its leader's node dispatches it, once JetStream's advisory
		// reaches it.
		m.queues.mu.Lock()
		if m.queues.remote == nil {
			m.queues.remote = make(map[string]Remote)
		}
		m.queues.remote[qc.Name] = m.deps.Remote(qc.Name)
		m.publishQueues()
		m.queues.mu.Unlock()
	}
	if err := m.serveStream(qc.Name, qc.Subjects, m.durability(&jc), api.Chain{}); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "queue %s created but not served: %v", qc.Name, err)
	}
	m.log.Info("queue added", "queue", qc.Name, "subjects", qc.Subjects)
	// Served by every node's ingress, and its dispatcher started by its
	// leader's node, before the add returns (Deps.Synced).
	m.synced(ctx, false, qc.Subjects)
	for {
		qi, err := m.queueInfo(ctx, qc.Name)
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
func (m *Manager) streamLeader(ctx context.Context, st jetstream.Stream) (*jetstream.StreamInfo, error) {
	info := st.CachedInfo()
	for m.deps.Clustered && (info.Cluster == nil || info.Cluster.Leader == "") {
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

// checkAnswerChain checks the subject a queue chains its answers on
// (semaq.QueueConfig.ChainAnswers): a stream with provenance must capture
// it, and must not order its sessions by the producer's AI-Seq, which the
// broker cannot number. streamsMu is held.
func (m *Manager) checkAnswerChain(ctx context.Context, qc semaq.QueueConfig) error {
	subj := qc.ChainAnswers
	if subj == "" {
		return nil
	}
	lister := m.deps.JS.ListStreams(ctx)
	for info := range lister.Info() {
		if !IsSemaqStream(&info.Config) || !slices.ContainsFunc(publicSubjects(&info.Config), func(p string) bool { return subjects.Match(p, subj) }) {
			continue
		}
		ch := chainOf(&info.Config)
		switch {
		case ch.Provenance == "":
			return semaq.NewAPIError(semaq.ErrBadQueue, "queue %s: chain answers: stream %s captures %s but keeps no provenance (stream add --provenance session)", qc.Name, info.Config.Name, subj)
		case ch.Order == semaq.SessionOrderStrictSeq:
			return semaq.NewAPIError(semaq.ErrBadQueue, "queue %s: chain answers: stream %s orders sessions by the producer's %s, which the broker cannot number for an answer", qc.Name, info.Config.Name, semaq.HdrSeq)
		}
		return nil
	}
	if err := lister.Err(); err != nil {
		return semaq.NewAPIError(semaq.ErrUnavailable, "queue %s: chain answers: listing streams: %v", qc.Name, err)
	}
	return semaq.NewAPIError(semaq.ErrBadQueue, "queue %s: chain answers: no stream captures %s; add a stream with provenance first", qc.Name, subj)
}

// overlapping names the stream (queue or not) that already captures one of
// subjects, which JetStream would refuse with only "subjects overlap with
// an existing stream": the user needs to know which stream, and that a
// queue capturing a model's subject is one its workers can use. nil when
// none does (or the streams cannot be listed: JetStream still refuses an
// overlap). streamsMu is held.
func (m *Manager) overlapping(ctx context.Context, what, name string, subjs []string) error {
	code, lead := semaq.ErrBadQueue, ""
	if what != "queue" {
		// JetStream's own word, which stream clients already look for.
		code, lead = semaq.ErrBadStream, "subjects overlap: "
	}
	lister := m.deps.JS.ListStreams(ctx)
	for info := range lister.Info() {
		if !IsSemaqStream(&info.Config) {
			continue
		}
		kind := "stream"
		if _, ok := QueueConfigOf(&info.Config); ok {
			kind = "queue"
		}
		for _, have := range publicSubjects(&info.Config) {
			for _, subj := range subjs {
				if !subjects.Overlap(have, subj) {
					continue
				}
				if subjects.Match(have, subj) {
					return semaq.NewAPIError(code, "%s %s: %ssubject %s is already captured by %s %s (pattern %s)",
						what, name, lead, subj, kind, info.Config.Name, have)
				}
				return semaq.NewAPIError(code, "%s %s: %ssubject %s overlaps %s %s (pattern %s)",
					what, name, lead, subj, kind, info.Config.Name, have)
			}
		}
	}
	if m.deps.CheckSubjects != nil {
		if err := m.deps.CheckSubjects(subjs); err != nil {
			return semaq.NewAPIError(code, "%s %s: %v", what, name, err)
		}
	}
	return nil
}

// serveQueue starts the dispatcher of a queue unless it runs already.
// streamsMu is held.
func (m *Manager) serveQueue(ctx context.Context, qc semaq.QueueConfig) error {
	m.queues.mu.Lock()
	defer m.queues.mu.Unlock()
	if m.queues.all == nil {
		m.queues.all = make(map[string]Dispatcher)
	}
	if _, ok := m.queues.all[qc.Name]; ok || m.queues.stopped {
		return nil
	}
	d, err := m.deps.Dispatch(ctx, qc, m.resync)
	if err != nil {
		return err
	}
	m.queues.all[qc.Name] = d
	delete(m.queues.remote, qc.Name)
	m.publishQueues()
	m.log.Info("dispatching queue", "queue", qc.Name)
	return nil
}

// unserveQueue stops a queue's dispatcher. streamsMu is held.
func (m *Manager) unserveQueue(name string) {
	m.queues.mu.Lock()
	d := m.queues.all[name]
	delete(m.queues.all, name)
	m.publishQueues()
	m.queues.mu.Unlock()
	if d != nil {
		m.log.Info("no longer dispatching queue", "queue", name)
		ctx, cancel := context.WithTimeout(context.Background(), api.Timeout)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			m.log.Warn("queue dispatcher did not stop in time", "err", err)
		}
	}
}

// publishQueues gives the ingress a fresh copy of the admission table:
// this node's dispatchers and the queues dispatched elsewhere. queues.mu
// is held.
func (m *Manager) publishQueues() {
	t := make(map[string]Admitter, len(m.queues.all)+len(m.queues.remote))
	for k, v := range m.queues.remote {
		t[k] = v
	}
	local := make([]Dispatcher, 0, len(m.queues.all))
	for k, v := range m.queues.all {
		t[k] = v
		local = append(local, v)
	}
	m.local.Store(&local)
	m.deps.SetQueues(t)
}

// syncQueues runs the dispatchers of the queues in have (stream name ->
// queue config), those this node leads, and stops the others; remote are
// the queues other nodes dispatch; a queue in unknown (a stream the list
// left out: unlistedStreams) stays as it is. A dispatcher that fails to
// start is tried again soon. streamsMu is held.
func (m *Manager) syncQueues(ctx context.Context, have, remote map[string]semaq.QueueConfig, unknown map[string]bool) error {
	m.queues.mu.Lock()
	var gone []string
	for name := range m.queues.all {
		if _, ok := have[name]; !ok && !unknown[name] {
			gone = append(gone, name)
		}
	}
	was := m.queues.remote
	m.queues.remote = make(map[string]Remote, len(remote)+len(gone))
	for name := range remote {
		m.queues.remote[name] = m.deps.Remote(name)
	}
	for name := range unknown {
		if rq, ok := was[name]; ok {
			m.queues.remote[name] = rq
		}
	}
	m.queues.mu.Unlock()
	// Those no longer led here go first: the new leader's dispatcher
	// takes over their consumer.
	for _, name := range gone {
		m.unserveQueue(name)
	}
	var errs []error
	for _, qc := range have {
		if err := m.serveQueue(ctx, qc); err != nil {
			errs = append(errs, err)
		}
	}
	m.queues.mu.Lock()
	if len(errs) > 0 {
		m.retryQueueSync()
	}
	m.publishQueues()
	m.queues.mu.Unlock()
	return errors.Join(errs...)
}

// stopQueues stops every dispatcher (shutdown) and waits for them, within
// ctx.
func (m *Manager) stopQueues(ctx context.Context) error {
	m.queues.mu.Lock()
	all := m.queues.all
	m.queues.all = nil
	m.queues.stopped = true
	if m.queues.retry != nil {
		m.queues.retry.Stop()
		m.queues.retry = nil
	}
	m.queues.mu.Unlock()
	var errs []error
	for _, d := range all {
		errs = append(errs, d.Close(ctx))
	}
	return errors.Join(errs...)
}

// dispatchers is every dispatcher of this node, in no order. Callers take
// each one's lock alone, never with queues.mu.
func (m *Manager) dispatchers() []Dispatcher {
	if m == nil {
		return nil
	}
	m.queues.mu.Lock()
	defer m.queues.mu.Unlock()
	ds := make([]Dispatcher, 0, len(m.queues.all))
	for _, d := range m.queues.all {
		ds = append(ds, d)
	}
	return ds
}

// Dispatcher returns the dispatcher of queue name on this node, nil when
// the node does not dispatch it.
func (m *Manager) Dispatcher(name string) Dispatcher {
	if m == nil {
		return nil
	}
	m.queues.mu.Lock()
	defer m.queues.mu.Unlock()
	return m.queues.all[name]
}

func (m *Manager) queueInfo(ctx context.Context, name string) (*semaq.QueueInfo, error) {
	d := m.Dispatcher(name)
	if d == nil {
		if rq := m.remoteQueue(name); rq != nil {
			return rq.Info(ctx)
		}
		return nil, semaq.NewAPIError(semaq.ErrQueueNotFound, "queue %s not found", name)
	}
	return &semaq.QueueInfo{Config: d.Config(), Status: d.Status(time.Now())}, nil
}

func (m *Manager) apiQueueInfo(msg *nats.Msg) {
	name := api.LastToken(msg.Subject)
	api.Op(m.log, "queue info", func(ctx context.Context, _ *struct{}) (any, error) {
		return m.queueInfo(ctx, name)
	}, api.Error("queue "+name))(msg)
}

func (m *Manager) apiQueueList(msg *nats.Msg) {
	api.Op(m.log, "queue list", func(ctx context.Context, _ *struct{}) (any, error) {
		m.queues.mu.Lock()
		names := make([]string, 0, len(m.queues.all)+len(m.queues.remote))
		for n := range m.queues.all {
			names = append(names, n)
		}
		for n := range m.queues.remote {
			names = append(names, n)
		}
		m.queues.mu.Unlock()
		slices.Sort(names)
		names = slices.Compact(names)
		out := semaq.QueueListResponse{Queues: []semaq.QueueInfo{}}
		for _, n := range names {
			if qi, err := m.queueInfo(ctx, n); err == nil {
				out.Queues = append(out.Queues, *qi)
			}
		}
		return out, nil
	}, api.Error("queue list"))(msg)
}

func (m *Manager) apiQueueDelete(msg *nats.Msg) {
	name := api.LastToken(msg.Subject)
	api.Op(m.log, "queue delete", func(ctx context.Context, _ *struct{}) (out any, err error) {
		defer m.deps.Audit(ctx, semaq.AuditOpQueueDelete, name)(&out, &err)
		m.streamsMu.Lock()
		defer m.streamsMu.Unlock()
		st, err := m.deps.JS.Stream(ctx, name)
		if err != nil {
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				return nil, semaq.NewAPIError(semaq.ErrQueueNotFound, "queue %s not found", name)
			}
			return nil, err
		}
		if _, ok := QueueConfigOf(&st.CachedInfo().Config); !ok {
			return nil, semaq.NewAPIError(semaq.ErrQueueNotFound, "%s is a stream, not a queue; use stream rm", name)
		}
		m.deps.Ingress.Remove(name)
		m.unserveQueue(name)
		if err := m.deps.JS.DeleteStream(ctx, name); err != nil {
			return nil, err
		}
		if err := m.deps.DeleteLeases(ctx, name); err != nil {
			m.log.Warn("queue removed; its lease store stays", "queue", name, "err", err)
		}
		m.log.Info("queue removed", "queue", name)
		return semaq.QueueDeleteResponse{Deleted: true}, nil
	}, api.Error("queue "+name))(msg)
}

// RestartDispatcher stops queue's dispatcher and starts it anew, as a
// change of the queue stream's leader does: nothing of the old
// dispatcher's memory survives (tests). false when the node does not
// dispatch queue.
func (m *Manager) RestartDispatcher(ctx context.Context, queue string) (bool, error) {
	m.streamsMu.Lock()
	defer m.streamsMu.Unlock()
	d := m.Dispatcher(queue)
	if d == nil {
		return false, nil
	}
	cfg := d.Config()
	m.unserveQueue(queue)
	return true, m.serveQueue(ctx, cfg)
}
