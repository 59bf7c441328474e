package policies

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/subjects"
	"github.com/semaq/semaq/internal/plugin"
	"github.com/semaq/semaq/semaq"
)

// Table is the rules and plugins in force on a node: immutable, read with
// one atomic load (Store.Table).
type Table struct {
	rev     uint64
	rules   []*rule // by name
	broken  []*broken
	plugins []*loadedPlugin // by name
	// tokenSets caches the token-stream filter of each tenant token seen
	// (the rules for every tenant and the tenant's own), made on first use.
	tokenSets sync.Map // tenant token -> *tokenSet
}

// broken is a stored rule or plugin this node cannot run, and why.
type broken struct {
	name, kind string
	rule       *semaq.PolicyRule
	plugin     *semaq.Plugin
	rev        uint64
	created    time.Time
	err        string
}

// Revision is the bucket revision the table includes.
func (t *Table) Revision() uint64 { return t.rev }

// Empty reports whether the table has nothing to run: the ingress step
// returns at once.
func (t *Table) Empty() bool { return len(t.rules) == 0 && len(t.plugins) == 0 }

func (t *Table) rule(name string) *rule {
	i, ok := slices.BinarySearchFunc(t.rules, name, func(r *rule, n string) int { return strings.Compare(r.def.Name, n) })
	if !ok {
		return nil
	}
	return t.rules[i]
}

func (t *Table) plugin(name string) *loadedPlugin {
	i, ok := slices.BinarySearchFunc(t.plugins, name, func(p *loadedPlugin, n string) int { return strings.Compare(p.def.Name, n) })
	if !ok {
		return nil
	}
	return t.plugins[i]
}

// attached says whether a rule or plugin attached to subjects, streams and
// tenant applies to a message of tenant on subject of stream.
func attached(subs, streams []string, ruleTenant, tenant, stream, subject string) bool {
	if ruleTenant != "" && ruleTenant != tenant {
		return false
	}
	for _, s := range streams {
		if s == stream {
			return true
		}
	}
	for _, p := range subs {
		if subjects.Match(p, subject) {
			return true
		}
	}
	return false
}

// model is the watcher's working copy.
type model struct {
	s       *Store
	log     *slog.Logger
	rev     uint64
	rules   map[string]*rule
	plugins map[string]*loadedPlugin
	broken  map[string]*broken // by key

	// mu guards slots, which Close drains from another goroutine.
	mu    sync.Mutex
	slots map[string]*plugin.Slot // by plugin name, across versions
}

func newModel(s *Store) *model {
	return &model{s: s, log: s.log, rules: map[string]*rule{}, plugins: map[string]*loadedPlugin{}, broken: map[string]*broken{}}
}

// apply folds one KV entry into the model. A plugin's module is fetched
// and compiled here, on the watcher's goroutine: the table that shows the
// new version runs it, and the old version drains before it is dropped.
func (m *model) apply(e jetstream.KeyValueEntry) {
	m.rev = max(m.rev, e.Revision())
	key := e.Key()
	switch {
	case strings.HasPrefix(key, rulePrefix):
		m.applyRule(strings.TrimPrefix(key, rulePrefix), e)
	case strings.HasPrefix(key, pluginPrefix):
		m.applyPlugin(strings.TrimPrefix(key, pluginPrefix), e)
	default:
		m.log.Warn("policy bucket: key of nothing this node knows; ignored", "key", key)
	}
}

func (m *model) applyRule(name string, e jetstream.KeyValueEntry) {
	if cur, ok := m.rules[name]; ok && cur.rev == e.Revision() {
		return
	}
	delete(m.rules, name)
	delete(m.broken, rulePrefix+name)
	if e.Operation() != jetstream.KeyValuePut {
		return
	}
	var d semaq.PolicyRule
	err := json.Unmarshal(e.Value(), &d)
	if err == nil && d.Name != name {
		err = fmt.Errorf("stored under %q but named %q", name, d.Name)
	}
	var r *rule
	if err == nil {
		if err = checkRule(&d); err == nil {
			r, err = compileRule(d, m.s.ruleEnv())
		}
	}
	if err != nil {
		m.log.Warn("policy rule not loaded: it does not run on this node", "policy", name, "revision", e.Revision(), "err", err)
		m.broken[rulePrefix+name] = &broken{name: name, kind: "rule", rule: &d, rev: e.Revision(), created: e.Created(), err: err.Error()}
		return
	}
	r.rev, r.created = e.Revision(), e.Created()
	m.rules[name] = r
}

func (m *model) applyPlugin(name string, e jetstream.KeyValueEntry) {
	if cur, ok := m.plugins[name]; ok && cur.rev == e.Revision() {
		return
	}
	delete(m.broken, pluginPrefix+name)
	if e.Operation() != jetstream.KeyValuePut {
		delete(m.plugins, name)
		m.s.deps.Metrics.PluginEnabled(name, false, true)
		ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
		defer cancel()
		if err := m.dropSlot(ctx, name); err != nil {
			m.log.Warn("plugin removed; its last calls did not finish in time", "plugin", name, "err", err)
		}
		return
	}
	var d semaq.Plugin
	err := json.Unmarshal(e.Value(), &d)
	if err == nil && d.Name != name {
		err = fmt.Errorf("stored under %q but named %q", name, d.Name)
	}
	var p *loadedPlugin
	if err == nil {
		if err = checkPlugin(&d); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), loadTimeout)
			p, err = m.s.loadPlugin(ctx, d)
			cancel()
		}
	}
	if err != nil {
		// The old version, if any, keeps running (its slot is
		// untouched): a node that cannot load the new one says so, and
		// does not drop what worked.
		m.log.Warn("plugin not loaded: this node keeps the version it had", "plugin", name, "revision", e.Revision(), "err", err)
		m.broken[pluginPrefix+name] = &broken{name: name, kind: "plugin", plugin: &d, rev: e.Revision(), created: e.Created(), err: err.Error()}
		return
	}
	p.rev, p.created = e.Revision(), e.Created()
	m.plugins[name] = p
	m.s.deps.Metrics.PluginEnabled(name, true, false)
}

// table builds the table of what the model holds.
func (m *model) table() *Table {
	t := &Table{rev: m.rev}
	t.rules = slices.SortedFunc(maps.Values(m.rules), func(a, b *rule) int { return strings.Compare(a.def.Name, b.def.Name) })
	t.plugins = slices.SortedFunc(maps.Values(m.plugins), func(a, b *loadedPlugin) int { return strings.Compare(a.def.Name, b.def.Name) })
	t.broken = slices.SortedFunc(maps.Values(m.broken), func(a, b *broken) int {
		return strings.Compare(a.kind+a.name, b.kind+b.name)
	})
	return t
}

// closePlugins drains every plugin at shutdown.
func (m *model) closePlugins(ctx context.Context) error {
	m.mu.Lock()
	names := slices.Collect(maps.Keys(m.slots))
	m.mu.Unlock()
	var errs []error
	for _, n := range names {
		if err := m.dropSlot(ctx, n); err != nil {
			errs = append(errs, fmt.Errorf("plugin %s: %w", n, err))
		}
	}
	return errors.Join(errs...)
}
