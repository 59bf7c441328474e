// Package ingress is SemaQ's write path. Every message a client publishes on
// a stream's subjects comes in here: its envelope is read, the policy steps
// judge it, its schema validates it, the route rules pick where it is
// stored, the quotas and its queue admit it, and it is appended to JetStream
// under the storage namespace with the publisher's reply subject, so
// JetStream acknowledges the publisher directly and the ingress never waits
// on storage. For streams with durability fsync on a single node the reply
// subject is the ingress's own instead, and the stream's committer releases
// the ack after the fsync that covers the message (groupcommit/).
//
// The path of one message, one file after another:
//
//	wire.go      the reader takes the message off its connection and hands it,
//	             by its ordering key, to a shard, which decodes it
//	pipeline.go  envelope → policy → schema → route → admission → append,
//	             or reject: each step ends the message or hands it on
//	schema.go    (leaf) the payload against the schema bound to its subject
//	acks.go      (leaf) the reply subject the stored message carries
//
// This file is the ingress's life: New, the streams it serves, Shutdown.
// served.go is the table of the streams served, which the route rules and
// the node read too. Check (pipeline.go) runs the same steps as a dry run:
// `semaq route test` is answered by it.
package ingress

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/groupcommit"
	"github.com/semaq/semaq/internal/broker/quota"
	"github.com/semaq/semaq/internal/broker/routes/table"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/broker/wire"
	"github.com/semaq/semaq/internal/hints"
	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/internal/registry"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/internal/telemetry"
	"github.com/semaq/semaq/policy"
	"github.com/semaq/semaq/semaq"
)

// Deps is what the ingress needs from the node, all of it given to New.
type Deps struct {
	// Log gets the ingress's events; nil logs nothing.
	Log *slog.Logger
	// Gate runs the shards' goroutines; Shutdown closes it. Nil makes one
	// of the ingress's own.
	Gate *subsystem.Gate
	// Dial connects one of the ingress's connections (the reader, each
	// shard's) to the node's NATS server as the node's internal user.
	Dial func(name string) (*wire.Conn, error)
	// Shards is how many shards run the pipeline (wire.go); 0 picks by
	// the number of cores, past MaxShards is MaxShards.
	Shards int
	// Egress sends to subjects clients chose: refusals, and acks the
	// ingress forwards. Its permissions keep it out of the reserved
	// namespaces.
	Egress *nats.Conn
	// Conn is the node's internal connection: the latency sampler's acks
	// come in on it.
	Conn *nats.Conn
	// Served is the table of served streams the ingress keeps (NewServed).
	Served *Served
	// MaxHeaderBytes bounds one message's header block; 0 is the
	// envelope's default.
	MaxHeaderBytes int
	// Registry validates payloads on bound subjects (schema-on-write);
	// nil validates nothing.
	Registry *registry.Registry
	// Routes returns the route rules' current table, once per message
	// (the routes subsystem's Router.Table); it must not block. Nil
	// routes nothing.
	Routes func() *table.Table
	// Policy are the policy steps, run in order.
	Policy []policy.Step
	// Principal names the sender of a message from the headers the NATS
	// server set; nil: every sender is anonymous (auth off).
	Principal func(nats.Header) api.Principal
	// MayPublish says whether a sender may publish on a subject, as its
	// NATS permissions would: the messages of a batch frame are checked
	// with it, since the broker appends them with its own rights. Nil
	// lets everyone.
	MayPublish func(who api.Principal, subject string) *semaq.APIError
	// Memory is the refusal while the node's memory is past its high
	// water, nil when it is not; a nil func: no memory bound.
	Memory func() *semaq.APIError
	// Metrics and Tracing record the ingress; nil records nothing.
	Metrics *metrics.Metrics
	Tracing *telemetry.Tracing
	// StoreDir is the directory of a stream's block files, which an fsync
	// stream's committer syncs.
	StoreDir func(stream string) string
	// SyncFile replaces fsync in group commits (fault injection); nil
	// is (*os.File).Sync.
	SyncFile func(*os.File) error
	// Clustered: the node is one of a cluster. It makes no committer:
	// JetStream's own sync_always makes fsync streams durable there.
	Clustered bool
	// SigningKey signs the links of streams with signed provenance
	// (docs/provenance.md); nil leaves them unsigned.
	SigningKey ed25519.PrivateKey
	// Workloads are the bases of SLA-derived priorities; nil:
	// hints.DefaultWorkloads. ClassKnown reports whether a class an
	// AI-Class names is defined; nil accepts any (hints.go).
	Workloads  hints.Workloads
	ClassKnown func(class string) bool
}

// Admitter is the admission control of one work queue: its dispatcher on
// this node, or the node dispatching it.
type Admitter interface {
	Admit(env *semaq.Envelope, dataLen int) *semaq.APIError
}

// Ingress is the write path of one node. Its methods are safe for
// concurrent use.
type Ingress struct {
	gate       *subsystem.Gate // runs the shards (wire.go)
	log        *slog.Logger
	egress     *nats.Conn
	opts       semaq.NormalizeOptions
	reg        *registry.Registry
	routes     func() *table.Table
	policy     []policyStep
	principal  func(nats.Header) api.Principal
	mayPublish func(api.Principal, string) *semaq.APIError
	memory     func() *semaq.APIError
	metrics    *metrics.Metrics
	tracing    *telemetry.Tracing
	storeDir   func(string) string
	syncFile   func(*os.File) error
	clustered  bool
	conn       *nats.Conn // Deps.Conn
	node       string     // the node's name, when stock batches are forwarded to it (stockforward.go)
	served     *Served
	hintCfg    hintConfig // dispatch hints (hints.go)

	mu      sync.Mutex
	streams map[string]*stream // by name
	closed  bool               // shut down: Serve refuses

	acks   ackRouter
	lat    latencySampler
	frames frames       // batch frames waiting for their acks (batch.go)
	chains chains       // sessions of chained streams (chain.go)
	stock  stockBatches // stock clients' atomic batches (stockbatch.go)

	// The reader and the shards (wire.go).
	wire        *wire.Conn
	shards      []*shard
	queuedBytes atomic.Int64  // waiting in the shards' queues
	dropped     atomic.Uint64 // dropped with a shard's queue full

	accepted atomic.Uint64
	rejected atomic.Uint64

	// queues maps a queue's stream name to its admission control;
	// replaced whole (SetQueues).
	queues atomic.Pointer[map[string]Admitter]
	// quota is the tenants' and users' quotas; nil when the node has none.
	quota atomic.Pointer[quota.Limiter]
	// sessions is told of every accepted message that names a session
	// (SetSessions).
	sessions atomic.Pointer[func(tenant, session string, confidence float64, hasConfidence bool)]
	// models binds a request for a registered model to its version at
	// admission (SetModels).
	models atomic.Pointer[func(m *nats.Msg, env *semaq.Envelope) *semaq.APIError]
}

// stream is one stream the ingress serves.
type stream struct {
	name     string
	subjects []string
	fsync    bool
	subs     []*wire.Sub
	pats     map[string]*pattern    // by subject pattern: batch messages count under them
	commit   *groupcommit.Committer // nil unless fsync on a single node
	chain    api.Chain              // how it chains its sessions (chain.go)
}

// policyStep is an enabled policy step and its counters.
type policyStep struct {
	step policy.Step
	name string
	obs  *metrics.PolicyStep
	idle func() bool // the step's policy.Idler, nil when it is none
}

// Pending limits of the latency sampler's subscription and of the shards'
// queues (wire.go). Past them messages are dropped (the publisher sees no
// ack and retries), which is the backpressure a flood gets instead of
// unbounded memory. With one shard the ingress reads as fast as it
// handles: what waits is in the server's buffer for the connection,
// bounded by the server's max_pending (64 MB); past it the server cuts the
// connection as a slow consumer and the ingress logs in again.
const (
	pendingMsgs  = 1 << 16
	pendingBytes = 64 << 20
)

// New connects the ingress's reader and shards and subscribes to the
// acks it routes; it serves no stream until Serve.
func New(d Deps) (*Ingress, error) {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.SyncFile == nil {
		d.SyncFile = (*os.File).Sync
	}
	if d.Served == nil {
		d.Served = NewServed()
	}
	if d.Gate == nil {
		d.Gate = subsystem.NewGate("ingress")
	}
	in := &Ingress{
		gate:       d.Gate,
		log:        d.Log,
		egress:     d.Egress,
		opts:       semaq.NormalizeOptions{MaxHeaderBytes: d.MaxHeaderBytes, Stamp: true},
		reg:        d.Registry,
		routes:     d.Routes,
		principal:  d.Principal,
		mayPublish: d.MayPublish,
		memory:     d.Memory,
		metrics:    d.Metrics,
		tracing:    d.Tracing,
		storeDir:   d.StoreDir,
		syncFile:   d.SyncFile,
		clustered:  d.Clustered,
		conn:       d.Conn,
		served:     d.Served,
		hintCfg:    hintConfig{workloads: d.Workloads, known: d.ClassKnown},
		streams:    make(map[string]*stream),
	}
	in.stock.metrics = d.Metrics
	in.stock.anyOrder = d.Clustered
	for _, s := range d.Policy {
		ps := policyStep{step: s, name: s.Name(), obs: d.Metrics.PolicyStep(s.Name())}
		if i, ok := s.(policy.Idler); ok {
			ps.idle = i.Idle
		}
		in.policy = append(in.policy, ps)
	}
	in.acks.forward = in.forward
	in.acks.prefix = reserved.IngressAckInbox + nuid.Next() + "."
	in.acks.committers.Store(&map[string]*groupcommit.Committer{})
	if err := in.startWire(d.Dial, d.Shards); err != nil {
		return nil, err
	}
	// The acks come in on the reader's connection and are routed on its
	// parsing goroutine: no hand-off to a subscription's goroutine and no
	// nats.Msg per durable message. Subscribed before any stream is served,
	// so the server has the subscription before the first ack can come.
	if _, err := in.wire.QueueSubscribe(in.acks.prefix+">", "", in.acks.route); err != nil {
		in.closeWire()
		return nil, fmt.Errorf("ingress: ack subscription: %w", err)
	}
	if err := in.startFrames(); err != nil {
		in.closeWire()
		return nil, fmt.Errorf("ingress: batches: %w", err)
	}
	if err := in.startChains(d.SigningKey); err != nil {
		in.closeWire()
		return nil, fmt.Errorf("ingress: chains: %w", err)
	}
	if err := in.startStockForward(); err != nil {
		in.closeWire()
		return nil, fmt.Errorf("ingress: batches: %w", err)
	}
	if d.Conn != nil {
		if err := in.lat.start(d.Conn, in.forwardMsg, &in.acks); err != nil {
			in.closeWire()
			return nil, err
		}
	}
	return in, nil
}

// subscribeTimeout bounds the wait for the server to confirm the
// subscriptions of a stream.
const subscribeTimeout = 10 * time.Second

// Serve makes the ingress serve stream name on subjects, fsync or not,
// replacing what it served for that stream before. It returns once the
// server has the subscriptions: a publish right after finds them.
func (in *Ingress) Serve(name string, subjects []string, fsync bool, chain api.Chain) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return fmt.Errorf("ingress: shut down; not serving stream %s", name)
	}
	if cur, ok := in.streams[name]; ok {
		if slices.Equal(cur.subjects, subjects) && cur.fsync == fsync && cur.chain == chain {
			return nil
		}
		in.removeLocked(cur)
	}
	st := &stream{name: name, subjects: slices.Clone(subjects), fsync: fsync, chain: chain, pats: make(map[string]*pattern, len(subjects))}
	if fsync && !in.clustered {
		st.commit = groupcommit.New(groupcommit.Config{Stream: name, Dir: in.storeDir(name), Conn: in.egress, Log: in.log, Sync: in.syncFile,
			Deliver: in.forward})
		in.acks.setCommitter(name, st.commit)
	}
	for _, subj := range subjects {
		po := in.pattern(subj)
		st.pats[subj] = po
		handle := func(m *wire.Msg) { in.receive(st, po, m) }
		sub, err := in.wire.QueueSubscribe(subj, reserved.IngressQueueGroup, handle)
		if err != nil {
			in.removeLocked(st)
			return fmt.Errorf("ingress: subscribing to %s: %w", subj, err)
		}
		st.subs = append(st.subs, sub)
	}
	ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
	defer cancel()
	if err := in.wire.Ping(ctx); err != nil {
		in.removeLocked(st)
		return fmt.Errorf("ingress: %w", err)
	}
	in.streams[name] = st
	in.served.publish(in.streams)
	in.log.Debug("serving stream", "stream", name, "subjects", subjects, "fsync", fsync)
	return nil
}

// Remove stops serving stream name.
func (in *Ingress) Remove(name string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if st, ok := in.streams[name]; ok {
		in.removeLocked(st)
		in.log.Debug("stopped serving stream", "stream", name)
	}
}

// removeLocked stops a stream's subscriptions, then commits and releases
// what its committer holds. in.mu is held.
func (in *Ingress) removeLocked(st *stream) {
	st.unsubscribe()
	if st.commit != nil {
		in.acks.setCommitter(st.name, nil)
		_ = st.commit.Close(context.Background()) // commits what it holds
	}
	if in.streams[st.name] == st {
		delete(in.streams, st.name)
		in.served.publish(in.streams)
	}
}

func (st *stream) unsubscribe() {
	for _, sub := range st.subs {
		_ = sub.Unsubscribe()
	}
	st.subs = nil
}

// Names returns the streams served.
func (in *Ingress) Names() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]string, 0, len(in.streams))
	for n := range in.streams {
		out = append(out, n)
	}
	return out
}

// CommitStats returns the group-commit figures of stream name, if it is an
// fsync stream committed here.
func (in *Ingress) CommitStats(name string) *semaq.CommitStats {
	in.mu.Lock()
	defer in.mu.Unlock()
	if st, ok := in.streams[name]; ok && st.commit != nil {
		return st.commit.Stats()
	}
	return nil
}

// SetQueues replaces the admission table: a queue's stream name to its
// admission control.
func (in *Ingress) SetQueues(m map[string]Admitter) { in.queues.Store(&m) }

// SetModels gives the ingress the model registry's binding
// (models.Registry.Bind), the first step of admission for a message
// naming a model: it may stamp the version and revision, or refuse.
func (in *Ingress) SetModels(bind func(m *nats.Msg, env *semaq.Envelope) *semaq.APIError) {
	in.models.Store(&bind)
}

// SetSessions gives the ingress what it tells of each accepted message
// carrying AI-Session: its tenant, the session, and its AI-Confidence
// when it has one (the session store's Observe, which must not block).
func (in *Ingress) SetSessions(observe func(tenant, session string, confidence float64, hasConfidence bool)) {
	in.sessions.Store(&observe)
}

// SetQuota gives the ingress the node's quotas (docs/quotas.md). Until
// then, and with nil, no quota applies and none is paid for.
func (in *Ingress) SetQuota(l *quota.Limiter) { in.quota.Store(l) }

// Quota is the limiter SetQuota gave; nil without.
func (in *Ingress) Quota() *quota.Limiter { return in.quota.Load() }

// AcksRouted is how many acks the ingress routed for fsync streams and
// sampled latencies.
func (in *Ingress) AcksRouted() uint64 { return in.acks.routed.Load() }

// Shutdown stops taking messages, waits (bounded by ctx) for JetStream to
// ack what was already handed to it, commits and releases every held ack,
// and stops the committers.
func (in *Ingress) Shutdown(ctx context.Context) (err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return nil
	}
	in.closed = true
	defer func() { err = errors.Join(err, in.gate.Close(ctx)) }() // after closeWire stopped the shards
	defer in.closeWire()
	for _, st := range in.streams {
		st.unsubscribe()
	}
	err = in.drainWire(ctx)
	if e := in.acks.wait(ctx); e != nil {
		err = errors.Join(err, e)
	}
	for _, st := range in.streams {
		in.removeLocked(st)
	}
	return err
}
