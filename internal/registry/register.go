package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/schema"
)

// candidate is a submitted schema, parsed.
type candidate struct {
	typ      schema.Type
	format   schema.Format
	text     string
	refs     []schema.Reference
	compiled schema.Schema
	hash     string
}

// parse checks a submitted schema against st: a known type, references to
// existing subject versions (version -1 means the latest live one), text
// that parses.
func (r *Registry) parse(st *state, s SchemaRequest) (*candidate, error) {
	typ := schema.Type(strings.ToUpper(strings.TrimSpace(s.SchemaType)))
	if typ == "" {
		typ = schema.TypeAvro
	}
	f, err := r.formats.Get(typ)
	if err != nil {
		return nil, errorf(CodeInvalidSchema, "Invalid schema type %s: %v", s.SchemaType, err)
	}
	if strings.TrimSpace(s.Schema) == "" {
		return nil, errorf(CodeInvalidSchema, "Empty schema")
	}
	if limit := r.cfg.Limits.MaxSchemaBytes; len(s.Schema) > limit {
		return nil, errorf(CodeInvalidSchema, "Invalid schema: the schema has %d bytes, more than the limit of %d (MaxSchemaBytes)", len(s.Schema), limit)
	}
	refs := make([]schema.Reference, len(s.References))
	for i, ref := range s.References {
		switch {
		case ref.Name == "":
			return nil, errorf(CodeInvalidSchema, "Invalid schema: reference %d has no name", i)
		case ref.Subject == "":
			return nil, errorf(CodeInvalidSchema, "Invalid schema: reference %q has no subject", ref.Name)
		case ref.Version == -1:
			v, ok := st.subjects.at(ref.Subject).latest(false)
			if !ok {
				return nil, errorf(CodeInvalidSchema, "Invalid schema: reference %q: subject %q not found", ref.Name, ref.Subject)
			}
			ref.Version = v.version
		case ref.Version < 1:
			return nil, errorf(CodeInvalidSchema, "Invalid schema: reference %q: version %d is not a valid version", ref.Name, ref.Version)
		}
		if _, ok := st.subjects.at(ref.Subject).get(ref.Version); !ok {
			return nil, errorf(CodeInvalidSchema, "Invalid schema: reference %q: subject %q version %d not found", ref.Name, ref.Subject, ref.Version)
		}
		refs[i] = ref
	}
	compiled, err := f.Parse(s.Schema, refs, st.resolve)
	if err != nil {
		return nil, errorf(CodeInvalidSchema, "Invalid schema: %v", err)
	}
	return &candidate{
		typ:      typ,
		format:   f,
		text:     s.Schema,
		refs:     refs,
		compiled: compiled,
		hash:     identity(typ, refs, compiled.Canonical()),
	}, nil
}

// Register adds the schema to subject and returns its global id. A schema
// identical to a live version of the subject returns that version's id and
// adds nothing. Otherwise the schema must be compatible with the subject's
// live versions under its compatibility mode (ErrIncompatible lists the
// reasons), and becomes the next version. The same schema under any
// subject has one id. With normalize, the canonical text is stored instead
// of the submitted one.
func (r *Registry) Register(ctx context.Context, subject string, s SchemaRequest, normalize bool) (int, error) {
	if err := checkSubject(subject); err != nil {
		return 0, err
	}
	r.wmu.Lock()
	defer r.wmu.Unlock()
	var id int
	var rev uint64
	err := retryCAS(func() (err error) {
		id, rev, err = r.registerOnce(ctx, subject, s, normalize)
		return err
	})
	if err != nil || rev == 0 {
		return id, err
	}
	return id, r.waitRev(ctx, rev)
}

// registerOnce is one attempt of Register (retryCAS). rev is the KV
// revision of the version it added; 0 when an identical live version made
// adding one unnecessary.
func (r *Registry) registerOnce(ctx context.Context, subject string, s SchemaRequest, normalize bool) (id int, rev uint64, err error) {
	st, err := r.caughtUp(ctx)
	if err != nil {
		return 0, 0, err
	}
	c, err := r.parse(st, s)
	if err != nil {
		return 0, 0, err
	}
	subj := st.subjects.at(subject)
	// An identical live version: its id, nothing added. Found through
	// the identity index, not by comparing every version.
	if have, ok := st.canon.get(c.hash); ok {
		if slices.ContainsFunc(st.uses.at(have), func(u use) bool { return u.subject == subject && !u.deleted }) {
			return have, 0, nil
		}
	}
	if err := r.checkBounds(st, subject, c); err != nil {
		return 0, 0, err
	}
	mode := st.compatibility(subject)
	reasons, err := r.compatibility(st, mode, c, previous(subj, mode))
	if err != nil {
		return 0, 0, err
	}
	if len(reasons) > 0 {
		return 0, 0, incompatible(subject, reasons)
	}
	if id, err = r.schemaID(ctx, st, c, normalize); err != nil {
		return 0, 0, err
	}
	next := subj.next()
	// A lost create: another node took this version; decide again on its
	// data.
	rev, err = r.kv.Create(ctx, keyVersion(subject, next), marshal(versionRecord{Subject: subject, Version: next, ID: id}))
	if err != nil {
		return 0, 0, casErr("storing the version", err)
	}
	return id, rev, nil
}

// previous lists the live versions mode checks a new one against: every
// one for transitive modes, the latest otherwise.
func previous(subj *subjectState, mode schema.Mode) []version {
	if strings.HasSuffix(string(mode), "_TRANSITIVE") {
		return subj.list(false)
	}
	if v, ok := subj.latest(false); ok {
		return []version{v}
	}
	return nil
}

// checkBounds refuses a registration that would pass the registry's
// count and size bounds (Config.MaxSubjects...). Nodes sharing a bucket
// each check their caught-up view, so concurrent writers on several nodes
// may overshoot a bound by a few.
func (r *Registry) checkBounds(st *state, subject string, c *candidate) error {
	subj := st.subjects.at(subject)
	if subj == nil && st.subjects.len() >= r.cfg.MaxSubjects {
		return errorf(CodeLimitExceeded, "The registry holds %d subjects, its limit (MaxSubjects); delete subjects permanently to add %q", st.subjects.len(), subject)
	}
	if subj != nil && len(subj.versions) >= r.cfg.MaxVersions {
		return errorf(CodeLimitExceeded, "Subject %q holds %d versions, its limit (MaxVersions, soft-deleted versions included); delete old versions permanently to register more", subject, len(subj.versions))
	}
	if id, ok := st.canon.get(c.hash); ok && st.entries.at(id) != nil {
		return nil // no new schema stored
	}
	if st.entries.len() >= r.cfg.MaxSchemas {
		return errorf(CodeLimitExceeded, "The registry holds %d schemas, its limit (MaxSchemas)", st.entries.len())
	}
	if st.bytes+len(c.text) > r.cfg.MaxTotalBytes {
		return errorf(CodeLimitExceeded, "The registry holds %d bytes of schemas; %d more would pass its limit of %d (MaxTotalBytes)", st.bytes, len(c.text), r.cfg.MaxTotalBytes)
	}
	return nil
}

// schemaID returns the id of the candidate's identity, handing out a new
// one if it has none. The schema is stored under its id before its
// identity is claimed (created once): a node that loses the claim drops
// its copy and takes the winner's id, so one identity never gets two ids.
func (r *Registry) schemaID(ctx context.Context, st *state, c *candidate, normalize bool) (int, error) {
	if id, ok := st.canon.get(c.hash); ok && st.entries.at(id) != nil {
		return id, nil
	}
	id, err := r.allocateID(ctx, st)
	if err != nil {
		return 0, err
	}
	text := c.text
	if normalize {
		text = c.compiled.Canonical()
	}
	rec := schemaRecord{ID: id, SchemaType: string(c.typ), Schema: text, References: c.refs, Hash: c.hash}
	r.precompiled.Store(id, c.compiled)
	if _, err := r.kv.Create(ctx, keySchema(id), marshal(rec)); err != nil {
		r.precompiled.Delete(id)
		return 0, storeErr("storing the schema", err)
	}
	_, err = r.kv.Create(ctx, keyCanon(c.hash), marshal(canonRecord{ID: id}))
	if err == nil {
		return id, nil
	}
	if !conflict(err) {
		return 0, storeErr("storing the schema identity", err)
	}
	e, gerr := r.kv.Get(ctx, keyCanon(c.hash))
	if gerr != nil {
		return 0, storeErr("reading the schema identity", gerr)
	}
	var won canonRecord
	if err := json.Unmarshal(e.Value(), &won); err != nil {
		return 0, storeErr("reading the schema identity", err)
	}
	r.precompiled.Delete(id)
	if err := r.kv.Purge(ctx, keySchema(id)); err != nil {
		r.log.Warn("dropping a duplicate schema", "id", id, "err", err)
	}
	return won.ID, nil
}

// allocateID hands out the next schema id: a compare-and-set increment of
// the counter key, retried when another node incremented it first.
func (r *Registry) allocateID(ctx context.Context, st *state) (int, error) {
	var next int
	err := retryCAS(func() error {
		var last int
		var rev uint64
		e, err := r.kv.Get(ctx, keySeq)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return storeErr("reading the id counter", err)
		default:
			var rec seqRecord
			if err := json.Unmarshal(e.Value(), &rec); err != nil {
				return storeErr("reading the id counter", err)
			}
			last, rev = rec.Last, e.Revision()
		}
		// Never below a stored schema, should the counter be lost.
		next = max(last, st.maxID) + 1
		val := marshal(seqRecord{Last: next})
		if rev == 0 {
			_, err = r.kv.Create(ctx, keySeq, val)
		} else {
			_, err = r.kv.Update(ctx, keySeq, val, rev)
		}
		return casErr("advancing the id counter", err)
	})
	if err != nil {
		return 0, err
	}
	return next, nil
}

// compatibility lists why c may not follow previous (live versions, oldest
// first) under mode. A schema of another type is never compatible.
func (r *Registry) compatibility(st *state, mode schema.Mode, c *candidate, previous []version) ([]schema.Incompatibility, error) {
	if mode == schema.None || len(previous) == 0 {
		return nil, nil
	}
	checked := previous
	if !strings.HasSuffix(string(mode), "_TRANSITIVE") {
		checked = previous[len(previous)-1:]
	}
	for _, v := range checked {
		e := st.entries.at(v.id)
		if e == nil {
			return nil, errorf(CodeStore, "schema %d of version %d is missing", v.id, v.version)
		}
		if schema.Type(e.SchemaType) != c.typ {
			return []schema.Incompatibility{{
				Rule:    "SCHEMA_TYPE_CHANGED",
				Message: fmt.Sprintf("version %d is %s, the new schema is %s", v.version, e.SchemaType, c.typ),
			}}, nil
		}
		if e.Compiled == nil {
			return nil, errorf(CodeStore, "schema %d of version %d cannot be compiled (format %s unavailable or schema invalid)", v.id, v.version, e.SchemaType)
		}
	}
	// One version at a time, newest first as schema.Check goes, so each
	// reason names the subject's version number rather than a position.
	var reasons []schema.Incompatibility
	single := nonTransitive(mode)
	for _, v := range slices.Backward(checked) {
		for _, reason := range schema.Check(c.format, single, c.compiled, []schema.Schema{st.entries.at(v.id).Compiled}) {
			reason.Message = strings.Replace(reason.Message, "version 1:", fmt.Sprintf("version %d:", v.version), 1)
			reasons = append(reasons, reason)
		}
	}
	return reasons, nil
}

// Lookup finds the version of subject holding the schema (the newest, if
// several do). deleted includes soft-deleted versions.
func (r *Registry) Lookup(ctx context.Context, subject string, s SchemaRequest, deleted bool) (*Version, error) {
	st := r.state.Load()
	subj := st.subjects.at(subject)
	if subj == nil || (!deleted && !subj.hasLive()) {
		return nil, subjectNotFound(subject)
	}
	c, err := r.parse(st, s)
	if err != nil {
		return nil, err
	}
	if id, ok := st.canon.get(c.hash); ok {
		for _, u := range slices.Backward(st.uses.at(id)) {
			if u.subject == subject && (deleted || !u.deleted) {
				return st.version(subject, u.version), nil
			}
		}
	}
	return nil, errorf(CodeSchemaNotFound, "Schema not found")
}

// Check tests the schema against subject without registering it. ver ""
// checks it as Register would (against the live versions the subject's
// mode looks at; a subject without versions accepts anything); a version
// (ver "latest" or a number) checks it against that version alone, in the
// direction(s) of the subject's mode.
func (r *Registry) Check(ctx context.Context, subject, ver string, s SchemaRequest) (bool, []schema.Incompatibility, error) {
	st := r.state.Load()
	subj := st.subjects.at(subject)
	var previous []version
	if ver == "" {
		previous = subj.list(false)
	} else {
		n, err := parseVersion(ver)
		if err != nil {
			return false, nil, err
		}
		if !subj.hasLive() {
			return false, nil, subjectNotFound(subject)
		}
		v, ok := subj.latest(false)
		if n != -1 {
			v, ok = subj.get(n)
			ok = ok && !v.deleted
		}
		if !ok {
			return false, nil, versionNotFound(n)
		}
		previous = []version{v}
	}
	c, err := r.parse(st, s)
	if err != nil {
		return false, nil, err
	}
	mode := st.compatibility(subject)
	if ver != "" {
		mode = nonTransitive(mode)
	}
	reasons, err := r.compatibility(st, mode, c, previous)
	if err != nil {
		return false, nil, err
	}
	return len(reasons) == 0, reasons, nil
}

func nonTransitive(m schema.Mode) schema.Mode {
	return schema.Mode(strings.TrimSuffix(string(m), "_TRANSITIVE"))
}
