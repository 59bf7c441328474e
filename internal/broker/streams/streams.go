// Package streams is a node's streams and work queues: the stream and queue
// management API ($SQ.API.STREAM.*, $SQ.API.INFO, $SQ.API.QUEUE.* but the
// fetch and cancel each dispatcher serves itself), the ingress serving
// exactly the SemaQ streams JetStream has, and one dispatcher per work
// queue on the node that leads the queue's stream.
//
// A SemaQ stream is a JetStream stream with SemaQ's metadata
// (reserved.MetadataVersion): its subjects are stored under the reserved
// storage prefix and published under their public names, which the
// ingress serves (stream.go). A work queue is such a stream with
// workqueue retention whose metadata holds the queue's configuration
// (queue.go); its dispatcher is package dispatch's, which this package
// does not import: the node hands it in as Deps.Dispatch, and this
// package sees it through the Dispatcher interface. Queues another node
// dispatches are known as remote (queue_remote.go): the ingress asks their
// dispatcher for admission, the API for their info.
//
// Streams changed through another node (or restored from disk) reach this
// one through JetStream's stream advisories: each makes the node sync its
// ingress and its dispatchers with what JetStream has (Sync). Stream
// create, delete and the sync are serialised by one lock (streamsMu), so
// a sync that listed the streams just before a create cannot remove the
// new stream from the ingress after the create added it.
//
// Open syncs once and follows the advisories; Close unsubscribes them,
// stops every dispatcher and waits for the syncs it started.
package streams

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/dispatch/sched"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/internal/registry"
	"github.com/semaq/semaq/semaq"
)

// Deps is what the streams and work queues need of the node. Funcs are
// called from API handlers, the advisory handler and syncs, concurrently;
// none is called with a lock of a dispatcher held.
type Deps struct {
	// Log gets streams and queues added, removed and dispatched, and the
	// syncs that failed. Nil logs nothing.
	Log *slog.Logger
	// JS creates, lists and deletes the streams: the internal
	// connection's JetStream. Required.
	JS jetstream.JetStream
	// Conn follows JetStream's stream advisories: the internal
	// connection. Required.
	Conn *nats.Conn
	// Gate starts the syncs a dispatcher that failed to start asks for
	// (retryQueueSync); Close closes it. Required.
	Gate *subsystem.Gate
	// Ingress is the node's write path, which serves the streams. Called
	// with streamsMu held, never with the queues' lock. Required.
	Ingress Ingress
	// SetQueues gives the ingress a fresh admission table: a queue's name
	// to this node's dispatcher or to the node dispatching it. Called
	// with the queues' lock held: it must not block. Required.
	SetQueues func(map[string]Admitter)
	// Registry is the schema registry: a stream's schema binding, made
	// with it and removed with it. Nil: streams have no schemas.
	Registry *registry.Registry
	// Audit records each stream and queue created or deleted
	// (docs/security.md, Audit). Nil records nothing.
	Audit api.AuditFunc
	// Metrics reads the queued requests of every dispatcher at each
	// scrape (QueueStats). Nil: not reported.
	Metrics *metrics.Metrics
	// Synced is called after a stream or queue is created and served
	// here, before the create is answered: in a cluster the node waits
	// there for every other node to serve it too (subjects: its public
	// patterns; schemas: it was bound to a schema). Called with streamsMu
	// held. Nil: nothing to wait for.
	Synced func(ctx context.Context, schemas bool, subjects []string)
	// RouteSubjects makes publishes on a stream's public subjects reach
	// the ingress from every user account (with auth on), before the
	// ingress serves them; CheckSubjects says whether they can be, before
	// the stream is made. Called with streamsMu held. Nil: nothing to
	// route.
	RouteSubjects, CheckSubjects func(subjects []string) error
	// Principal is who sent a request with headers h, for INFO. Required.
	Principal func(h nats.Header) api.Principal
	// Self is what the node says of itself in INFO: version, name, its
	// NATS URL and HTTP address, sync mode, JetStream; who asked is filled
	// in here. Required.
	Self func() semaq.ServerInfo
	// Node is this node's name, as JetStream names stream leaders.
	Node string
	// Clustered says the node is one of a cluster: a queue is dispatched
	// by the node that leads its stream, and the durability of a stream
	// is the nodes' --sync (Sync).
	Clustered bool
	// Sync is the node's --sync, "always" or "interval": what a stream's
	// info reports as its sync on a cluster.
	Sync string
	// Replicas is the replicas of the node's own streams now: a queue
	// created without replicas takes them. Required.
	Replicas func() int
	// DefaultDurability is the durability of a stream created without
	// one (DurabilityFsync or DurabilityInterval).
	DefaultDurability string
	// CheckDurability refuses a durability the node cannot give (on a
	// cluster, one its --sync does not; "" is the default). Nil: any.
	CheckDurability func(durability string) error
	// DefaultMaxBytes is stream_max_bytes, the max_bytes of a stream
	// created without one: 0 for DefaultStreamMaxBytes (file) or
	// DefaultStreamMaxBytesMemory (memory), -1 for none.
	DefaultMaxBytes int64
	// Dispatch starts the dispatcher of queue qc on this node (package
	// dispatch). resync asks this package to check which queues the node
	// should dispatch: the dispatcher calls it when it finds its node no
	// longer leads the queue's stream. Called with streamsMu and the
	// queues' lock held. Required.
	Dispatch func(ctx context.Context, qc semaq.QueueConfig, resync func()) (Dispatcher, error)
	// Remote is queue, dispatched by another node, as this one reaches its
	// dispatcher (dispatch.Remote). Called with the queues' lock held: it
	// must not block. Required.
	Remote func(queue string) Remote
	// DeleteLeases removes a deleted queue's lease store
	// (dispatch.DeleteLeases). Required.
	DeleteLeases func(ctx context.Context, queue string) error
	// QueueMaxBytes is the byte limit of queue qc's stream, JetStream's
	// backstop behind admission (dispatch.StreamMaxBytes). Required.
	QueueMaxBytes func(qc semaq.QueueConfig) int64
	// ClassKnown reports whether a hardware class is defined: a queue
	// made with a class names one that is. Nil: any name.
	ClassKnown func(class string) bool
}

// Ingress is the node's write path as this package drives it (package
// ingress). Its methods are safe for concurrent use.
type Ingress interface {
	// Serve makes the ingress serve stream name on its public subjects,
	// fsync or not, chaining its sessions or not, and returns once a
	// publish there is taken.
	Serve(name string, subjects []string, fsync bool, chain api.Chain) error
	// Remove stops serving stream name.
	Remove(name string)
	// Names are the streams served.
	Names() []string
	// CommitStats are the group-commit figures of an fsync stream
	// committed here; nil otherwise.
	CommitStats(name string) *semaq.CommitStats
}

// Admitter is the admission control of one work queue, which the ingress
// asks on its hot path: this node's dispatcher, or the node dispatching
// the queue.
type Admitter interface {
	Admit(env *semaq.Envelope, dataLen int) *semaq.APIError
}

// Dispatcher is the dispatcher of one work queue on this node
// (dispatch.Dispatcher). Each method takes the dispatcher's own lock
// alone: none is called with the queues' lock held but Admit's caller's.
type Dispatcher interface {
	Admitter
	// Config is the queue's configuration.
	Config() semaq.QueueConfig
	// Status is the queue's state at now, for its info.
	Status(now time.Time) semaq.QueueStatus
	// Each calls fn on every request the dispatcher indexes.
	Each(fn func(j *sched.Job))
	// Holds reports whether the queue holds a request whose Nats-Msg-Id
	// is id, and its tenant.
	Holds(id string) (tenant string, ok bool)
	// TenantQueued is tenant's prompt tokens waiting in the queue and its
	// workers' token rate.
	TenantQueued(tenant string) (tokens int64, rate float64)
	// Close stops the dispatcher and waits for its goroutines, within
	// ctx. Queued requests stay in the stream.
	Close(ctx context.Context) error
}

// Remote is a queue another node dispatches, as this one reaches it.
type Remote interface {
	Admitter
	// Info asks the dispatching node for the queue's info.
	Info(ctx context.Context) (*semaq.QueueInfo, error)
}

// Manager is a node's streams and work queues. Its methods are safe for
// concurrent use, and those that read the queues (QueuedJob, TenantQueued,
// Dispatching, QueueStats) on a nil Manager too: they find none.
type Manager struct {
	deps Deps
	log  *slog.Logger

	// streamsMu serialises stream create, delete and the resync that
	// follows JetStream's stream advisories.
	streamsMu sync.Mutex
	queues    queues // the work queues' dispatchers (queue.go)
	// local are this node's dispatchers as last given to the ingress, read
	// without a lock (TenantQueued).
	local atomic.Pointer[[]Dispatcher]

	sub          *nats.Subscription // the stream advisories
	removeSource func()             // the queues' scrape source
}

// Open serves the streams on the ingress, the work queues on their
// dispatchers; it follows JetStream's stream advisories, so streams
// changed through another node (or restored from disk) are served by this
// node's ingress too. The first sync waits for every stream's leader: in a
// cluster some may be electing one (this node started again right after a
// crash). ctx bounds the opening only.
func Open(ctx context.Context, deps Deps) (*Manager, error) {
	if err := deps.check(); err != nil {
		return nil, err
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Audit == nil {
		deps.Audit = api.NoAudit
	}
	m := &Manager{deps: deps, log: deps.Log}
	closeQueues := func() { // what a failed first sync started
		ctx, cancel := context.WithTimeout(context.Background(), api.Timeout)
		defer cancel()
		_ = m.stopQueues(ctx)
		_ = deps.Gate.Close(ctx)
	}
	if err := jsutil.Retry(ctx, m.Sync); err != nil {
		closeQueues()
		return nil, err
	}
	sub, err := deps.Conn.Subscribe("$JS.EVENT.ADVISORY.STREAM.*.*", func(msg *nats.Msg) {
		ctx, cancel := context.WithTimeout(context.Background(), api.Timeout)
		defer cancel()
		if err := m.Sync(ctx); err != nil {
			m.log.Warn("refreshing streams after advisory", "subject", msg.Subject, "err", err)
		}
	})
	if err == nil {
		err = deps.Conn.Flush()
	}
	if err != nil {
		if sub != nil {
			_ = sub.Unsubscribe()
		}
		closeQueues()
		return nil, fmt.Errorf("broker: advisories: %w", err)
	}
	m.sub = sub
	m.removeSource = deps.Metrics.AddQueueSource(m)
	return m, nil
}

func (d *Deps) check() error {
	var errs []error
	for _, req := range []struct {
		name string
		nil  bool
	}{
		{"JS", d.JS == nil}, {"Conn", d.Conn == nil}, {"Gate", d.Gate == nil}, {"Ingress", d.Ingress == nil},
		{"SetQueues", d.SetQueues == nil}, {"Principal", d.Principal == nil}, {"Self", d.Self == nil},
		{"Replicas", d.Replicas == nil}, {"Dispatch", d.Dispatch == nil}, {"Remote", d.Remote == nil},
		{"DeleteLeases", d.DeleteLeases == nil}, {"QueueMaxBytes", d.QueueMaxBytes == nil},
	} {
		if req.nil {
			errs = append(errs, fmt.Errorf("streams: Deps.%s is required", req.name))
		}
	}
	return errors.Join(errs...)
}

// Handlers are the stream and queue management API. Fetch and cancel are
// subscribed by each dispatcher on its own node.
func (m *Manager) Handlers() api.Handlers {
	return api.Handlers{
		fmt.Sprintf(semaq.APIStreamCreateT, "*"): api.NamedOp(m.log, "stream create", m.apiCreate, nil),
		fmt.Sprintf(semaq.APIStreamInfoT, "*"):   api.NamedOp(m.log, "stream info", m.apiInfo, nil),
		fmt.Sprintf(semaq.APIStreamDeleteT, "*"): api.NamedOp(m.log, "stream delete", m.apiDelete, nil),
		semaq.APIStreamList:                      api.Op(m.log, "stream list", m.apiList, nil),
		semaq.APIStreamLookup:                    api.Op(m.log, "stream lookup", m.apiLookup, nil),
		semaq.APIInfo:                            api.Op(m.log, "server info", m.apiServerInfo, nil),
	}.Merge(m.queueHandlers())
}

// Close unsubscribes the advisories, stops every dispatcher and waits for
// them and for a sync in flight, within ctx. The ingress keeps serving
// the streams.
func (m *Manager) Close(ctx context.Context) error {
	_ = m.sub.Unsubscribe()
	m.removeSource()
	return errors.Join(m.stopQueues(ctx), m.deps.Gate.Close(ctx))
}

// Sync makes the ingress serve exactly the SemaQ streams JetStream has, and
// this node dispatch the queues whose stream it leads. It holds streamsMu,
// like stream create and delete: a sync that listed the streams just
// before a create must not remove the new stream's ingress after the
// create added it.
func (m *Manager) Sync(ctx context.Context) error {
	m.streamsMu.Lock()
	defer m.streamsMu.Unlock()
	have := make(map[string]bool)
	queued := make(map[string]semaq.QueueConfig)
	remote := make(map[string]semaq.QueueConfig) // queues another node dispatches
	lister := m.deps.JS.ListStreams(ctx)
	for info := range lister.Info() {
		if !IsSemaqStream(&info.Config) {
			continue
		}
		have[info.Config.Name] = true
		m.allowBatches(ctx, info.Config)
		if qc, ok := QueueConfigOf(&info.Config); ok && m.isQueueLeader(info) {
			queued[info.Config.Name] = qc
		} else if ok {
			remote[info.Config.Name] = qc
		}
		if err := m.serveStream(info.Config.Name, publicSubjects(&info.Config), m.durability(&info.Config), chainOf(&info.Config)); err != nil {
			return err
		}
	}
	if err := lister.Err(); err != nil {
		return fmt.Errorf("broker: listing streams: %w", err)
	}
	unknown, err := m.unlistedStreams(ctx, have)
	if err != nil {
		return fmt.Errorf("broker: listing stream names: %w", err)
	}
	for _, name := range m.deps.Ingress.Names() {
		if !have[name] && !unknown[name] {
			m.deps.Ingress.Remove(name)
		}
	}
	return m.syncQueues(ctx, queued, remote, unknown)
}

// allowBatches lets a SemaQ stream made before batch publishing take
// JetStream atomic batches, which batch frames and stock clients' batches
// are stored as (docs/batches.md). A failure is logged: the stream serves
// on, and its atomic batches are refused with JetStream's error until the
// next sync.
func (m *Manager) allowBatches(ctx context.Context, c jetstream.StreamConfig) {
	if c.AllowAtomicPublish {
		return
	}
	c.AllowAtomicPublish = true
	if _, err := m.deps.JS.UpdateStream(ctx, c); err != nil {
		m.log.Warn("stream does not take atomic batches", "stream", c.Name, "err", err)
		return
	}
	m.log.Info("stream takes atomic batches now", "stream", c.Name)
}

// unlistedStreams are the streams JetStream has that a stream list left
// out (have: the listed ones). In a cluster the list gathers each stream's
// info from its leader and answers after 4 s with the streams it got; a
// stream electing a leader (its leader's node died) is named as missing,
// which nats.go drops. Such a stream is not gone: Sync leaves its ingress
// and its queue as they are, and runs again soon.
func (m *Manager) unlistedStreams(ctx context.Context, have map[string]bool) (map[string]bool, error) {
	if !m.deps.Clustered {
		return nil, nil
	}
	unknown := map[string]bool{}
	names := m.deps.JS.StreamNames(ctx)
	for name := range names.Name() {
		if !have[name] {
			unknown[name] = true
		}
	}
	if err := names.Err(); err != nil {
		return nil, err
	}
	if len(unknown) > 0 {
		m.queues.mu.Lock()
		m.retryQueueSync()
		m.queues.mu.Unlock()
	}
	return unknown, nil
}

// serveStream makes the ingress serve stream name on its public subjects,
// routed from user accounts to it with auth on (Deps.RouteSubjects).
// streamsMu is held.
func (m *Manager) serveStream(name string, subjects []string, durability string, chain api.Chain) error {
	if m.deps.RouteSubjects != nil {
		if err := m.deps.RouteSubjects(subjects); err != nil {
			return err
		}
	}
	return m.deps.Ingress.Serve(name, subjects, durability == DurabilityFsync, chain)
}

// isQueueLeader reports whether this node should dispatch a queue: the
// leader of its stream in a cluster, always on a single node. While a
// cluster elects the stream's leader, a node keeps doing what it did:
// starting dispatchers on a view without a leader would run several.
func (m *Manager) isQueueLeader(info *jetstream.StreamInfo) bool {
	if !m.deps.Clustered {
		return true
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return m.Dispatcher(info.Config.Name) != nil
	}
	return strings.EqualFold(info.Cluster.Leader, m.deps.Node)
}
