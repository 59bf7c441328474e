// Package table is the compiled form of the route rules (docs/routing.md):
// what the ingress evaluates, once per published message, to pick the
// subject a message is stored under.
//
// A Table is the rule set at one revision of the SQ_ROUTES bucket, each
// rule compiled once (CompileRule: its CEL expressions, its targets and
// their cumulative weights) and indexed by the first token of its subject
// pattern. A table never changes once built: the routes subsystem
// (internal/broker/routes), which owns the bucket, builds a new one on
// every change and swaps it in with one atomic store; the ingress loads it
// with one atomic load and calls Match without a lock. A rebuild reuses
// the Rule values of unchanged rules, so what is mutable lives in them and
// is atomic: the counters (Routed, Stats), what the ingress remembers of a
// target (Lookup, Remember), and an adaptive split's effective weights,
// which the routes subsystem computes from its targets' health
// (SetWeights, adaptive.go).
//
// The package is a leaf: it imports no part of the node, so the ingress
// can route without depending on the subsystem that keeps the rules.
package table

import (
	"cmp"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/keyhash"
	"github.com/semaq/semaq/internal/broker/subjects"
	"github.com/semaq/semaq/internal/expr"
	"github.com/semaq/semaq/semaq"
)

// Rule is one compiled route rule. Immutable except for its counters and
// an adaptive split's weights, which are atomic.
type Rule struct {
	def     semaq.Route
	rev     uint64
	created time.Time
	when    *expr.Program // nil matches every message
	key     *expr.Program // a split's sticky key; nil picks at random
	to      []*Target
	total   uint64 // sum of the weights

	matched atomic.Uint64
	errs    atomic.Uint64
	lastErr atomic.Pointer[string]

	// eff holds an adaptive split's effective weights (adaptive.go); nil
	// routes by the configured weights.
	eff atomic.Pointer[Weights]
}

// Target is one target subject of a rule.
type Target struct {
	subject string
	weight  uint64
	upto    uint64 // cumulative weight: picked for a point below it

	matched atomic.Uint64 // for splits
	// memo is what the ingress remembers of the target: which served
	// stream captures subject, valid while its stream snapshot is the one
	// it was computed from (Lookup, Remember).
	memo atomic.Pointer[memo]
}

type memo struct{ key, val any }

// Broken is a stored rule this node cannot run: it is listed, and never
// routes. Immutable.
type Broken struct {
	Route   semaq.Route
	Rev     uint64    // the bucket revision it was stored at
	Created time.Time // when it was stored
	Err     string    // why it does not run
}

// Table is the compiled rule set at one KV revision. Immutable: the
// ingress reads it without a lock.
type Table struct {
	rev    uint64
	rules  []*Rule // by (order, name)
	broken []*Broken
	// byFirst holds, for each literal first token of a rule's subject
	// pattern, the rules that may match a subject starting with it (the
	// rules starting with a wildcard included), in order. wild is the list
	// for any other first token.
	byFirst map[string][]*Rule
	wild    []*Rule
}

// candidates returns the rules whose pattern may match subject, in order.
func (t *Table) candidates(subject string) []*Rule {
	first := subject
	if i := strings.IndexByte(subject, '.'); i >= 0 {
		first = subject[:i]
	}
	if c, ok := t.byFirst[first]; ok {
		return c
	}
	return t.wild
}

// Compare orders rule definitions as a table tries them: by Order, then
// by Name.
func Compare(a, b *semaq.Route) int {
	if c := cmp.Compare(a.Order, b.Order); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// New builds the table of the compiled rules and the broken ones at
// bucket revision rev. The rules are the table's from then on: a later
// table may share them, so their counters carry over.
func New(rev uint64, rules iter.Seq[*Rule], broken iter.Seq[*Broken]) *Table {
	t := &Table{rev: rev, rules: slices.Collect(rules), broken: slices.Collect(broken), byFirst: make(map[string][]*Rule)}
	slices.SortFunc(t.rules, func(a, b *Rule) int { return Compare(&a.def, &b.def) })
	slices.SortFunc(t.broken, func(a, b *Broken) int { return Compare(&a.Route, &b.Route) })
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
		var list []*Rule
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

// Compile compiles defs into a table, as the routes subsystem would at
// revision 0.
func Compile(env *expr.Env, defs ...semaq.Route) (*Table, error) {
	rules := make(map[string]*Rule, len(defs))
	for _, d := range defs {
		r, err := CompileRule(env, d, 0, time.Time{})
		if err != nil {
			return nil, fmt.Errorf("route %s: %w", d.Name, err)
		}
		rules[d.Name] = r
	}
	return New(0, maps.Values(rules), slices.Values([]*Broken(nil))), nil
}

// Rules are the rules the table routes with, in the order it tries them.
// The slice is the table's: read it, do not change it.
func (t *Table) Rules() []*Rule { return t.rules }

// Broken are the stored rules this node cannot run, in order. The slice
// is the table's: read it, do not change it.
func (t *Table) Broken() []*Broken { return t.broken }

// Find returns the rule named name, nil when the table routes with none.
func (t *Table) Find(name string) *Rule {
	for _, r := range t.rules {
		if r.def.Name == name {
			return r
		}
	}
	return nil
}

// CompileRule checks a rule and compiles its expressions; rev and created
// are its bucket revision and when it was stored there. It does not look
// at streams: whether a target is captured is checked when the rule is
// added and on every publish it routes.
func CompileRule(env *expr.Env, d semaq.Route, rev uint64, created time.Time) (*Rule, error) {
	if err := semaq.CheckRouteName(d.Name); err != nil {
		return nil, err
	}
	if d.Subject == "" {
		return nil, errors.New("no subject pattern: the rule needs --subject")
	}
	if err := semaq.CheckSubject(d.Subject, true); err != nil {
		return nil, fmt.Errorf("subject: %w", err)
	}
	r := &Rule{def: d, rev: rev, created: created}
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
		r.to = []*Target{{subject: d.To, weight: 1, upto: 1}}
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
			r.to = append(r.to, &Target{subject: s.Subject, weight: uint64(s.Weight), upto: r.total})
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
	if err := semaq.CheckSubject(subj, false); err != nil {
		return err
	}
	return subjects.CheckPublic(subj)
}

// Judge evaluates the rule on m as Match does, and counts nothing: the
// target picked, nil when the rule does not match, and the sticky key
// used. An evaluation error is a non-match, returned.
func (r *Rule) Judge(m expr.Message) (t *Target, key string, err error) {
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
		h = keyhash.Of(key)
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

// StickyKey evaluates a split's sticky key on m alone, whether the rule
// matches or not: "" for a rule without one.
func (r *Rule) StickyKey(m expr.Message) (string, error) {
	if r.key == nil {
		return "", nil
	}
	return r.key.Key(m)
}

func (r *Rule) fail(err error) {
	r.errs.Add(1)
	msg := err.Error()
	r.lastErr.Store(&msg)
}

// Len is the number of rules the table routes with.
func (t *Table) Len() int { return len(t.rules) }

// Match finds the first rule, in order, that picks a target for m: the
// rule and its target, or nils when none does. A rule whose evaluation
// fails does not match; the failure is counted on it. Match counts no
// routed message: the caller calls Routed once the target is accepted.
func (t *Table) Match(m *nats.Msg) (*Rule, *Target) { return t.match(m, true) }

// Try is Match for a dry run: it counts nothing, failures included.
func (t *Table) Try(m *nats.Msg) (*Rule, *Target) { return t.match(m, false) }

func (t *Table) match(m *nats.Msg, count bool) (*Rule, *Target) {
	cands := t.candidates(m.Subject)
	if len(cands) == 0 {
		return nil, nil
	}
	em := expr.Message{Subject: m.Subject, Header: m.Header, Data: m.Data}
	for _, r := range cands {
		if !subjects.Match(r.def.Subject, m.Subject) {
			continue
		}
		tg, _, err := r.Judge(em)
		if err != nil {
			if count {
				r.fail(err)
			}
			continue
		}
		if tg != nil {
			return r, tg
		}
	}
	return nil, nil
}

// Name is the rule's name.
func (r *Rule) Name() string { return r.def.Name }

// Route is the rule's definition. Its Split is the rule's: do not change
// it.
func (r *Rule) Route() semaq.Route { return r.def }

// Rev is the bucket revision the rule was stored at.
func (r *Rule) Rev() uint64 { return r.rev }

// Created is when the rule was stored.
func (r *Rule) Created() time.Time { return r.created }

// Targets are the rule's targets, in the order its definition gives them
// (one for a rule with To). The slice is the rule's: read it, do not
// change it.
func (r *Rule) Targets() []*Target { return r.to }

// Routed counts a message the rule sent to tg.
func (r *Rule) Routed(tg *Target) {
	r.matched.Add(1)
	if len(r.to) > 1 {
		tg.matched.Add(1)
	}
}

// Stats are the rule's counters on this node: the messages it routed, by
// target for a split, and its evaluation errors.
func (r *Rule) Stats() semaq.RouteStats {
	s := semaq.RouteStats{Matched: r.matched.Load(), Errors: r.errs.Load()}
	if p := r.lastErr.Load(); p != nil {
		s.LastError = *p
	}
	if len(r.to) > 1 {
		s.Targets = make(map[string]uint64, len(r.to))
		for _, t := range r.to {
			s.Targets[t.subject] = t.matched.Load()
		}
	}
	return s
}

// Subject is the target's subject.
func (tg *Target) Subject() string { return tg.subject }

// Weight is the target's configured weight: 1 for a rule's single target.
func (tg *Target) Weight() uint64 { return tg.weight }

// Matched counts the messages a split routed to the target on this node;
// it stays 0 for a rule's single target, which the rule's own count
// covers.
func (tg *Target) Matched() uint64 { return tg.matched.Load() }

// Lookup returns what Remember stored for the target under key (compared
// as an interface value), if key is the last one stored.
func (tg *Target) Lookup(key any) (any, bool) {
	if m := tg.memo.Load(); m != nil && m.key == key {
		return m.val, true
	}
	return nil, false
}

// Remember stores val for the target under key, replacing what was there.
func (tg *Target) Remember(key, val any) { tg.memo.Store(&memo{key: key, val: val}) }
