// Package keyshared runs key-shared groups (docs/key-shared.md): members
// share a subject's messages partitioned by a key, each key owned by one
// member at a time.
//
// One pump per group (package pump) pulls the stream through the group's
// durable consumer on the internal connection, computes each message's key
// and forwards it to the member that owns the key by rendezvous (highest
// random weight) hashing. Members ack straight to JetStream; the pump
// watches those acks on the consumer's ack subjects (a plain subscription
// sees a copy), so it knows which keys still have messages in flight at
// which member.
//
// A key changes owner only when it has nothing in flight: when membership
// changes, messages of a key whose old owner still holds unacked messages
// are held by the pump (kept alive with +WPI) until the old owner acks them
// or their ack wait expires and JetStream redelivers them to the pump; then
// everything goes to the new owner in stream order.
//
// Locks: Service.mu guards the groups and is taken before a group.mu,
// never after, and before the member registry's own (a leaf); group.mu guards the group's key state and is
// held while forwarding (a publish into the connection's buffer). Neither
// is held while a pump stops.
package keyshared

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/keyhash"
	"github.com/semaq/semaq/internal/broker/pump"
	"github.com/semaq/semaq/internal/expr"
	"github.com/semaq/semaq/semaq"
)

const (
	// DefaultMaxMembers bounds the key-shared members one node serves
	// (over all groups; each group is a consumer and two goroutines); past
	// it JOIN is refused with ErrOverloaded. Deps.MaxMembers overrides it.
	DefaultMaxMembers = 1000
	// MaxAckPending bounds a group's max_ack_pending: the pump holds up to
	// that many messages in memory.
	MaxAckPending = 10000
)

// Deps is what the groups need from the node. Max bounds the members on
// this node, over all groups (0 is DefaultMaxMembers).
type Deps struct {
	pump.Deps
	NC *nats.Conn // the internal connection: watches the groups' acks
}

// Service runs this node's groups.
//
// Goroutines: the reap loop (from New to Close) and, per group, the
// JetStream consume goroutine and the tick (from the first JOIN to the
// last member's leave, its reap, or Close).
type Service struct {
	deps    Deps
	members *pump.Registry[*member]

	start *nats.Subscription // JOINs sent on to this node as the consumer's leader

	mu     sync.Mutex
	groups map[string]*group // stream/group
	closed bool
}

// member is one member of a group.
type member struct {
	id, name, deliver string
	g                 *group
	hash              uint64
	lease             pump.Lease
	delivered         atomic.Uint64
}

// New makes the service and starts its reap loop, which drops the members
// whose pings stopped; Close stops it.
func New(d Deps) (*Service, error) {
	var err error
	if d.Deps, err = d.Prepare(DefaultMaxMembers); err == nil && d.NC == nil {
		err = errors.New("NC is required")
	}
	if err != nil {
		return nil, fmt.Errorf("key-shared: %w", err)
	}
	k := &Service{deps: d, members: pump.NewRegistry[*member](semaq.ErrMemberGone, "key-shared member %s is not in its group"), groups: make(map[string]*group)}
	if k.deps.Node == "" {
		k.deps.Node = nuid.Next() // alone: no other node asks for it
	}
	if k.start, err = d.NC.Subscribe(startSubject(k.deps.Node), k.onRemoteJoin(toLeader)); err != nil {
		return nil, fmt.Errorf("key-shared: %w", err)
	}
	k.members.StartReaper(k.deps.Gate, pump.Heartbeat/2, func(m *member) {
		k.deps.Log.Info("key-shared member gone", "stream", m.g.stream, "group", m.g.name, "member", m.name)
		k.remove(m)
	})
	return k, nil
}

// Handlers serves $SQ.API.KEYSHARED.*. PING and LEAVE carry the node in
// the member id, so they reach the node that serves the member.
func (k *Service) Handlers() api.Handlers {
	node := k.members.Node() + ".*"
	return api.Handlers{
		semaq.APIKeySharedJoin:                      k.apiJoin,
		semaq.APIKeySharedInfo:                      api.Op(k.deps.Log, "key-shared info", k.info, nil),
		fmt.Sprintf(semaq.APIKeySharedPingT, node):  k.members.Ping(k.deps.Log, func(mem *member) any { return mem.stats() }),
		fmt.Sprintf(semaq.APIKeySharedLeaveT, node): k.members.Handler(k.deps.Log, k.leave),
	}
}

// Close ends every group (held messages go back to JetStream) and the
// reap loop, and waits for their goroutines. JOIN is refused from then
// on. It runs at shutdown, before the internal connection drains.
func (k *Service) Close(ctx context.Context) error {
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return nil
	}
	k.closed = true
	_ = k.start.Unsubscribe()
	groups := make([]*group, 0, len(k.groups))
	for _, g := range k.groups {
		groups = append(groups, g)
	}
	k.groups = map[string]*group{}
	k.members.Clear()
	k.mu.Unlock()
	k.members.Close()
	for _, g := range groups {
		g.stop(ctx)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return k.deps.Gate.Close(ctx)
}

// words refuse a JOIN.
var words = pump.Words{
	Bad: badKeyShared, Overloaded: "key-shared: this node serves %d members, the most it allows",
	NotOurs:      "consumer %s exists and is not a key-shared group; use another group name",
	OtherExpr:    "group %s is keyed by %q, not %q; delete it or use another group name",
	OtherSubject: "group %s follows subject %s, not %s",
}

func badKeyShared(format string, args ...any) error {
	return semaq.NewAPIError(semaq.ErrBadRequest, "key-shared: "+format, args...)
}

// parseJoin decodes and checks a join request: everything that can be
// judged without the streams.
func parseJoin(data []byte) (*semaq.KeySharedJoinRequest, error) {
	var req semaq.KeySharedJoinRequest
	if err := api.Decode(data, &req); err != nil {
		return nil, badKeyShared("request is not valid: %v", err)
	}
	if err := semaq.CheckSubject(req.Subject, true); err != nil {
		return nil, badKeyShared("%v", err)
	}
	if err := semaq.CheckConsumerName(req.Group); err != nil {
		return nil, badKeyShared("group: %v", err)
	}
	if req.Member != "" {
		if err := semaq.CheckConsumerName(req.Member); err != nil {
			return nil, badKeyShared("member: %v", err)
		}
	}
	if err := pump.CheckDeliver(req.DeliverSubject, badKeyShared); err != nil {
		return nil, err
	}
	if err := pump.CheckLimits(req.MaxAckPending, req.AckWait, MaxAckPending, badKeyShared); err != nil {
		return nil, err
	}
	if req.AckWait > 0 && req.AckWait < time.Second {
		return nil, badKeyShared("ack_wait %s is under one second", req.AckWait)
	}
	switch req.Deliver {
	case "", "all", "new":
	default:
		return nil, badKeyShared("deliver %q: use all or new", req.Deliver)
	}
	return &req, nil
}

// apiJoin parses its request itself: its errors say "key-shared", not
// "key-shared join" as api.Op's would.
func (k *Service) apiJoin(m *nats.Msg) {
	req, err := parseJoin(m.Data)
	if err != nil {
		api.ReplyErr(k.deps.Log, m, api.Error("key-shared join")(err))
		return
	}
	ctx, cancel := context.WithTimeout(api.WithRequestHeader(context.Background(), m.Header), api.Timeout)
	defer cancel()
	k.replyJoin(ctx, m, req, fromClient)
}

// replyJoin joins req and answers m: with this node's answer, or with the
// answer of the node the member joined on.
func (k *Service) replyJoin(ctx context.Context, m *nats.Msg, req *semaq.KeySharedJoinRequest, h hop) {
	resp, raw, err := k.join(ctx, req, h)
	switch {
	case err != nil:
		api.ReplyErr(k.deps.Log, m, api.Error("key-shared join")(err))
	case raw != nil:
		if m.Reply != "" {
			_ = m.Respond(raw)
		}
	default:
		api.ReplyJSON(k.deps.Log, m, resp)
	}
}

// join checks req and joins the member where the group's pump runs
// (cluster.go): the answer is this node's, or raw, the answer of the node
// that took it.
func (k *Service) join(ctx context.Context, req *semaq.KeySharedJoinRequest, h hop) (*semaq.KeySharedJoinResponse, []byte, error) {
	spec := pump.Spec{Durable: req.Group, Subject: req.Subject, AckWait: req.AckWait, MaxAckPending: req.MaxAckPending,
		StartSeq: req.StartSeq, Deliver: req.Deliver, MetaKey: semaq.MetadataKeyShared, Expr: req.Key}
	if h == fromClient {
		if err := k.deps.Authorize(ctx, req.Subject, req.DeliverSubject); err != nil {
			return nil, nil, err
		}
	}
	stream, cons, src, err := k.deps.Locate(ctx, k.members.Len(), spec, words)
	if err != nil {
		return nil, nil, err
	}
	if strings.TrimSpace(src) == "" {
		return nil, nil, badKeyShared("the key expression is empty (session, tenant or a CEL key such as payload.user_id)")
	}
	prog, err := k.deps.Env.CompileKey(src)
	if err != nil {
		return nil, nil, badKeyShared("key: %v", err)
	}
	if cons == nil {
		spec.Expr = src
		cons, err = k.deps.JS.CreateConsumer(ctx, stream, spec.Config())
		if err != nil {
			return nil, nil, err
		}
	}
	if resp, ok, err := k.joinHere(req, stream, src, prog, cons, false); ok {
		return resp, nil, err
	}
	fwd := *req
	fwd.Key = src
	raw, err := k.joinElsewhere(ctx, &fwd, stream, cons, h)
	if raw != nil || err != nil {
		return nil, raw, err
	}
	resp, _, err := k.joinHere(req, stream, src, prog, cons, true)
	return resp, nil, err
}

// joinHere adds the member to the group on this node. With start false it
// does nothing (ok false) unless this node runs the group; with start, it
// starts the group's pump here when it does not run yet.
func (k *Service) joinHere(req *semaq.KeySharedJoinRequest, stream, src string, prog *expr.Program, cons jetstream.Consumer, start bool) (*semaq.KeySharedJoinResponse, bool, error) {
	info := cons.CachedInfo()
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return nil, true, semaq.NewAPIError(semaq.ErrUnavailable, "key-shared: the broker is shutting down")
	}
	gk := stream + "/" + req.Group
	g := k.groups[gk]
	fresh := g == nil
	if fresh && !start {
		k.mu.Unlock()
		return nil, false, nil
	}
	if fresh {
		g = &group{
			ks: k, stream: stream, subject: req.Subject, name: req.Group, keySrc: src, prog: prog, ackWait: info.Config.AckWait,
			ackP: fmt.Sprintf("$JS.ACK.%s.%s.", stream, req.Group),
			keys: map[string]*keyState{}, bySeq: map[uint64]*keyState{},
			stopTick: make(chan struct{}), tickDone: make(chan struct{}),
		}
		k.groups[gk] = g
		// From here on, so stop can always wait for it.
		if !k.deps.Gate.Go("group", func(context.Context) { g.tick(cons) }) {
			close(g.tickDone) // the node is stopping; stop ends the group
		}
	}
	mem := &member{name: req.Member, deliver: req.DeliverSubject, g: g}
	if mem.name == "" {
		mem.name = nuid.Next()
	}
	mem.hash = keyhash.Of(mem.name)
	// Never refused: the registry closes after k.closed is set, and this
	// runs under k.mu having found it unset.
	mem.id, _ = k.members.Add(mem)
	g.mu.Lock()
	// A member of the same name replaces the old one: it reconnected.
	var replaced *member
	for i, o := range g.members {
		if o.name == mem.name {
			replaced = o
			g.members = slices.Delete(g.members, i, i+1)
			break
		}
	}
	g.members = append(g.members, mem)
	g.rebalanceLocked()
	g.mu.Unlock()
	if replaced != nil {
		k.members.Remove(replaced.id, replaced)
	}
	k.mu.Unlock()

	if fresh {
		if err := g.start(cons); err != nil {
			k.mu.Lock()
			if k.groups[gk] == g {
				delete(k.groups, gk)
			}
			g.mu.Lock()
			for _, m := range g.members {
				k.members.Remove(m.id, m)
			}
			g.mu.Unlock()
			k.mu.Unlock()
			g.stop(context.Background())
			return nil, true, err
		}
	}
	return &semaq.KeySharedJoinResponse{
		ID: mem.id, Member: mem.name, Stream: stream, Consumer: req.Group, Key: src, Heartbeat: pump.Heartbeat,
	}, true, nil
}

// leave takes mem out of its group and returns its last stats.
func (k *Service) leave(mem *member) any {
	st := mem.stats()
	k.remove(mem)
	return st
}

// Lease is what the member's pings renew.
func (mem *member) Lease() *pump.Lease { return &mem.lease }

func (mem *member) stats() semaq.KeySharedMemberStats {
	mem.g.mu.Lock()
	n := len(mem.g.members)
	mem.g.mu.Unlock()
	return semaq.KeySharedMemberStats{Delivered: mem.delivered.Load(), Members: n}
}

// remove takes a member out of its group; the last one out stops the pump.
func (k *Service) remove(mem *member) {
	g := mem.g
	k.mu.Lock()
	if !k.members.Remove(mem.id, mem) {
		k.mu.Unlock()
		return
	}
	g.mu.Lock()
	if i := slices.Index(g.members, mem); i >= 0 {
		g.members = slices.Delete(g.members, i, i+1)
	}
	empty := len(g.members) == 0
	if !empty {
		g.rebalanceLocked()
	}
	g.mu.Unlock()
	gk := g.stream + "/" + g.name
	if empty && k.groups[gk] == g {
		delete(k.groups, gk)
	}
	k.mu.Unlock()
	if empty {
		g.stop(context.Background())
	}
}

func (k *Service) info(ctx context.Context, req *semaq.KeySharedInfoRequest) (any, error) {
	k.mu.Lock()
	g := k.groups[req.Stream+"/"+req.Group]
	k.mu.Unlock()
	if g == nil {
		return k.infoElsewhere(ctx, req)
	}
	return g.info(), nil
}

// info describes the group as its pump sees it.
func (g *group) info() semaq.KeySharedGroupInfo {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := semaq.KeySharedGroupInfo{Stream: g.stream, Group: g.name, Key: g.keySrc, Keys: len(g.keys), Held: g.held, KeyErrors: g.keyErrs, Node: g.ks.deps.Node}
	for _, m := range g.members {
		out.Members = append(out.Members, m.name)
	}
	slices.Sort(out.Members)
	return out
}
