package broker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/expr"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/semaq"
)

// Route rules: the ingress stores a message under a target subject chosen by
// CEL rules instead of the subject it was published to (docs/routing.md).
//
// The rules live in the KV bucket SQ_ROUTES, one key per rule. Every node
// keeps them compiled in an immutable routeTable behind an atomic pointer,
// rebuilt by a KV watcher on each change: the ingress reads the table with
// one atomic load and no lock. The node that handles an add or delete
// replies once its own table shows the change, so the publisher that
// changed a rule sees it applied on its next publish; other nodes follow
// within the watcher's delivery time.
//
// Per-rule counters live in the compiled rule, which a rebuild reuses while
// the rule's KV revision is unchanged.

// routeLoadTimeout bounds loading the rules when the node starts.
const routeLoadTimeout = 30 * time.Second

// router owns the rule bucket, its watcher and the current table.
type router struct {
	log     *slog.Logger
	env     *expr.Env
	kv      jetstream.KeyValue
	watcher jetstream.KeyWatcher

	table atomic.Pointer[routeTable]

	health *routeHealth // adaptive splits (route_health.go)

	// mu guards changed, closed and replaced each time a table is
	// published, waking API handlers waiting for their revision. The
	// watcher takes only mu; nothing is held while calling out.
	mu      sync.Mutex
	changed chan struct{}

	done      chan struct{} // closed by close
	stopped   chan struct{} // closed when the watcher goroutine returns
	closeOnce sync.Once
}

// rule is one compiled route rule. Immutable except for its counters.
type rule struct {
	def     semaq.Route
	rev     uint64
	created time.Time
	when    *expr.Program // nil matches every message
	key     *expr.Program // a split's sticky key; nil picks at random
	to      []*routeTarget
	total   uint64 // sum of the weights

	matched atomic.Uint64
	errs    atomic.Uint64
	lastErr atomic.Pointer[string]

	// eff holds an adaptive split's effective weights, by target
	// (route_health.go); nil routes by the configured weights.
	eff atomic.Pointer[adaptiveWeights]
}

// routeTarget is one target subject of a rule.
type routeTarget struct {
	subject string
	weight  uint64
	upto    uint64 // cumulative weight: picked for a point below it

	matched atomic.Uint64 // for splits
	// cache remembers which served stream captures subject, valid while
	// the ingress's stream snapshot is the one it was computed from.
	cache atomic.Pointer[targetStream]
}

type targetStream struct {
	served *[]*ingressStream
	st     *ingressStream // nil: no stream captures the target
}

// brokenRule is a stored rule this node cannot run.
type brokenRule struct {
	def     semaq.Route
	rev     uint64
	created time.Time
	err     string
}

// routeTable is the compiled rule set at one KV revision. Immutable.
type routeTable struct {
	rev    uint64
	rules  []*rule // by (order, name)
	broken []*brokenRule
	// byFirst holds, for each literal first token of a rule's subject
	// pattern, the rules that may match a subject starting with it (the
	// rules starting with a wildcard included), in order. wild is the list
	// for any other first token.
	byFirst map[string][]*rule
	wild    []*rule
}

// candidates returns the rules whose pattern may match subject, in order.
func (t *routeTable) candidates(subject string) []*rule {
	first := subject
	if i := strings.IndexByte(subject, '.'); i >= 0 {
		first = subject[:i]
	}
	if c, ok := t.byFirst[first]; ok {
		return c
	}
	return t.wild
}

func ruleLess(ao int, an string, bo int, bn string) int {
	if c := cmp.Compare(ao, bo); c != 0 {
		return c
	}
	return strings.Compare(an, bn)
}

func newRouteTable(rev uint64, rules map[string]*rule, broken map[string]*brokenRule) *routeTable {
	t := &routeTable{rev: rev, byFirst: make(map[string][]*rule)}
	for _, r := range rules {
		t.rules = append(t.rules, r)
	}
	slices.SortFunc(t.rules, func(a, b *rule) int { return ruleLess(a.def.Order, a.def.Name, b.def.Order, b.def.Name) })
	for _, b := range broken {
		t.broken = append(t.broken, b)
	}
	slices.SortFunc(t.broken, func(a, b *brokenRule) int { return ruleLess(a.def.Order, a.def.Name, b.def.Order, b.def.Name) })
	for _, r := range t.rules {
		first, _, _ := strings.Cut(r.def.Subject, ".")
		if first == "*" || first == ">" {
			t.wild = append(t.wild, r)
			continue
		}
		if _, ok := t.byFirst[first]; !ok {
			t.byFirst[first] = nil
		}
	}
	// Every first-token list keeps the global order, wildcard rules
	// interleaved where they rank.
	for first := range t.byFirst {
		var list []*rule
		for _, r := range t.rules {
			f, _, _ := strings.Cut(r.def.Subject, ".")
			if f == first || f == "*" || f == ">" {
				list = append(list, r)
			}
		}
		t.byFirst[first] = list
	}
	return t
}

// find returns the loaded rule named name.
func (t *routeTable) find(name string) *rule {
	for _, r := range t.rules {
		if r.def.Name == name {
			return r
		}
	}
	return nil
}

// subjectMatches reports whether a valid literal subject matches a valid
// pattern. It allocates nothing.
func subjectMatches(pattern, subject string) bool {
	if pattern == subject {
		return true // a literal pattern, the common case: one compare
	}
	for {
		pi := strings.IndexByte(pattern, '.')
		si := strings.IndexByte(subject, '.')
		pt, st := pattern, subject
		if pi >= 0 {
			pt = pattern[:pi]
		}
		if si >= 0 {
			st = subject[:si]
		}
		if pt == ">" {
			return true // the subject has at least this token left
		}
		if pt != "*" && pt != st {
			return false
		}
		if pi < 0 || si < 0 {
			return pi < 0 && si < 0
		}
		pattern, subject = pattern[pi+1:], subject[si+1:]
	}
}

// compileRule checks a rule and compiles its expressions. It does not look
// at streams: whether a target is captured is checked when the rule is
// added and on every publish it routes.
func compileRule(env *expr.Env, d semaq.Route) (*rule, error) {
	if err := semaq.CheckRouteName(d.Name); err != nil {
		return nil, err
	}
	if d.Subject == "" {
		return nil, errors.New("no subject pattern: the rule needs --subject")
	}
	if err := checkSubject(d.Subject, true); err != nil {
		return nil, fmt.Errorf("subject: %w", err)
	}
	r := &rule{def: d}
	switch {
	case d.To != "" && len(d.Split) > 0:
		return nil, errors.New("give a target (to) or a split, not both")
	case d.To != "":
		if err := checkTarget(d.To); err != nil {
			return nil, fmt.Errorf("target: %w", err)
		}
		if d.StickyKey != "" {
			return nil, errors.New("a sticky key needs a split; a single target needs none")
		}
		r.to = []*routeTarget{{subject: d.To, weight: 1, upto: 1}}
		r.total = 1
	case len(d.Split) > 0:
		if len(d.Split) < 2 {
			return nil, errors.New("a split needs at least two targets; use a single target (to) for one")
		}
		if len(d.Split) > semaq.MaxRouteSplitTargets {
			return nil, fmt.Errorf("a split has at most %d targets; this one has %d", semaq.MaxRouteSplitTargets, len(d.Split))
		}
		seen := make(map[string]bool, len(d.Split))
		for _, s := range d.Split {
			if err := checkTarget(s.Subject); err != nil {
				return nil, fmt.Errorf("split target: %w", err)
			}
			if seen[s.Subject] {
				return nil, fmt.Errorf("split target %s is given twice", s.Subject)
			}
			seen[s.Subject] = true
			if s.Weight < 1 || s.Weight > semaq.MaxRouteWeight {
				return nil, fmt.Errorf("split target %s has weight %d; weights are whole numbers from 1 to %d", s.Subject, s.Weight, semaq.MaxRouteWeight)
			}
			r.total += uint64(s.Weight)
			r.to = append(r.to, &routeTarget{subject: s.Subject, weight: uint64(s.Weight), upto: r.total})
		}
	default:
		return nil, errors.New("no target: give a target subject (to) or a split")
	}
	if d.Adaptive && len(d.Split) == 0 {
		return nil, errors.New("adaptive weights need a split; a single target has nothing to shift")
	}
	if d.When != "" {
		p, err := env.Compile(d.When)
		if err != nil {
			return nil, fmt.Errorf("when: %w", err)
		}
		r.when = p
	}
	if d.StickyKey != "" {
		p, err := env.CompileKey(d.StickyKey)
		if err != nil {
			return nil, fmt.Errorf("sticky key: %w", err)
		}
		r.key = p
	}
	return r, nil
}

// checkTarget accepts a literal subject a stream may capture.
func checkTarget(subj string) error {
	if err := checkSubject(subj, false); err != nil {
		return err
	}
	return checkPublicSubject(subj)
}

// judge evaluates the rule on m: the target picked, nil when the rule does
// not match, and the sticky key used. An evaluation error is a non-match,
// returned for counting.
func (r *rule) judge(m expr.Message) (t *routeTarget, key string, err error) {
	if r.when != nil {
		ok, err := r.when.Match(m)
		if err != nil || !ok {
			return nil, "", err
		}
	}
	if len(r.to) == 1 {
		return r.to[0], "", nil
	}
	var h uint64
	if r.key != nil {
		if key, err = r.key.Key(m); err != nil {
			return nil, "", err
		}
		h = keyHash(key)
	} else {
		h = rand.Uint64()
	}
	if r.def.Adaptive {
		return r.pickAdaptive(h), key, nil
	}
	// Scale the hash to the total weight by its high bits: a key keeps its
	// target while the weights stay, and moving weight between two targets
	// moves only the keys in between.
	point, _ := bits.Mul64(h, r.total)
	for _, t := range r.to {
		if point < t.upto {
			return t, key, nil
		}
	}
	return r.to[len(r.to)-1], key, nil // unreachable: point < total
}

func (r *rule) fail(err error) {
	r.errs.Add(1)
	msg := err.Error()
	r.lastErr.Store(&msg)
}

// keyHash is FNV-1a 64 of the key followed by MurmurHash3's 64-bit
// finaliser: FNV alone barely moves its high bits for keys that differ in
// their last bytes (user-1, user-2), and the high bits pick the target.
func keyHash(s string) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= prime
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// route applies the rules of rt to m, which has passed the envelope and
// schema checks, and returns the subject to store it under and the served
// stream that captures that subject. A routed message gets
// AI-Origin-Subject. A target no stream captures refuses the message.
func (in *ingress) route(rt *routeTable, st *ingressStream, m *nats.Msg) (string, *ingressStream, *semaq.APIError) {
	subject, st, _, e := in.routeRule(rt, st, m)
	return subject, st, e
}

// routeRule is route that also returns the rule that decided, nil when
// none matched (the trace span names it).
func (in *ingress) routeRule(rt *routeTable, st *ingressStream, m *nats.Msg) (string, *ingressStream, *rule, *semaq.APIError) {
	cands := rt.candidates(m.Subject)
	if len(cands) == 0 {
		return m.Subject, st, nil, nil
	}
	em := expr.Message{Subject: m.Subject, Header: m.Header, Data: m.Data}
	for _, r := range cands {
		if !subjectMatches(r.def.Subject, m.Subject) {
			continue
		}
		t, _, err := r.judge(em)
		if err != nil {
			r.fail(err)
			continue
		}
		if t == nil {
			continue
		}
		ts := in.targetStream(t)
		if ts == nil {
			return "", nil, r, semaq.NewAPIError(semaq.ErrNoStream,
				"route %s sends messages on %s to %s, which no stream captures; nothing was stored (add a stream for %s or change the route)",
				r.def.Name, m.Subject, t.subject, t.subject)
		}
		r.matched.Add(1)
		if len(r.to) > 1 {
			t.matched.Add(1)
		}
		m.Header[semaq.HdrOriginSubject] = []string{m.Subject}
		return t.subject, ts, r, nil
	}
	return m.Subject, st, nil, nil
}

// targetStream finds the served stream capturing a target, cached per
// snapshot of the served streams.
func (in *ingress) targetStream(t *routeTarget) *ingressStream {
	served := in.served.Load()
	if c := t.cache.Load(); c != nil && c.served == served {
		return c.st
	}
	st := in.streamFor(t.subject)
	t.cache.Store(&targetStream{served: served, st: st})
	return st
}

// streamFor returns the served stream one of whose patterns matches a
// literal subject; nil if none does.
func (in *ingress) streamFor(subject string) *ingressStream {
	served := in.served.Load()
	if served == nil {
		return nil
	}
	for _, st := range *served {
		for _, p := range st.subjects {
			if subjectMatches(p, subject) {
				return st
			}
		}
	}
	return nil
}

// publishServed snapshots the served streams for streamFor. in.mu is held.
func (in *ingress) publishServed() {
	list := make([]*ingressStream, 0, len(in.streams))
	for _, st := range in.streams {
		list = append(list, st)
	}
	in.served.Store(&list)
}

// startRoutes opens the route rules and hands them to the ingress. It runs
// before the ingress serves any stream, so no message is stored unrouted
// while the rules load.
func (s *Server) startRoutes(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, routeLoadTimeout)
	defer cancel()
	rt, err := openRouter(ctx, s.js, s.log.With("component", "routes"), s.cfg.exprConfig())
	if err != nil {
		return fmt.Errorf("broker: route rules: %w", err)
	}
	s.routes = rt
	s.ingress.routes = rt
	if rt.health, err = s.startRouteHealth(rt); err != nil {
		return fmt.Errorf("broker: route health: %w", err)
	}
	return nil
}

// stopRoutes stops the rule watcher; the ingress keeps the last table.
func (s *Server) stopRoutes() error {
	if s.routes == nil {
		return nil
	}
	if s.routes.health != nil {
		s.routes.health.close()
	}
	if err := s.routes.close(); err != nil {
		return fmt.Errorf("route rules: %w", err)
	}
	return nil
}

// routeBucketBytes bounds the route rules on disk.
const routeBucketBytes = 16 << 20

// openRouter creates the bucket if needed, loads every rule and starts the
// watcher.
func openRouter(ctx context.Context, js jetstream.JetStream, log *slog.Logger, ec expr.Config) (*router, error) {
	env, err := expr.NewEnvConfig(ec)
	if err != nil {
		return nil, err
	}
	kv, err := jsutil.Bucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      semaq.RouteBucket,
		Description: "SemaQ route rules",
		History:     1,
		MaxBytes:    routeBucketBytes, // a full bucket refuses new rules
		Storage:     jetstream.FileStorage,
		Replicas:    1,
	})
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", semaq.RouteBucket, err)
	}
	rt := &router{
		log:     log,
		env:     env,
		kv:      kv,
		changed: make(chan struct{}),
		done:    make(chan struct{}),
		stopped: make(chan struct{}),
	}
	// The watcher outlives ctx: it runs until close.
	w, err := kv.WatchAll(context.WithoutCancel(ctx))
	if err != nil {
		return nil, fmt.Errorf("watching bucket %s: %w", semaq.RouteBucket, err)
	}
	rt.watcher = w
	m := &routeModel{rules: map[string]*rule{}, broken: map[string]*brokenRule{}}
load:
	for {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("watcher of bucket %s stopped while loading", semaq.RouteBucket)
			}
			if e == nil {
				break load
			}
			m.apply(e, env, log)
		case <-ctx.Done():
			_ = w.Stop()
			return nil, fmt.Errorf("loading bucket %s: %w", semaq.RouteBucket, ctx.Err())
		}
	}
	rt.table.Store(m.table())
	if n := len(m.rules); n > 0 {
		log.Info("route rules loaded", "rules", n, "not_loaded", len(m.broken))
	}
	go rt.watch(m)
	return rt, nil
}

// routeModel is the watcher's working copy of the rules.
type routeModel struct {
	rev    uint64
	rules  map[string]*rule
	broken map[string]*brokenRule
}

func (m *routeModel) apply(e jetstream.KeyValueEntry, env *expr.Env, log *slog.Logger) {
	m.rev = max(m.rev, e.Revision())
	name := e.Key()
	if cur, ok := m.rules[name]; ok && cur.rev == e.Revision() {
		return
	}
	delete(m.rules, name)
	delete(m.broken, name)
	if e.Operation() != jetstream.KeyValuePut {
		return
	}
	var d semaq.Route
	err := json.Unmarshal(e.Value(), &d)
	if err == nil && d.Name != name {
		err = fmt.Errorf("stored under key %q but named %q", name, d.Name)
	}
	var r *rule
	if err == nil {
		r, err = compileRule(env, d)
	}
	if err != nil {
		if d.Name == "" {
			d.Name = name
		}
		log.Warn("route rule not loaded: it does not route on this node", "route", name, "revision", e.Revision(), "err", err)
		m.broken[name] = &brokenRule{def: d, rev: e.Revision(), created: e.Created(), err: err.Error()}
		return
	}
	r.rev, r.created = e.Revision(), e.Created()
	m.rules[name] = r
}

func (m *routeModel) table() *routeTable { return newRouteTable(m.rev, m.rules, m.broken) }

// watch applies KV updates and publishes a table after each batch
// (everything already queued), so a burst of changes costs one rebuild.
func (rt *router) watch(m *routeModel) {
	defer close(rt.stopped)
	updates := rt.watcher.Updates()
	for {
		select {
		case e, ok := <-updates:
			if !ok {
				return
			}
			if e != nil {
				m.apply(e, rt.env, rt.log)
			}
		case <-rt.done:
			for range len(updates) {
				<-updates
			}
			return
		}
	batch:
		for {
			select {
			case e, ok := <-updates:
				if !ok {
					break batch
				}
				if e != nil {
					m.apply(e, rt.env, rt.log)
				}
			default:
				break batch
			}
		}
		rt.publish(m.table())
	}
}

func (rt *router) publish(t *routeTable) {
	rt.table.Store(t)
	rt.mu.Lock()
	close(rt.changed)
	rt.changed = make(chan struct{})
	rt.mu.Unlock()
}

// waitRev returns once the table includes KV revision rev.
func (rt *router) waitRev(ctx context.Context, rev uint64) (*routeTable, error) {
	for {
		rt.mu.Lock()
		t, ch := rt.table.Load(), rt.changed
		rt.mu.Unlock()
		if t.rev >= rev {
			return t, nil
		}
		select {
		case <-ch:
		case <-rt.stopped:
			return nil, errors.New("the route watcher has stopped")
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the route table to load revision %d: %w", rev, ctx.Err())
		}
	}
}

// close stops the watcher. Idempotent.
func (rt *router) close() error {
	var err error
	rt.closeOnce.Do(func() {
		close(rt.done)
		err = rt.watcher.Stop()
		<-rt.stopped
	})
	if err != nil && !errors.Is(err, nats.ErrConnectionClosed) && !errors.Is(err, nats.ErrBadSubscription) {
		return err
	}
	return nil
}
