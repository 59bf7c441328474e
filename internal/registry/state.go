package registry

import (
	"encoding/json"
	"errors"
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
//
// The model keeps its derived views (each subject's sorted versions, the
// versions using each id, the compiled bindings) up to date entry by
// entry, so a snapshot after one registration costs a few map copies,
// not a rebuild of every subject: registering no longer slows down with a
// subject's version count.
type model struct {
	rev      uint64
	entries  *shardedMap[int, *Entry]
	canon    *shardedMap[string, int]
	subjects *shardedMap[string, *subjectState] // immutable values, replaced on change
	uses     *shardedMap[int, []use]            // immutable slices, replaced on change
	configs  map[string]setting
	global   *setting
	bindings map[string]binding
	compiled []compiledBinding // nil when bindings changed since the last snapshot
	maxID    int               // highest id ever seen
	bytes    int               // schema text held in entries
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
		entries:  newShardedMap[int, *Entry](),
		canon:    newShardedMap[string, int](),
		subjects: newShardedMap[string, *subjectState](),
		uses:     newShardedMap[int, []use](),
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
			if old := m.entries.at(id); old != nil {
				m.bytes -= len(old.Schema)
			}
			m.entries.del(id)
			return 0
		}
		var rec schemaRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return bad(err)
		}
		if old := m.entries.at(id); old != nil {
			m.bytes -= len(old.Schema)
		}
		m.entries.set(id, &Entry{ID: id, SchemaType: rec.SchemaType, Schema: rec.Schema, References: rec.References})
		m.bytes += len(rec.Schema)
		m.maxID = max(m.maxID, id)
		return id
	case strings.HasPrefix(key, prefixCanon):
		hash := key[len(prefixCanon):]
		if del {
			m.canon.del(hash)
			return 0
		}
		var rec canonRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return bad(err)
		}
		m.canon.set(hash, rec.ID)
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
			m.deleteVersion(subject, v)
			return 0
		}
		var rec versionRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return bad(err)
		}
		m.putVersion(subject, version{version: v, id: rec.ID, deleted: rec.Deleted, rev: e.Revision()})
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
		m.compiled = nil
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

// putVersion adds or replaces version nv of subject. Snapshots share the
// versions slice: a version past the end is appended in place (snapshots
// hold a shorter length, so they do not see it), anything else copies.
func (m *model) putVersion(subject string, nv version) {
	old := m.subjects.at(subject)
	ns := &subjectState{}
	if old != nil {
		*ns = *old
	}
	i, found := slices.BinarySearchFunc(ns.versions, nv.version, func(v version, n int) int { return v.version - n })
	switch {
	case found:
		prev := ns.versions[i]
		if !prev.deleted {
			ns.live--
		}
		ns.versions = slices.Clone(ns.versions)
		ns.versions[i] = nv
		m.removeUse(prev.id, subject, prev.version)
	case i == len(ns.versions):
		ns.versions = append(ns.versions, nv)
	default:
		ns.versions = slices.Insert(slices.Clone(ns.versions), i, nv)
	}
	if !nv.deleted {
		ns.live++
	}
	m.subjects.set(subject, ns)
	m.addUse(nv.id, use{subject: subject, version: nv})
}

func (m *model) deleteVersion(subject string, n int) {
	old := m.subjects.at(subject)
	if old == nil {
		return
	}
	i, found := slices.BinarySearchFunc(old.versions, n, func(v version, n int) int { return v.version - n })
	if !found {
		return
	}
	prev := old.versions[i]
	m.removeUse(prev.id, subject, n)
	if len(old.versions) == 1 {
		m.subjects.del(subject)
		return
	}
	ns := &subjectState{versions: slices.Delete(slices.Clone(old.versions), i, i+1), live: old.live}
	if !prev.deleted {
		ns.live--
	}
	m.subjects.set(subject, ns)
}

func compareUse(a, b use) int {
	if c := strings.Compare(a.subject, b.subject); c != 0 {
		return c
	}
	return a.version.version - b.version.version
}

// addUse records that u uses id, keeping uses ordered by subject and
// version. The slice is copied: snapshots share the old one.
func (m *model) addUse(id int, u use) {
	us := m.uses.at(id)
	i, _ := slices.BinarySearchFunc(us, u, compareUse)
	m.uses.set(id, slices.Insert(slices.Clone(us), i, u))
}

func (m *model) removeUse(id int, subject string, n int) {
	us := m.uses.at(id)
	i, found := slices.BinarySearchFunc(us, use{subject: subject, version: version{version: n}}, compareUse)
	if !found {
		return
	}
	if len(us) == 1 {
		m.uses.del(id)
		return
	}
	m.uses.set(id, slices.Delete(slices.Clone(us), i, i+1))
}

// compile parses the schema with id, replacing its entry by one with
// Compiled set. precompiled, when not nil, is the same schema already
// parsed by the Register call that wrote it. A schema whose format is not
// available (or that no longer parses) keeps a nil Compiled: it can still
// be read, not used to validate.
func (m *model) compile(id int, formats *schema.Formats, precompiled schema.Schema, log *slog.Logger) {
	e := m.entries.at(id)
	if e == nil || e.Compiled != nil || e.Err != nil {
		return
	}
	c := *e
	if precompiled != nil {
		c.Compiled = precompiled
		m.entries.set(id, &c)
		return
	}
	f, err := formats.Get(schema.Type(e.SchemaType))
	if err != nil {
		log.Warn("schema format not available; the schema can be read but not used", "id", id, "type", e.SchemaType)
		c.Err = err
		m.entries.set(id, &c)
		return
	}
	// Limits are enforced here too (the formats carry them): a stored
	// schema over them is refused in milliseconds instead of hanging the
	// start-up, and schema-on-write refuses payloads for it.
	s, err := f.Parse(e.Schema, e.References, m.resolve)
	if err != nil {
		var where []string
		for _, u := range m.uses.at(id) {
			where = append(where, fmt.Sprintf("%s version %d", u.subject, u.version.version))
		}
		log.Error("stored schema refused: it can be read but not used to validate; publishes needing it are refused",
			"id", id, "type", e.SchemaType, "subjects", where, "over_limits", errors.Is(err, schema.ErrLimit), "err", err)
		c.Err = err
		m.entries.set(id, &c)
		return
	}
	c.Compiled = s
	m.entries.set(id, &c)
}

// resolve returns a referenced schema (a live or soft-deleted version).
func (m *model) resolve(ref schema.Reference) (string, schema.Type, []schema.Reference, error) {
	v, ok := m.subjects.at(ref.Subject).get(ref.Version)
	if !ok {
		return "", "", nil, fmt.Errorf("reference %q: subject %q version %d not found", ref.Name, ref.Subject, ref.Version)
	}
	e := m.entries.at(v.id)
	if e == nil {
		return "", "", nil, fmt.Errorf("reference %q: schema %d of subject %q version %d not found", ref.Name, v.id, ref.Subject, ref.Version)
	}
	return e.Schema, schema.Type(e.SchemaType), e.References, nil
}

// state is an immutable snapshot of the registry. Readers load it from an
// atomic pointer and never lock.
type state struct {
	rev      uint64
	entries  *shardedMap[int, *Entry]
	canon    *shardedMap[string, int]
	subjects *shardedMap[string, *subjectState]
	// uses lists, for each id, the versions (live and soft-deleted) that
	// have it, ordered by subject and version. An id no version uses is
	// not visible.
	uses     *shardedMap[int, []use]
	configs  map[string]setting
	global   *setting
	bindings []compiledBinding // most specific first
	bindRevs map[string]uint64
	maxID    int
	bytes    int // schema text held in entries
}

type use struct {
	subject string
	version
}

// subjectState is one subject's versions, oldest first, and how many are
// live.
type subjectState struct {
	versions []version
	live     int
}

// snapshot builds an immutable state from the model. Entries, subject
// states and use lists are shared: they are never modified once in a
// model, only replaced.
func (m *model) snapshot() *state {
	st := &state{
		rev:      m.rev,
		entries:  m.entries.freeze(),
		canon:    m.canon.freeze(),
		subjects: m.subjects.freeze(),
		uses:     m.uses.freeze(),
		configs:  maps.Clone(m.configs),
		bindRevs: make(map[string]uint64, len(m.bindings)),
		maxID:    m.maxID,
		bytes:    m.bytes,
	}
	if m.global != nil {
		g := *m.global
		st.global = &g
	}
	if m.compiled == nil {
		m.compiled = make([]compiledBinding, 0, len(m.bindings))
		for _, b := range m.bindings {
			m.compiled = append(m.compiled, compileBinding(b.Binding))
		}
		sortBindings(m.compiled)
	}
	st.bindings = m.compiled
	for p, b := range m.bindings {
		st.bindRevs[p] = b.rev
	}
	return st
}

// live reports whether the subject has a version that is not soft-deleted.
func (s *subjectState) hasLive() bool { return s != nil && s.live > 0 }

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
	e := st.entries.at(id)
	if e == nil || len(st.uses.at(id)) == 0 {
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
	v, ok := st.subjects.at(ref.Subject).get(ref.Version)
	if !ok {
		return "", "", nil, fmt.Errorf("reference %q: subject %q version %d not found", ref.Name, ref.Subject, ref.Version)
	}
	e := st.entries.at(v.id)
	if e == nil {
		return "", "", nil, fmt.Errorf("reference %q: schema %d of subject %q version %d not found", ref.Name, v.id, ref.Subject, ref.Version)
	}
	return e.Schema, schema.Type(e.SchemaType), e.References, nil
}

// referencedBy lists the ids of live versions whose schema references
// subject version v, ascending.
func (st *state) referencedBy(subject string, v int) []int {
	var out []int
	for id, e := range st.entries.all() {
		if !slices.ContainsFunc(e.References, func(r schema.Reference) bool { return r.Subject == subject && r.Version == v }) {
			continue
		}
		if slices.ContainsFunc(st.uses.at(id), func(u use) bool { return !u.deleted }) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}
