package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/groupcommit"
	"github.com/semaq/semaq/internal/broker/routes"
	"github.com/semaq/semaq/internal/broker/wire"
	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/internal/registry"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/internal/telemetry"
	"github.com/semaq/semaq/semaq"
)

// ingress is the semantic layer's write path. It holds one queue-group
// subscription per public subject pattern of every stream; each message is
// validated, normalised and republished into the reserved storage namespace
// with the publisher's reply subject, so JetStream acknowledges the
// publisher directly and the ingress never waits on storage. For streams
// with durability fsync the reply subject is the ingress's own instead, and
// the stream's committer releases the ack after the fsync that covers the
// message (groupcommit/).
//
// Messages come in and go to storage on the ingress's own in-process
// connections (ingress_wire.go), which also says which order is kept.
type ingress struct {
	out      *nats.Conn // egress: refusals and forwarded acks (permissions.go)
	log      *slog.Logger
	opts     semaq.NormalizeOptions
	reg      *registry.Registry         // schema-on-write; nil disables it
	storeDir func(stream string) string // a stream's block-file directory
	syncFile func(*os.File) error       // fsync; replaced by fault-injection tests
	// clustered: a clustered node makes no committer; JetStream's own
	// sync_always makes fsync streams durable there (durability.go).
	clustered bool

	mu      sync.Mutex
	streams map[string]*ingressStream // by stream name
	closed  bool                      // shut down: set refuses
	acks    ackRouter

	// The reader and the shards (ingress_wire.go).
	wire        *wire.Conn
	shards      []*ingressShard
	queuedBytes atomic.Int64  // waiting in the shards' queues
	dropped     atomic.Uint64 // dropped with a shard's queue full

	accepted atomic.Uint64
	rejected atomic.Uint64

	// Route rules (internal/broker/routes, ingress_route.go): routes is
	// nil when routing is off; served snapshots the streams (copy-on-write
	// under mu) so a route finds its target's stream without the lock.
	routes *routes.Router
	served atomic.Pointer[[]*ingressStream]

	// queues maps a queue's stream name to its admission control: its
	// dispatcher, or the node dispatching it (queue.go,
	// queue_cluster.go); copy-on-write.
	queues atomic.Pointer[map[string]queueAdmitter]
	// quota is the tenants' and users' quotas (ingress_quota.go); nil
	// when the node has none.
	quota atomic.Pointer[ingressQuota]

	// pipeline is the steps between the envelope and the append
	// (ingress_pipeline.go).
	pipeline []step

	// principal names the sender of a message (Server.principal):
	// anonymous with auth off, when AI-Tenant is the publisher's word.
	// Every user account's publish arrives through an import that adds
	// Nats-Request-Info (tenancy.go); the ingress drops it.
	principal func(nats.Header) api.Principal

	// Observability (observe.go): nil metrics and tracing record nothing.
	metrics *metrics.Metrics
	// memory refuses publishes while the node's memory is past its high
	// water (memory.go); nil: no bound.
	memory  *memoryGuard
	tracing *telemetry.Tracing
	lat     latencySampler
}

type ingressStream struct {
	name       string
	subjects   []string
	durability string
	subs       []*wire.Sub
	commit     *groupcommit.Committer // nil unless durability is fsync
}

// Pending limits of the ack router's subscription and of the shards'
// queues (ingress_wire.go). Past them messages are dropped (the publisher
// sees no ack and retries), which is the backpressure a flood gets instead
// of unbounded memory. With one shard the ingress reads as fast as it
// handles: what waits is in the server's buffer for the connection,
// bounded by the server's max_pending (64 MB); past it the server cuts the
// connection as a slow consumer and the ingress logs in again.
const (
	ingressPendingMsgs  = 1 << 16
	ingressPendingBytes = 64 << 20
)

func newIngress(out *nats.Conn, dial func(name string) (*wire.Conn, error), shards int, log *slog.Logger, maxHeaderBytes int, storeDir func(string) string, policy []PolicyStep) (*ingress, error) {
	in := &ingress{
		out:      out,
		log:      log,
		opts:     semaq.NormalizeOptions{MaxHeaderBytes: maxHeaderBytes, Stamp: true},
		storeDir: storeDir,
		streams:  make(map[string]*ingressStream),
	}
	in.pipeline = steps(policy)
	in.acks.nc = out
	in.acks.prefix = "_SQ_ACK." + nuid.Next() + "."
	in.acks.committers.Store(&map[string]*groupcommit.Committer{})
	if err := in.startWire(dial, shards); err != nil {
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
	return in, nil
}

// set makes the ingress serve stream name on subjects with a durability,
// replacing what it served for that stream before.
func (in *ingress) set(name string, subjects []string, durability string) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return fmt.Errorf("ingress: shut down; not serving stream %s", name)
	}
	if cur, ok := in.streams[name]; ok {
		if slices.Equal(cur.subjects, subjects) && cur.durability == durability {
			return nil
		}
		in.removeLocked(cur)
	}
	st := &ingressStream{name: name, subjects: slices.Clone(subjects), durability: durability}
	if durability == DurabilityFsync && !in.clustered {
		st.commit = groupcommit.New(groupcommit.Config{Stream: name, Dir: in.storeDir(name), Conn: in.out, Log: in.log, Sync: in.syncFile})
		in.publishCommitters(name, st.commit)
	}
	for _, subj := range subjects {
		po := in.patternObs(subj)
		handle := func(m *wire.Msg) { in.receive(st, po, m) }
		sub, err := in.wire.QueueSubscribe(subj, reserved.IngressQueueGroup, handle)
		if err != nil {
			in.removeLocked(st)
			return fmt.Errorf("ingress: subscribing to %s: %w", subj, err)
		}
		st.subs = append(st.subs, sub)
	}
	// Make sure the server has the interest before a caller reports the
	// stream as ready: a publish right after "stream add" must not find
	// no responders.
	ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
	defer cancel()
	if err := in.wire.Ping(ctx); err != nil {
		in.removeLocked(st)
		return fmt.Errorf("ingress: %w", err)
	}
	in.streams[name] = st
	in.publishServed()
	in.log.Debug("serving stream", "stream", name, "subjects", subjects, "durability", durability)
	return nil
}

// remove stops serving stream name.
func (in *ingress) remove(name string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if st, ok := in.streams[name]; ok {
		in.removeLocked(st)
		in.log.Debug("stopped serving stream", "stream", name)
	}
}

// removeLocked stops a stream's subscriptions, then commits and releases
// what its committer holds. in.mu is held.
func (in *ingress) removeLocked(st *ingressStream) {
	st.unsubscribe()
	if st.commit != nil {
		in.publishCommitters(st.name, nil)
		_ = st.commit.Close(context.Background()) // commits what it holds
	}
	if in.streams[st.name] == st {
		delete(in.streams, st.name)
		in.publishServed()
	}
}

// publishCommitters swaps in a copy of the committer table with name set to
// c (nil removes it). The ack router reads the table without locks.
func (in *ingress) publishCommitters(name string, c *groupcommit.Committer) {
	old := *in.acks.committers.Load()
	next := make(map[string]*groupcommit.Committer, len(old)+1)
	for k, v := range old {
		next[k] = v
	}
	if c == nil {
		delete(next, name)
	} else {
		next[name] = c
	}
	in.acks.committers.Store(&next)
}

// commitStats returns the group-commit figures of stream name, if it is an
// fsync stream served here.
func (in *ingress) commitStats(name string) *semaq.CommitStats {
	in.mu.Lock()
	defer in.mu.Unlock()
	if st, ok := in.streams[name]; ok && st.commit != nil {
		return st.commit.Stats()
	}
	return nil
}

// shutdown stops taking messages, waits (bounded by ctx) for JetStream to
// ack what was already handed to it, commits and releases every held ack,
// and stops the committers.
func (in *ingress) shutdown(ctx context.Context) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.closed {
		return nil
	}
	in.closed = true
	defer in.closeWire()
	for _, st := range in.streams {
		st.unsubscribe()
	}
	err := in.drainWire(ctx)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for in.acks.sent.Load() != in.acks.routed.Load() {
		select {
		case <-ctx.Done():
			err = errors.Join(err, fmt.Errorf("ingress: %d acks still outstanding: %w", in.acks.sent.Load()-in.acks.routed.Load(), ctx.Err()))
		case <-tick.C:
			continue
		}
		break
	}
	for _, st := range in.streams {
		in.removeLocked(st)
	}
	return err
}

// names returns the streams served.
func (in *ingress) names() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := make([]string, 0, len(in.streams))
	for n := range in.streams {
		out = append(out, n)
	}
	return out
}

func (st *ingressStream) unsubscribe() {
	for _, sub := range st.subs {
		_ = sub.Unsubscribe()
	}
	st.subs = nil
}

// handle is the hot path: it runs the pipeline (ingress_pipeline.go) once
// per published message and appends it on out. hdrErr is why m's header
// block could not be read.
func (in *ingress) handle(out *wire.Conn, st *ingressStream, po *patternObs, m *nats.Msg, hdrErr error) {
	if m.Header == nil {
		m.Header = make(nats.Header, 1)
	}
	p := publication{m: m, subject: m.Subject, stream: st, obs: msgObs{po: po}, out: out}
	// 1. envelope
	if m.Reply != "" {
		if err := semaq.CheckReplySubject(m.Reply); err != nil {
			// JetStream would send its PubAck there with the broker's
			// rights: refuse, and answer nobody.
			m.Reply = ""
			in.reject(&p, semaq.NewAPIError(semaq.ErrBadRequest, "publish on %s: %v", m.Subject, err))
			return
		}
	}
	if err := semaq.CheckPublishSubject(m.Subject); err != nil {
		in.reject(&p, semaq.NewAPIError(semaq.ErrBadRequest, "%v", err))
		return
	}
	if hdrErr != nil {
		in.reject(&p, semaq.NewAPIError(semaq.ErrEnvelope, "publish on %s: the header block is malformed (%v); nothing was stored", m.Subject, hdrErr))
		return
	}
	var who api.Principal
	if in.principal != nil {
		// The NATS server's word on the sender: read, then dropped, so
		// readers of the stream never see the publisher's address.
		who = in.principal(m.Header)
		m.Header.Del(api.RequestInfoHeader)
	}
	now := time.Now()
	env, err := semaq.Normalize(m.Header, now, in.opts)
	if err != nil {
		in.reject(&p, semaq.NewAPIError(semaq.ErrEnvelope, "%s", err.Error()))
		return
	}
	p.env = env
	if who.Who == api.User {
		if e := stampTenant(&p, who); e != nil {
			in.reject(&p, e)
			return
		}
		p.user = who.User
	}
	if e := takeOwnerHeaders(&p, who); e != nil {
		in.reject(&p, e)
		return
	}
	p.obs.begin(in, m, env)
	defer p.obs.end()
	// 2-5. schema, policy, route, admission
	for i := range in.pipeline {
		if e := in.runStep(&in.pipeline[i], &p); e != nil {
			in.reject(&p, e)
			return
		}
	}
	// 6. append
	if e := in.append(&p, now); e != nil {
		in.reject(&p, e)
		return
	}
	in.accepted.Add(1)
	p.obs.accepted(in, &p.env)
}

// append publishes p into the storage namespace with the publisher's
// reply subject (or, on an fsync stream, the ingress's own: the committer
// releases the ack after the fsync that covers the message).
func (in *ingress) append(p *publication, received time.Time) *semaq.APIError {
	m := p.m
	p.obs.carry(m.Header)
	if p.cancel != "" && in.isQueue(p.stream.name) {
		m.Header.Set(semaq.HdrCancelSum, semaq.CancelSum(p.cancel))
	}
	out := nats.Msg{Subject: reserved.StoragePrefix + p.subject, Reply: m.Reply}
	switch {
	case m.Reply == "":
	case p.stream.commit != nil:
		out.Reply = in.acks.prefix + m.Reply
		in.acks.sent.Add(1)
	case in.lat.sample(p.obs.po, &out, received):
		// Timed: the sampler forwards the ack, whatever the reply.
	default:
		out.Reply = in.replyVia(m.Reply)
	}
	if err := p.out.Publish(out.Subject, out.Reply, m.Header, m.Data); err != nil {
		if out.Reply != m.Reply {
			in.acks.sent.Add(^uint64(0)) // no ack will come for it
		}
		if errors.Is(err, nats.ErrMaxPayload) {
			return semaq.NewAPIError(semaq.ErrTooLarge, "message on %s is too large with its envelope: %d bytes of data, server limit %d",
				m.Subject, len(m.Data), p.out.MaxPayload())
		}
		return semaq.NewAPIError(semaq.ErrUnavailable, "storing message on %s: %v", m.Subject, err)
	}
	return nil
}

// isQueue reports whether stream is a work queue this node admits for.
func (in *ingress) isQueue(stream string) bool {
	qs := in.queues.Load()
	return qs != nil && (*qs)[stream] != nil
}

// replyVia is the reply subject a message stored for a client carries:
// the client's own, or the ack router's for a reply the NATS server
// refuses from a client of the node's account, its mapping of another
// account's inbox (_R_.…: every store user's, with auth on); the router
// forwards the ack from the egress connection.
func (in *ingress) replyVia(reply string) string {
	if !strings.HasPrefix(reply, responsePrefix) {
		return reply
	}
	in.acks.sent.Add(1)
	return in.acks.prefix + reply
}

// replyDropped undoes replyVia for a message that was not published
// after all: no ack will come for it.
func (in *ingress) replyDropped(reply, via string) {
	if via != reply {
		in.acks.sent.Add(^uint64(0))
	}
}

// reject refuses p: counted, recorded on its span, and answered to the
// publisher with e.
func (in *ingress) reject(p *publication, e *semaq.APIError) {
	m := p.m
	in.rejected.Add(1)
	p.obs.rejected(e)
	if m.Reply == "" {
		in.log.Debug("rejected message without reply subject", "subject", m.Subject, "err", e.Description)
		return
	}
	_ = in.out.Publish(m.Reply, semaq.MarshalError(e))
}
