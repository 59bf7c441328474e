package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/expr"
	"github.com/semaq/semaq/semaq"
)

// Key-shared groups (docs/key-shared.md): members share a subject's messages
// partitioned by a key, each key owned by one member at a time.
//
// One pump per group pulls the stream through the group's durable consumer
// on the internal connection, computes each message's key and forwards it to
// the member that owns the key by rendezvous (highest random weight)
// hashing, with the ack subject in HdrFilterAck as filter.go does. Members
// ack straight to JetStream; the pump watches those acks on the consumer's
// ack subjects (a plain subscription sees a copy), so it knows which keys
// still have messages in flight at which member.
//
// A key changes owner only when it has nothing in flight: when membership
// changes, messages of a key whose old owner still holds unacked messages
// are held by the pump (kept alive with +WPI) until the old owner acks them
// or their ack wait expires and JetStream redelivers them to the pump; then
// everything goes to the new owner in stream order.
//
// Locks: keyShared.mu guards the groups and members maps and is taken
// before a ksGroup.mu, never after; ksGroup.mu guards the group's key
// state and is held while forwarding (a publish into the connection's
// buffer). Neither is held while a pump stops.

const (
	ksHeartbeat     = 2 * time.Second
	ksExpiry        = 3
	ksMaxAckPending = 1000
	// DefaultMaxKeySharedMembers bounds the key-shared members one node
	// serves (over all groups; each group is a consumer and two
	// goroutines); past it JOIN is refused with ErrOverloaded.
	// Config.MaxKeySharedMembers overrides it.
	DefaultMaxKeySharedMembers = 1000
	// MaxKeySharedAckPending bounds a group's max_ack_pending: the pump
	// holds up to that many messages in memory.
	MaxKeySharedAckPending = 10000
	ksAckWait              = 30 * time.Second
)

// keyShared holds this node's groups.
type keyShared struct {
	s    *Server
	env  *expr.Env
	node string // this node's token in member ids

	mu       sync.Mutex
	groups   map[string]*ksGroup  // stream/group
	members  map[string]*ksMember // by id
	seq      uint64
	closed   bool
	stopReap chan struct{}
	reapDone chan struct{}
}

// ksMember is one member of a group.
type ksMember struct {
	id, name, deliver string
	g                 *ksGroup
	hash              uint64
	lastPing          atomic.Int64 // unix nanos
	delivered         atomic.Uint64
}

// ksGroup is one running group and its pump.
type ksGroup struct {
	ks                         *keyShared
	stream, name, keySrc, ackP string
	prog                       *expr.Program
	ackWait                    time.Duration
	cc                         jetstream.ConsumeContext
	ackSub                     *nats.Subscription
	stopTick, tickDone         chan struct{}
	stopOnce                   sync.Once

	mu      sync.Mutex
	members []*ksMember
	keys    map[string]*ksKey
	bySeq   map[uint64]*ksKey // messages in flight at a member
	held    int
	stopped bool
	keyErrs uint64
	// settleSeq: when the pump started, the consumer had messages in flight
	// from an earlier run whose keys are unknown. Until they have come
	// back (the ack floor reaches settleSeq) or one ack wait has passed,
	// first deliveries after settleSeq are held.
	settling    bool
	settleSeq   uint64
	settleUntil time.Time
}

// ksKey is the state of one key with messages in flight or held.
type ksKey struct {
	key      string
	hash     uint64
	owner    *ksMember
	inflight map[uint64]time.Time // stream seq -> sent or last in-progress
	held     []ksHeld             // by stream seq
}

type ksHeld struct {
	seq uint64
	jm  jetstream.Msg
}

func (s *Server) keySharedHandlers() map[string]nats.MsgHandler {
	env, err := expr.NewEnvConfig(s.cfg.exprConfig())
	if err != nil {
		s.log.Error("key-shared groups disabled", "err", err)
		return nil
	}
	k := &keyShared{
		s: s, env: env, node: nuid.Next(),
		groups: make(map[string]*ksGroup), members: make(map[string]*ksMember),
		stopReap: make(chan struct{}), reapDone: make(chan struct{}),
	}
	s.keyShared = k
	go k.reap()
	return map[string]nats.MsgHandler{
		semaq.APIKeySharedJoin:                             k.apiJoin,
		semaq.APIKeySharedInfo:                             api.Op(s.log, "key-shared info", k.info, api.Error("key-shared info")),
		fmt.Sprintf(semaq.APIKeySharedPingT, k.node+".*"):  k.apiPing,
		fmt.Sprintf(semaq.APIKeySharedLeaveT, k.node+".*"): k.apiLeave,
	}
}

// stopKeyShared ends every group at shutdown, before the internal
// connection drains.
func (s *Server) stopKeyShared() {
	k := s.keyShared
	if k == nil {
		return
	}
	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return
	}
	k.closed = true
	groups := make([]*ksGroup, 0, len(k.groups))
	for _, g := range k.groups {
		groups = append(groups, g)
	}
	k.groups = map[string]*ksGroup{}
	k.members = map[string]*ksMember{}
	k.mu.Unlock()
	close(k.stopReap)
	<-k.reapDone
	for _, g := range groups {
		g.stop()
	}
}

func badKeyShared(format string, args ...any) error {
	return semaq.NewAPIError(semaq.ErrBadRequest, "key-shared: "+format, args...)
}

// parseKeySharedJoin decodes and checks a join request: everything that can
// be judged without the streams.
func parseKeySharedJoin(data []byte) (*semaq.KeySharedJoinRequest, error) {
	var req semaq.KeySharedJoinRequest
	if err := api.Decode(data, &req); err != nil {
		return nil, badKeyShared("request is not valid: %v", err)
	}
	if err := checkSubject(req.Subject, true); err != nil {
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
	if err := checkSubject(req.DeliverSubject, false); err != nil {
		return nil, badKeyShared("deliver_subject: %v", err)
	}
	if err := semaq.CheckReplySubject(req.DeliverSubject); err != nil {
		// The broker publishes there: never into its own namespaces.
		return nil, badKeyShared("deliver_subject: %v; use an inbox", err)
	}
	if req.MaxAckPending < 0 || req.AckWait < 0 {
		return nil, badKeyShared("max_ack_pending and ack_wait may not be negative")
	}
	if req.MaxAckPending > MaxKeySharedAckPending {
		return nil, badKeyShared("max_ack_pending %d is over %d", req.MaxAckPending, MaxKeySharedAckPending)
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

func (k *keyShared) apiJoin(m *nats.Msg) {
	req, err := parseKeySharedJoin(m.Data)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), api.Timeout)
		var resp *semaq.KeySharedJoinResponse
		resp, err = k.join(ctx, req)
		cancel()
		if err == nil {
			api.ReplyJSON(k.s.log, m, resp)
			return
		}
	}
	api.ReplyErr(k.s.log, m, api.Error("key-shared join")(err))
}

func (k *keyShared) join(ctx context.Context, req *semaq.KeySharedJoinRequest) (*semaq.KeySharedJoinResponse, error) {
	k.mu.Lock()
	n := len(k.members)
	k.mu.Unlock()
	if n >= k.s.cfg.maxKeySharedMembers() {
		return nil, semaq.NewAPIError(semaq.ErrOverloaded, "key-shared: this node serves %d members, the most it allows", n)
	}
	stream, err := k.s.filters.lookup(ctx, req.Subject)
	if err != nil {
		return nil, err
	}
	src := req.Key
	cons, err := k.s.js.Consumer(ctx, stream, req.Group)
	switch {
	case err == nil:
		cfg := cons.CachedInfo().Config
		have := cfg.Metadata[semaq.MetadataKeyShared]
		switch {
		case have == "":
			return nil, badKeyShared("consumer %s exists and is not a key-shared group; use another group name", req.Group)
		case src != "" && src != have:
			return nil, badKeyShared("group %s is keyed by %q, not %q; delete it or use another group name", req.Group, have, src)
		case cfg.FilterSubject != req.Subject:
			return nil, badKeyShared("group %s follows subject %s, not %s", req.Group, cfg.FilterSubject, req.Subject)
		}
		src = have
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		cons = nil
	default:
		return nil, err
	}
	if strings.TrimSpace(src) == "" {
		return nil, badKeyShared("the key expression is empty (session, tenant or a CEL key such as payload.user_id)")
	}
	prog, err := k.env.CompileKey(src)
	if err != nil {
		return nil, badKeyShared("key: %v", err)
	}
	if cons == nil {
		cons, err = k.s.js.CreateConsumer(ctx, stream, ksConsumerConfig(req, src))
		if err != nil {
			return nil, err
		}
	}
	info := cons.CachedInfo()

	k.mu.Lock()
	if k.closed {
		k.mu.Unlock()
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "key-shared: the broker is shutting down")
	}
	gk := stream + "/" + req.Group
	g := k.groups[gk]
	fresh := g == nil
	if fresh {
		g = &ksGroup{
			ks: k, stream: stream, name: req.Group, keySrc: src, prog: prog, ackWait: info.Config.AckWait,
			ackP: fmt.Sprintf("$JS.ACK.%s.%s.", stream, req.Group),
			keys: map[string]*ksKey{}, bySeq: map[uint64]*ksKey{},
			stopTick: make(chan struct{}), tickDone: make(chan struct{}),
		}
		k.groups[gk] = g
		go g.tick(cons) // from here on, so stop can always wait for it
	}
	k.seq++
	mem := &ksMember{id: k.node + "." + strconv.FormatUint(k.seq, 10), name: req.Member, deliver: req.DeliverSubject, g: g}
	if mem.name == "" {
		mem.name = nuid.Next()
	}
	mem.hash = keyHash(mem.name)
	mem.lastPing.Store(time.Now().UnixNano())
	k.members[mem.id] = mem
	g.mu.Lock()
	// A member of the same name replaces the old one: it reconnected.
	var replaced *ksMember
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
		delete(k.members, replaced.id)
	}
	k.mu.Unlock()

	if fresh {
		if err := g.start(cons, info); err != nil {
			k.mu.Lock()
			if k.groups[gk] == g {
				delete(k.groups, gk)
			}
			g.mu.Lock()
			for _, m := range g.members {
				delete(k.members, m.id)
			}
			g.mu.Unlock()
			k.mu.Unlock()
			g.stop()
			return nil, err
		}
	}
	return &semaq.KeySharedJoinResponse{
		ID: mem.id, Member: mem.name, Stream: stream, Consumer: req.Group, Key: src, Heartbeat: ksHeartbeat,
	}, nil
}

func ksConsumerConfig(req *semaq.KeySharedJoinRequest, src string) jetstream.ConsumerConfig {
	cfg := jetstream.ConsumerConfig{
		Durable:       req.Group,
		FilterSubject: req.Subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       req.AckWait,
		MaxAckPending: req.MaxAckPending,
		Metadata:      map[string]string{semaq.MetadataKeyShared: src},
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = ksAckWait
	}
	if cfg.MaxAckPending == 0 {
		cfg.MaxAckPending = ksMaxAckPending
	}
	switch {
	case req.StartSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, req.StartSeq
	case req.Deliver == "new":
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy
	default:
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	return cfg
}

// start runs the pump: ack watcher first, so no ack of a forwarded message
// is missed, then the consumer.
// A member leaving at once may stop the group while it starts: stop and
// start meet under g.mu.
func (g *ksGroup) start(cons jetstream.Consumer, info *jetstream.ConsumerInfo) error {
	ackSub, err := g.ks.s.nc.Subscribe(g.ackP+"*.*.*.*.*", g.onAck)
	if err != nil {
		return err
	}
	_ = ackSub.SetPendingLimits(-1, -1)
	g.mu.Lock()
	if !g.stopped {
		g.ackSub = ackSub
	}
	if info.NumAckPending > 0 {
		g.settling, g.settleSeq = true, info.Delivered.Stream
		g.settleUntil = time.Now().Add(g.ackWait + time.Second)
	}
	stopped := g.stopped
	g.mu.Unlock()
	if stopped {
		_ = ackSub.Unsubscribe() // stop ran before it was there to see
		return nil
	}
	cc, err := cons.Consume(g.handle,
		jetstream.PullMaxMessages(256),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			if !errors.Is(err, jetstream.ErrNoHeartbeat) {
				g.ks.s.log.Debug("key-shared consume", "stream", g.stream, "group", g.name, "err", err)
			}
		}))
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.cc = cc
	stopped = g.stopped
	g.mu.Unlock()
	if stopped {
		cc.Stop() // stop ran in between and did not see it
	}
	return nil
}

// stop ends the pump. Held messages go back to JetStream at once.
func (g *ksGroup) stop() {
	g.stopOnce.Do(func() {
		g.mu.Lock()
		g.stopped = true
		cc, ackSub := g.cc, g.ackSub
		g.mu.Unlock()
		close(g.stopTick)
		<-g.tickDone
		if cc != nil {
			cc.Drain()
			select {
			case <-cc.Closed():
			case <-time.After(5 * time.Second):
				cc.Stop()
			}
		}
		if ackSub != nil {
			_ = ackSub.Unsubscribe()
		}
		g.mu.Lock()
		for _, k := range g.keys {
			for _, h := range k.held {
				_ = h.jm.Nak()
			}
			k.held = nil
		}
		g.held = 0
		g.mu.Unlock()
	})
}

// handle runs on the consume goroutine for every delivery, in the order
// JetStream sends them.
func (g *ksGroup) handle(jm jetstream.Msg) {
	md, err := jm.Metadata()
	if err != nil {
		_ = jm.Term() // not a JetStream message: nothing to redeliver
		return
	}
	key, kerr := g.prog.Key(expr.Message{Subject: jm.Subject(), Header: jm.Headers(), Data: jm.Data()})
	if kerr != nil {
		key = "" // documented: such messages share the empty key
	}
	seq := md.Sequence.Stream
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		_ = jm.Nak()
		return
	}
	if kerr != nil {
		g.keyErrs++
	}
	k := g.keys[key]
	if k == nil {
		k = &ksKey{key: key, hash: keyHash(key), inflight: map[uint64]time.Time{}}
		g.keys[key] = k
	}
	if _, ok := k.inflight[seq]; ok {
		// Redelivered: its member did not ack in time, or nak'd it.
		delete(k.inflight, seq)
		delete(g.bySeq, seq)
	}
	i, found := slices.BinarySearchFunc(k.held, seq, func(h ksHeld, s uint64) int { return cmpU64(h.seq, s) })
	if found {
		k.held[i].jm = jm // a newer delivery of a held message: its ack subject
	} else {
		k.held = slices.Insert(k.held, i, ksHeld{seq: seq, jm: jm})
		g.held++
	}
	g.releaseLocked(k)
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ownerLocked picks a key's member by rendezvous hashing: the highest
// score wins, so a join takes keys only from the others in proportion and
// a leave moves only the leaver's keys.
func (g *ksGroup) ownerLocked(kh uint64) *ksMember {
	var best *ksMember
	var top uint64
	for _, m := range g.members {
		if s := mix64(kh ^ m.hash); best == nil || s > top {
			best, top = m, s
		}
	}
	return best
}

// mix64 is MurmurHash3's 64-bit finaliser.
func mix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// releaseLocked forwards a key's held messages to its owner, unless the key
// is moving and its previous owner still has messages in flight.
func (g *ksGroup) releaseLocked(k *ksKey) {
	defer g.gcLocked(k)
	if len(k.held) == 0 || g.stopped {
		return
	}
	to := g.ownerLocked(k.hash)
	if to == nil || len(k.inflight) > 0 && k.owner != to {
		return
	}
	k.owner = to
	now := time.Now()
	n := 0
	for _, h := range k.held {
		if g.settling && h.seq > g.settleSeq {
			break
		}
		hdr := h.jm.Headers()
		if hdr == nil {
			hdr = make(nats.Header, 1)
		}
		hdr[semaq.HdrFilterAck] = []string{h.jm.Reply()}
		out := &nats.Msg{Subject: to.deliver + "." + h.jm.Subject(), Header: hdr, Data: h.jm.Data()}
		if err := g.ks.s.egress.PublishMsg(out); err != nil {
			break // left held; the tick retries
		}
		k.inflight[h.seq] = now
		g.bySeq[h.seq] = k
		to.delivered.Add(1)
		n++
	}
	k.held = slices.Delete(k.held, 0, n)
	g.held -= n
}

func (g *ksGroup) gcLocked(k *ksKey) {
	if len(k.inflight) == 0 && len(k.held) == 0 {
		delete(g.keys, k.key)
	}
}

// rebalanceLocked retries every key with held messages after membership
// changed.
func (g *ksGroup) rebalanceLocked() {
	for _, k := range g.keys {
		if len(k.held) > 0 {
			g.releaseLocked(k)
		}
	}
}

// onAck sees a copy of every ack sent to the group's consumer.
func (g *ksGroup) onAck(m *nats.Msg) {
	seq, ok := ackStreamSeq(m.Subject, len(g.ackP))
	if !ok {
		return
	}
	body := m.Data
	g.mu.Lock()
	defer g.mu.Unlock()
	k := g.bySeq[seq]
	if k == nil {
		return
	}
	switch {
	case len(body) == 0, hasPrefix(body, "+ACK"), hasPrefix(body, "+TERM"):
		delete(k.inflight, seq)
		delete(g.bySeq, seq)
		g.releaseLocked(k)
	case hasPrefix(body, "+WPI"):
		k.inflight[seq] = time.Now()
	}
	// -NAK and +NXT: JetStream redelivers it to the pump (handle).
}

func hasPrefix(b []byte, p string) bool { return len(b) >= len(p) && string(b[:len(p)]) == p }

// ackStreamSeq reads the stream sequence from a v1 ack subject
// ($JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>)
// whose prefix up to the consumer is pre bytes long.
func ackStreamSeq(subject string, pre int) (uint64, bool) {
	if len(subject) <= pre {
		return 0, false
	}
	rest := subject[pre:]
	_, rest, ok := strings.Cut(rest, ".") // delivered
	if !ok {
		return 0, false
	}
	s, _, _ := strings.Cut(rest, ".")
	seq, err := strconv.ParseUint(s, 10, 64)
	return seq, err == nil && seq > 0
}

// tick keeps held messages alive at JetStream, ends the settling period and
// forgets in-flight entries whose ack was never seen.
func (g *ksGroup) tick(cons jetstream.Consumer) {
	defer close(g.tickDone)
	every := max(g.ackWait/3, 100*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-g.stopTick:
			return
		case <-t.C:
		}
		g.mu.Lock()
		settling, settleSeq := g.settling, g.settleSeq
		g.mu.Unlock()
		floor := uint64(0)
		if settling {
			ctx, cancel := context.WithTimeout(context.Background(), every)
			if info, err := cons.Info(ctx); err == nil {
				floor = info.AckFloor.Stream
			}
			cancel()
		}
		now := time.Now()
		g.mu.Lock()
		if g.settling && (floor >= settleSeq || now.After(g.settleUntil)) {
			g.settling = false
			g.rebalanceLocked()
		}
		// An ack missed (it cannot be, short of a lost connection) would
		// pin its key to its owner; after two ack waits the message has
		// either been acked or come back.
		stale := now.Add(-2*g.ackWait - time.Second)
		for _, k := range g.keys {
			for seq, at := range k.inflight {
				if at.Before(stale) {
					delete(k.inflight, seq)
					delete(g.bySeq, seq)
				}
			}
			for _, h := range k.held {
				_ = h.jm.InProgress()
			}
			g.releaseLocked(k)
		}
		g.mu.Unlock()
	}
}

// member finds a member by the id in a PING or LEAVE subject.
func (k *keyShared) member(m *nats.Msg) *ksMember {
	id := k.node + "." + api.LastToken(m.Subject)
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.members[id]
}

func (mem *ksMember) stats() semaq.KeySharedMemberStats {
	mem.g.mu.Lock()
	n := len(mem.g.members)
	mem.g.mu.Unlock()
	return semaq.KeySharedMemberStats{Delivered: mem.delivered.Load(), Members: n}
}

func (k *keyShared) apiPing(m *nats.Msg) {
	mem := k.member(m)
	if mem == nil {
		api.ReplyErr(k.s.log, m, semaq.NewAPIError(semaq.ErrMemberGone, "key-shared member %s is not in its group", m.Subject))
		return
	}
	mem.lastPing.Store(time.Now().UnixNano())
	api.ReplyJSON(k.s.log, m, mem.stats())
}

func (k *keyShared) apiLeave(m *nats.Msg) {
	mem := k.member(m)
	if mem == nil {
		api.ReplyErr(k.s.log, m, semaq.NewAPIError(semaq.ErrMemberGone, "key-shared member %s is not in its group", m.Subject))
		return
	}
	st := mem.stats()
	k.remove(mem)
	api.ReplyJSON(k.s.log, m, st)
}

// remove takes a member out of its group; the last one out stops the pump.
func (k *keyShared) remove(mem *ksMember) {
	g := mem.g
	k.mu.Lock()
	if k.members[mem.id] != mem {
		k.mu.Unlock()
		return
	}
	delete(k.members, mem.id)
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
		g.stop()
	}
}

// reap drops members whose pings stopped.
func (k *keyShared) reap() {
	defer close(k.reapDone)
	t := time.NewTicker(ksHeartbeat / 2)
	defer t.Stop()
	for {
		select {
		case <-k.stopReap:
			return
		case <-t.C:
		}
		cutoff := time.Now().Add(-ksExpiry * ksHeartbeat).UnixNano()
		var dead []*ksMember
		k.mu.Lock()
		for _, m := range k.members {
			if m.lastPing.Load() < cutoff {
				dead = append(dead, m)
			}
		}
		k.mu.Unlock()
		for _, m := range dead {
			k.s.log.Info("key-shared member gone", "stream", m.g.stream, "group", m.g.name, "member", m.name)
			k.remove(m)
		}
	}
}

func (k *keyShared) info(_ context.Context, req *semaq.KeySharedInfoRequest) (any, error) {
	k.mu.Lock()
	g := k.groups[req.Stream+"/"+req.Group]
	k.mu.Unlock()
	if g == nil {
		return nil, semaq.NewAPIError(semaq.ErrMemberGone, "key-shared group %s on stream %s has no members on this node", req.Group, req.Stream)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	out := semaq.KeySharedGroupInfo{Stream: g.stream, Group: g.name, Key: g.keySrc, Keys: len(g.keys), Held: g.held, KeyErrors: g.keyErrs}
	for _, m := range g.members {
		out.Members = append(out.Members, m.name)
	}
	slices.Sort(out.Members)
	return out, nil
}
