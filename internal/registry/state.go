package registry

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/schema"
)

// model is the registry's content as the watcher has read it from the
// bucket. Only the watcher goroutine (and Open, before it starts) touches
// it; readers get immutable snapshots of it (state).
type model struct {
	rev      uint64
	entries  map[int]*Entry
	hashes   map[int]string
	canon    map[string]int
	versions map[string]map[int]version
	configs  map[string]setting
	global   *setting
	bindings map[string]binding
}

// version is one version of a subject. rev is its KV revision, for
// compare-and-set updates.
type version struct {
	version int
	id      int
	deleted bool
	rev     uint64
}

type setting struct {
	mode schema.Mode
	rev  uint64
}

type binding struct {
	Binding
	rev uint64
}

func newModel() *model {
	return &model{
		entries:  make(map[int]*Entry),
		hashes:   make(map[int]string),
		canon:    make(map[string]int),
		versions: make(map[string]map[int]version),
		configs:  make(map[string]setting),
		bindings: make(map[string]binding),
	}
}

// apply records one KV entry. It returns the id of a schema the entry
// added, 0 otherwise, so the caller can compile new schemas once their
// batch is in. Malformed entries are logged and skipped: one bad key must
// not stop the registry.
func (m *model) apply(e jetstream.KeyValueEntry, log *slog.Logger) (added int) {
	m.rev = e.Revision()
	del := e.Operation() != jetstream.KeyValuePut
	key := e.Key()
	bad := func(err error) int {
		log.Warn("skipping malformed registry entry", "key", key, "revision", e.Revision(), "err", err)
		return 0
	}
	switch {
	case key == keySeq:
	case key == keyGlobalConfig:
		if del {
			m.global = nil
			return 0
		}
		var rec configRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return bad(err)
		}
		m.global = &setting{mode: rec.Compatibility, rev: e.Revision()}
	case strings.HasPrefix(key, prefixSchema):
		id, err := strconv.Atoi(key[len(prefixSchema):])
		if err != nil {
			return bad(err)
		}
		if del {
			delete(m.entries, id)
			delete(m.hashes, id)
			return 0
		}
		var rec schemaRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return bad(err)
		}
		m.entries[id] = &Entry{ID: id, SchemaType: rec.SchemaType, Schema: rec.Schema, References: rec.References}
		m.hashes[id] = rec.Hash
		return id
	case strings.HasPrefix(key, prefixCanon):
		hash := key[len(prefixCanon):]
		if del {
			delete(m.canon, hash)
			return 0
		}
		var rec canonRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return bad(err)
		}
		m.canon[hash] = rec.ID
	case strings.HasPrefix(key, prefixVersion):
		enc, vs, ok := strings.Cut(key[len(prefixVersion):], ".")
		if !ok {
			return bad(fmt.Errorf("no version in key"))
		}
		subject, err := decodeName(enc)
		if err != nil {
			return bad(err)
		}
		v, err := strconv.Atoi(vs)
		if err != nil {
			return bad(err)
		}
		if del {
			delete(m.versions[subject], v)
			if len(m.versions[subject]) == 0 {
				delete(m.versions, subject)
			}
			return 0
		}
		var rec versionRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return bad(err)
		}
		vm := m.versions[subject]
		if vm == nil {
			vm = make(map[int]version)
			m.versions[subject] = vm
		}
		vm[v] = version{version: v, id: rec.ID, deleted: rec.Deleted, rev: e.Revision()}
	case strings.HasPrefix(key, prefixConfig):
		subject, err := decodeName(key[len(prefixConfig):])
		if err != nil {
			return bad(err)
		}
		if del {
			delete(m.configs, subject)
			return 0
		}
		var rec configRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return bad(err)
		}
		m.configs[subject] = setting{mode: rec.Compatibility, rev: e.Revision()}
	case strings.HasPrefix(key, prefixBinding):
		pattern, err := decodeName(key[len(prefixBinding):])
		if err != nil {
			return bad(err)
		}
		if del {
			delete(m.bindings, pattern)
			return 0
		}
		var b Binding
		if err := json.Unmarshal(e.Value(), &b); err != nil {
			return bad(err)
		}
		b.Pattern = pattern
		m.bindings[pattern] = binding{Binding: b, rev: e.Revision()}
	default:
		log.Debug("ignoring unknown registry key", "key", key)
	}
	return 0
}

// compile parses the schema with id, replacing its entry by one with
// Compiled set. precompiled, when not nil, is the same schema already
// parsed by the Register call that wrote it. A schema whose format is not
// available (or that no longer parses) keeps a nil Compiled: it can still
// be read, not used to validate.
func (m *model) compile(id int, formats *schema.Formats, precompiled schema.Schema, log *slog.Logger) {
	e := m.entries[id]
	if e == nil || e.Compiled != nil {
		return
	}
	c := *e
	if precompiled != nil {
		c.Compiled = precompiled
		m.entries[id] = &c
		return
	}
	f, err := formats.Get(schema.Type(e.SchemaType))
	if err != nil {
		log.Warn("schema format not available; the schema can be read but not used", "id", id, "type", e.SchemaType)
		return
	}
	s, err := f.Parse(e.Schema, e.References, m.resolve)
	if err != nil {
		log.Warn("stored schema does not compile", "id", id, "type", e.SchemaType, "err", err)
		return
	}
	c.Compiled = s
	m.entries[id] = &c
}

// resolve returns a referenced schema (a live or soft-deleted version).
func (m *model) resolve(ref schema.Reference) (string, schema.Type, []schema.Reference, error) {
	v, ok := m.versions[ref.Subject][ref.Version]
	if !ok {
		return "", "", nil, fmt.Errorf("reference %q: subject %q version %d not found", ref.Name, ref.Subject, ref.Version)
	}
	e := m.entries[v.id]
	if e == nil {
		return "", "", nil, fmt.Errorf("reference %q: schema %d of subject %q version %d not found", ref.Name, v.id, ref.Subject, ref.Version)
	}
	return e.Schema, schema.Type(e.SchemaType), e.References, nil
}

// state is an immutable snapshot of the registry. Readers load it from an
// atomic pointer and never lock.
type state struct {
	rev      uint64
	entries  map[int]*Entry
	hashes   map[int]string
	canon    map[string]int
	subjects map[string]*subjectState
	// uses lists, for each id, the versions (live and soft-deleted) that
	// have it, ordered by subject and version. An id no version uses is
	// not visible.
	uses     map[int][]use
	configs  map[string]setting
	global   *setting
	bindings []compiledBinding // most specific first
	bindRevs map[string]uint64
	maxID    int
}

type use struct {
	subject string
	version
}

// subjectState is one subject's versions, oldest first.
type subjectState struct {
	versions []version
}

// snapshot builds an immutable state from the model. Entries are shared:
// they are never modified once in a model.
func (m *model) snapshot() *state {
	st := &state{
		rev:      m.rev,
		entries:  maps.Clone(m.entries),
		hashes:   maps.Clone(m.hashes),
		canon:    maps.Clone(m.canon),
		subjects: make(map[string]*subjectState, len(m.versions)),
		uses:     make(map[int][]use),
		configs:  maps.Clone(m.configs),
		bindRevs: make(map[string]uint64, len(m.bindings)),
	}
	if m.global != nil {
		g := *m.global
		st.global = &g
	}
	for id := range m.entries {
		st.maxID = max(st.maxID, id)
	}
	for subject, vm := range m.versions {
		vs := slices.SortedFunc(maps.Values(vm), func(a, b version) int { return a.version - b.version })
		st.subjects[subject] = &subjectState{versions: vs}
		for _, v := range vs {
			st.uses[v.id] = append(st.uses[v.id], use{subject: subject, version: v})
		}
	}
	for _, us := range st.uses {
		slices.SortFunc(us, func(a, b use) int {
			if c := strings.Compare(a.subject, b.subject); c != 0 {
				return c
			}
			return a.version.version - b.version.version
		})
	}
	for p, b := range m.bindings {
		st.bindings = append(st.bindings, compileBinding(b.Binding))
		st.bindRevs[p] = b.rev
	}
	sortBindings(st.bindings)
	return st
}

// live reports whether the subject has a version that is not soft-deleted.
func (s *subjectState) live() bool {
	return s != nil && slices.ContainsFunc(s.versions, func(v version) bool { return !v.deleted })
}

// list returns the versions, live only unless deleted.
func (s *subjectState) list(deleted bool) []version {
	if s == nil {
		return nil
	}
	out := make([]version, 0, len(s.versions))
	for _, v := range s.versions {
		if deleted || !v.deleted {
			out = append(out, v)
		}
	}
	return out
}

// latest returns the newest version, live only unless deleted.
func (s *subjectState) latest(deleted bool) (version, bool) {
	if s == nil {
		return version{}, false
	}
	for i := len(s.versions) - 1; i >= 0; i-- {
		if deleted || !s.versions[i].deleted {
			return s.versions[i], true
		}
	}
	return version{}, false
}

func (s *subjectState) get(n int) (version, bool) {
	if s == nil {
		return version{}, false
	}
	i, ok := slices.BinarySearchFunc(s.versions, n, func(v version, n int) int { return v.version - n })
	if !ok {
		return version{}, false
	}
	return s.versions[i], true
}

// next is the number the next registration gets: one past every version
// still stored, soft-deleted ones included, as in Confluent.
func (s *subjectState) next() int {
	if s == nil || len(s.versions) == 0 {
		return 1
	}
	return s.versions[len(s.versions)-1].version + 1
}

// visible returns the entry of id when some version uses it.
func (st *state) visible(id int) (*Entry, bool) {
	e := st.entries[id]
	if e == nil || len(st.uses[id]) == 0 {
		return nil, false
	}
	return e, true
}

// compatibility is the subject's mode, else the global one, else the
// default.
func (st *state) compatibility(subject string) schema.Mode {
	if c, ok := st.configs[subject]; ok && subject != "" {
		return c.mode
	}
	if st.global != nil {
		return st.global.mode
	}
	return schema.DefaultMode
}

// resolve is model.resolve over a snapshot.
func (st *state) resolve(ref schema.Reference) (string, schema.Type, []schema.Reference, error) {
	v, ok := st.subjects[ref.Subject].get(ref.Version)
	if !ok {
		return "", "", nil, fmt.Errorf("reference %q: subject %q version %d not found", ref.Name, ref.Subject, ref.Version)
	}
	e := st.entries[v.id]
	if e == nil {
		return "", "", nil, fmt.Errorf("reference %q: schema %d of subject %q version %d not found", ref.Name, v.id, ref.Subject, ref.Version)
	}
	return e.Schema, schema.Type(e.SchemaType), e.References, nil
}

// referencedBy lists the ids of live versions whose schema references
// subject version v, ascending.
func (st *state) referencedBy(subject string, v int) []int {
	var out []int
	for id, e := range st.entries {
		if !slices.ContainsFunc(e.References, func(r schema.Reference) bool { return r.Subject == subject && r.Version == v }) {
			continue
		}
		if slices.ContainsFunc(st.uses[id], func(u use) bool { return !u.deleted }) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}
