package routes

import (
	"cmp"
	"errors"
	"fmt"
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

// Rule is one compiled route rule. Immutable except for its counters.
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

	// eff holds an adaptive split's effective weights, by target
	// (health.go); nil routes by the configured weights.
	eff atomic.Pointer[adaptiveWeights]
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

// brokenRule is a stored rule this node cannot run.
type brokenRule struct {
	def     semaq.Route
	rev     uint64
	created time.Time
	err     string
}

// Table is the compiled rule set at one KV revision. Immutable: the
// ingress reads it without a lock.
type Table struct {
	rev    uint64
	rules  []*Rule // by (order, name)
	broken []*brokenRule
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

func ruleLess(ao int, an string, bo int, bn string) int {
	if c := cmp.Compare(ao, bo); c != 0 {
		return c
	}
	return strings.Compare(an, bn)
}

func newTable(rev uint64, rules map[string]*Rule, broken map[string]*brokenRule) *Table {
	t := &Table{rev: rev, byFirst: make(map[string][]*Rule)}
	for _, r := range rules {
		t.rules = append(t.rules, r)
	}
	slices.SortFunc(t.rules, func(a, b *Rule) int { return ruleLess(a.def.Order, a.def.Name, b.def.Order, b.def.Name) })
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

// find returns the loaded rule named name.
func (t *Table) find(name string) *Rule {
	for _, r := range t.rules {
		if r.def.Name == name {
			return r
		}
	}
	return nil
}

// compileRule checks a rule and compiles its expressions. It does not look
// at streams: whether a target is captured is checked when the rule is
// added and on every publish it routes.
func compileRule(env *expr.Env, d semaq.Route) (*Rule, error) {
	if err := semaq.CheckRouteName(d.Name); err != nil {
		return nil, err
	}
	if d.Subject == "" {
		return nil, errors.New("no subject pattern: the rule needs --subject")
	}
	if err := semaq.CheckSubject(d.Subject, true); err != nil {
		return nil, fmt.Errorf("subject: %w", err)
	}
	r := &Rule{def: d}
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

// judge evaluates the rule on m: the target picked, nil when the rule does
// not match, and the sticky key used. An evaluation error is a non-match,
// returned for counting.
func (r *Rule) judge(m expr.Message) (t *Target, key string, err error) {
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
		tg, _, err := r.judge(em)
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

// Routed counts a message the rule sent to tg.
func (r *Rule) Routed(tg *Target) {
	r.matched.Add(1)
	if len(r.to) > 1 {
		tg.matched.Add(1)
	}
}

// Subject is the target's subject.
func (tg *Target) Subject() string { return tg.subject }

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

// NewTable compiles defs into a table, as the watcher would at revision 0.
func NewTable(env *expr.Env, defs ...semaq.Route) (*Table, error) {
	m := newModel(env, nil)
	for _, d := range defs {
		r, err := compileRule(env, d)
		if err != nil {
			return nil, fmt.Errorf("route %s: %w", d.Name, err)
		}
		m.rules[d.Name] = r
	}
	return m.table(), nil
}
