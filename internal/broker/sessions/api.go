package sessions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/mergepatch"
	"github.com/semaq/semaq/semaq"
)

// Handlers serves the session API on $SQ.API.SESSION.*.
func (s *Store) Handlers() api.Handlers {
	return api.Handlers{
		semaq.APISessionPut:      op(s, "put", s.put),
		semaq.APISessionGet:      op(s, "get", s.get),
		semaq.APISessionPatch:    op(s, "patch", s.patch),
		semaq.APISessionDelete:   op(s, "delete", s.remove),
		semaq.APISessionList:     op(s, "list", s.list),
		semaq.APISessionRounds:   op(s, "rounds", s.rounds),
		semaq.APISessionRoundAdd: op(s, "round add", s.addRound),
		semaq.APISessionTrim:     op(s, "trim", s.trim),
		semaq.APISessionReport:   op(s, "report", s.report),
		semaq.APISessionDepend:   api.OpWithin(s.log, "session dependency", api.ChangeTimeout, counted(s, "dependency", s.dependency), nil),
		semaq.APISessionDeltas:   s.deltasHandler(),
	}
}

func op[Req any](s *Store, name string, fn func(ctx context.Context, req *Req) (any, error)) nats.MsgHandler {
	return api.Op(s.log, "session "+name, counted(s, name, fn), nil)
}

// counted counts each call of fn by its result.
func counted[Req any](s *Store, name string, fn func(ctx context.Context, req *Req) (any, error)) func(context.Context, *Req) (any, error) {
	return func(ctx context.Context, req *Req) (any, error) {
		out, err := fn(ctx, req)
		s.deps.Metrics.SessionOp(name, result(err))
		return out, err
	}
}

func result(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, semaq.ErrSessionConflict):
		return "conflict"
	case errors.Is(err, semaq.ErrSessionNotFound):
		return "not_found"
	case errors.Is(err, semaq.ErrBadSession), errors.Is(err, semaq.ErrBadRequest):
		return "bad"
	case errors.Is(err, semaq.ErrForbidden):
		return "forbidden"
	}
	return "error"
}

// Rights a session operation needs.
type right int

const (
	read   right = iota // get, list, rounds, deltas
	report              // confidence reports: readers' results too
	write               // content changes, delete, dependency moves
)

// resolve is the session a request names, in the tenant its sender acts
// for (docs/sessions.md, Tenants): with auth off or from the node, the
// tenant named; a user with a tenant acts in it (naming another is
// refused); admins, services and workers act for any tenant they name.
// Readers and workers only read and report.
func (s *Store) resolve(ctx context.Context, tenant string, need right) (string, error) {
	if tenant != "" {
		if err := semaq.CheckName(tenant); err != nil {
			return "", semaq.NewAPIError(semaq.ErrBadSession, "session: tenant: %v", err)
		}
	}
	p := s.deps.Principal(api.RequestHeader(ctx))
	if p.Who != api.User {
		return tenant, nil
	}
	switch p.Role {
	case semaq.RoleAdmin, semaq.RoleService:
	case semaq.RoleWorker:
		if need == write {
			return "", semaq.NewAPIError(semaq.ErrForbidden, "session: user %s (role worker) may read sessions and report on them, not change them", p.User)
		}
	case semaq.RoleReader:
		if need != read {
			return "", semaq.NewAPIError(semaq.ErrForbidden, "session: user %s (role reader) may read sessions, not change them", p.User)
		}
		fallthrough
	case semaq.RolePublisher:
		if tenant != "" && tenant != p.Tenant {
			return "", semaq.NewAPIError(semaq.ErrForbidden, "session: user %s acts in its own tenant only; leave the tenant out", p.User)
		}
		return p.Tenant, nil
	default:
		return "", semaq.NewAPIError(semaq.ErrForbidden, "session: user %s has no role that reaches sessions", p.User)
	}
	if tenant == "" {
		tenant = p.Tenant
	}
	return tenant, nil
}

// ref is resolve of a SessionRef, with its ID checked.
func (s *Store) ref(ctx context.Context, r semaq.SessionRef, need right) (key, error) {
	if err := semaq.CheckSessionID(r.ID); err != nil {
		return key{}, semaq.NewAPIError(semaq.ErrBadSession, "session: %v", err)
	}
	t, err := s.resolve(ctx, r.Tenant, need)
	if err != nil {
		return key{}, err
	}
	return key{tenant: t, id: r.ID}, nil
}

func notFound(k key) error {
	return semaq.NewAPIError(semaq.ErrSessionNotFound, "session %s not found", k.id)
}

// admit charges a content change to the quotas.
func (s *Store) admit(ctx context.Context, k key, n int) error {
	if s.deps.Admit == nil {
		return nil
	}
	return s.deps.Admit(ctx, k.tenant, n)
}

// maxAttempts bounds the retries of a change that lost a race to another
// writer without naming a revision.
const maxAttempts = 8

// change is one change of a session.
type change struct {
	rev    *uint64 // the revision the writer read, or nil
	create bool    // a missing session is made
	// fn changes d at now and returns the delta of a content change (nil
	// for a change of state only) and whether anything changed.
	fn func(d *doc, now time.Time) (*semaq.SessionDelta, bool, error)
}

// apply runs c on k until it is stored, arming the session's timer when
// its next deadline comes earlier than the pending one, then tells the
// other nodes and publishes the transition it made.
func (s *Store) apply(ctx context.Context, k key, c change) (semaq.SessionInfo, error) {
	for attempt := 0; ; attempt++ {
		// The first try trusts the cache: a stale entry fails the
		// condition, or a check below, and the next try reads.
		st, cached := stored{}, false
		if attempt == 0 {
			st, cached = s.cache.get(ctx, k)
		}
		if !cached {
			var err error
			if st, err = s.load(ctx, k); err != nil {
				return semaq.SessionInfo{}, err
			}
		}
		now := s.now().UTC()
		var d *doc
		switch {
		case cached && (st.doc == nil || c.rev != nil && *c.rev != st.doc.Revision || !now.Before(st.doc.ActiveAt.Add(st.doc.Settings.TTL))):
			continue // decide on what is stored, not on the cache
		case st.doc != nil && !now.Before(st.doc.ActiveAt.Add(st.doc.Settings.TTL)):
			// Expired, its timer not yet run: it goes now, and the change
			// finds it gone.
			if err := s.expire(ctx, k, st.doc); err != nil {
				return semaq.SessionInfo{}, err
			}
			continue
		case st.doc == nil:
			if c.rev != nil && *c.rev != 0 {
				return semaq.SessionInfo{}, semaq.NewAPIError(semaq.ErrSessionConflict, "session %s does not exist; the writer read revision %d", k.id, *c.rev)
			}
			if !c.create {
				return semaq.SessionInfo{}, notFound(k)
			}
			d = newDoc(k, now)
		default:
			if c.rev != nil && *c.rev != st.doc.Revision {
				return semaq.SessionInfo{}, semaq.NewAPIError(semaq.ErrSessionConflict, "session %s is at revision %d; the writer read %d", k.id, st.doc.Revision, *c.rev)
			}
			d = st.doc
		}
		from := d.State
		if st.seq == 0 {
			from = ""
		}
		delta, changed, err := c.fn(d, now)
		if err != nil {
			return semaq.SessionInfo{}, err
		}
		if !changed {
			return d.info(st.size), nil
		}
		if delta != nil {
			d.Revision++
			delta.Revision, delta.At = d.Revision, now
			wrote(&d.meta, now)
		}
		if err := s.arm(ctx, k, d, now); err != nil {
			return semaq.SessionInfo{}, err
		}
		seq, size, docWrite, err := s.commit(ctx, k, d, st.seq, delta)
		if err != nil || seq == 0 {
			s.cache.drop(k)
		} else {
			s.cache.put(k, stored{doc: d.clone(), seq: seq, size: size}, docWrite)
		}
		if errors.Is(err, errConflict) {
			// Something was stored since the state this try began from:
			// another writer's change (the next try finds the revision
			// moved, and a writer that named one gets the conflict), a
			// state change, or only the document of the change before.
			if attempt < maxAttempts {
				continue
			}
			return semaq.SessionInfo{}, semaq.NewAPIError(semaq.ErrUnavailable, "session %s: %d writers raced; try again", k.id, maxAttempts)
		}
		if err != nil {
			return semaq.SessionInfo{}, err
		}
		if delta != nil {
			s.note(k)
		}
		if from != d.State {
			s.event(k, from, d.State, d.Reason, d.Revision)
		}
		return d.info(size), nil
	}
}

func newDoc(k key, now time.Time) *doc {
	d := &doc{meta: meta{ID: k.id, Tenant: k.tenant, State: semaq.SessionActive, CreatedAt: now, UpdatedAt: now, ActiveAt: now, NextRound: 1},
		Data: json.RawMessage("{}")}
	_ = semaq.CheckSessionSettings(&d.Settings) // the defaults
	return d
}

// checkObject refuses data that is not a JSON object.
func checkObject(k key, what string, data json.RawMessage) error {
	if b := bytes.TrimSpace(data); len(b) == 0 || b[0] != '{' {
		return semaq.NewAPIError(semaq.ErrBadSession, "session %s: %s must be a JSON object", k.id, what)
	}
	return nil
}

func (s *Store) put(ctx context.Context, req *semaq.SessionPutRequest) (any, error) {
	k, err := s.ref(ctx, req.SessionRef, write)
	if err != nil {
		return nil, err
	}
	if err := checkObject(k, "data", req.Data); err != nil {
		return nil, err
	}
	if err := s.admit(ctx, k, len(req.Data)); err != nil {
		return nil, err
	}
	var settings *semaq.SessionSettings
	if req.Settings != nil {
		st := *req.Settings
		if err := semaq.CheckSessionSettings(&st); err != nil {
			return nil, semaq.NewAPIError(semaq.ErrBadSession, "session %s: %v", k.id, err)
		}
		settings = &st
	}
	data := compact(req.Data)
	return s.apply(ctx, k, change{rev: req.Revision, create: true, fn: func(d *doc, _ time.Time) (*semaq.SessionDelta, bool, error) {
		d.Data = data
		if settings != nil {
			d.Settings = *settings
		}
		return &semaq.SessionDelta{Op: semaq.SessionOpPut, Data: data, Settings: settings}, true, nil
	}})
}

func compact(b json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return b
	}
	return buf.Bytes()
}

func (s *Store) patch(ctx context.Context, req *semaq.SessionPatchRequest) (any, error) {
	k, err := s.ref(ctx, req.SessionRef, write)
	if err != nil {
		return nil, err
	}
	if err := checkObject(k, "patch", req.Patch); err != nil {
		return nil, err
	}
	if err := s.admit(ctx, k, len(req.Patch)); err != nil {
		return nil, err
	}
	p := compact(req.Patch)
	return s.apply(ctx, k, change{rev: req.Revision, create: req.Create, fn: func(d *doc, _ time.Time) (*semaq.SessionDelta, bool, error) {
		merged, err := mergepatch.Apply(d.Data, p)
		if err != nil {
			return nil, false, semaq.NewAPIError(semaq.ErrBadSession, "session %s: patch: %v", k.id, err)
		}
		d.Data = merged
		return &semaq.SessionDelta{Op: semaq.SessionOpPatch, Data: p}, true, nil
	}})
}

// maxRoundMessages bounds the messages of one round; maxRoleLen a role.
const (
	maxRoundMessages = 64
	maxRoleLen       = 32
)

func (s *Store) addRound(ctx context.Context, req *semaq.SessionRoundAddRequest) (any, error) {
	k, err := s.ref(ctx, req.SessionRef, write)
	if err != nil {
		return nil, err
	}
	if n := len(req.Messages); n == 0 || n > maxRoundMessages {
		return nil, semaq.NewAPIError(semaq.ErrBadSession, "session %s: a round has 1 to %d messages, not %d", k.id, maxRoundMessages, n)
	}
	for i, m := range req.Messages {
		if m.Role == "" || len(m.Role) > maxRoleLen {
			return nil, semaq.NewAPIError(semaq.ErrBadSession, "session %s: message %d: role must be 1 to %d characters", k.id, i, maxRoleLen)
		}
	}
	if req.Round < 0 || req.Tokens < 0 {
		return nil, semaq.NewAPIError(semaq.ErrBadSession, "session %s: round and tokens must not be negative", k.id)
	}
	n := 0
	for _, m := range req.Messages {
		n += len(m.Role) + len(m.Content)
	}
	if err := s.admit(ctx, k, n); err != nil {
		return nil, err
	}
	return s.apply(ctx, k, change{rev: req.Revision, create: req.Create, fn: func(d *doc, now time.Time) (*semaq.SessionDelta, bool, error) {
		r := semaq.SessionRound{Round: req.Round, Messages: req.Messages, Tokens: req.Tokens, At: now}
		if r.Round == 0 {
			r.Round = d.NextRound
		}
		if _, found := slices.BinarySearchFunc(d.Rounds, r.Round, cmpRound); found {
			return nil, false, semaq.NewAPIError(semaq.ErrBadSession, "session %s already has round %d", k.id, r.Round)
		}
		insertRound(d, r)
		return &semaq.SessionDelta{Op: semaq.SessionOpRound, Round: &r}, true, nil
	}})
}

func (s *Store) trim(ctx context.Context, req *semaq.SessionTrimRequest) (any, error) {
	k, err := s.ref(ctx, req.SessionRef, write)
	if err != nil {
		return nil, err
	}
	if req.BeforeRound < 1 {
		return nil, semaq.NewAPIError(semaq.ErrBadSession, "session %s: before_round must be at least 1", k.id)
	}
	return s.apply(ctx, k, change{rev: req.Revision, fn: func(d *doc, _ time.Time) (*semaq.SessionDelta, bool, error) {
		trimRounds(d, req.BeforeRound)
		return &semaq.SessionDelta{Op: semaq.SessionOpTrim, BeforeRound: req.BeforeRound}, true, nil
	}})
}

func (s *Store) report(ctx context.Context, req *semaq.SessionReportRequest) (any, error) {
	k, err := s.ref(ctx, req.SessionRef, report)
	if err != nil {
		return nil, err
	}
	if !(req.Confidence >= 0 && req.Confidence <= 1) {
		return nil, semaq.NewAPIError(semaq.ErrBadSession, "session %s: confidence %v is outside 0 to 1", k.id, req.Confidence)
	}
	return s.apply(ctx, k, change{fn: func(d *doc, _ time.Time) (*semaq.SessionDelta, bool, error) {
		before := d.LowStreak
		reported(&d.meta, req.Confidence)
		return nil, before != d.LowStreak || d.LowStreak > 0, nil
	}})
}

// view is d as a reader sees it at now: a session past a deadline its
// timer has not acted on yet reads as the timer will make it.
func view(d *doc, now time.Time) (*doc, bool) {
	v := *d
	if t := tick(&v.meta, now); t.to == semaq.SessionExpired {
		return nil, false
	}
	return &v, true
}

// read is k as a reader sees it now (view), and its stored size.
func (s *Store) read(ctx context.Context, k key) (*doc, int, error) {
	st, ok := stored{}, false
	if !s.deps.Clustered {
		st, ok = s.cache.peek(k)
	}
	if !ok {
		var err error
		if st, err = s.load(ctx, k); err != nil {
			return nil, 0, err
		}
		if !s.deps.Clustered && st.doc != nil {
			s.cache.put(k, stored{doc: st.doc.clone(), seq: st.seq, size: st.size}, nil)
		}
	}
	if st.doc == nil {
		return nil, 0, notFound(k)
	}
	d, ok := view(st.doc, s.now())
	if !ok {
		return nil, 0, notFound(k)
	}
	return d, st.size, nil
}

func (s *Store) get(ctx context.Context, req *semaq.SessionGetRequest) (any, error) {
	k, err := s.ref(ctx, req.SessionRef, read)
	if err != nil {
		return nil, err
	}
	d, size, err := s.read(ctx, k)
	if err != nil {
		return nil, err
	}
	out := semaq.Session{SessionInfo: d.info(size), Data: d.Data}
	switch n := req.Rounds; {
	case n < 0 || n >= len(d.Rounds):
		out.Rounds = d.Rounds
	case n > 0:
		out.Rounds = d.Rounds[len(d.Rounds)-n:]
	}
	return out, nil
}

func (s *Store) rounds(ctx context.Context, req *semaq.SessionRoundsRequest) (any, error) {
	k, err := s.ref(ctx, req.SessionRef, read)
	if err != nil {
		return nil, err
	}
	if req.Last < 0 || req.Round < 0 {
		return nil, semaq.NewAPIError(semaq.ErrBadSession, "session %s: last and round must not be negative", k.id)
	}
	d, _, err := s.read(ctx, k)
	if err != nil {
		return nil, err
	}
	out := semaq.SessionRoundsResponse{Revision: d.Revision, Rounds: []semaq.SessionRound{}}
	switch {
	case req.Round > 0:
		if i, found := slices.BinarySearchFunc(d.Rounds, req.Round, cmpRound); found {
			out.Rounds = append(out.Rounds, d.Rounds[i])
		}
	case req.Last > 0 && req.Last < len(d.Rounds):
		out.Rounds = d.Rounds[len(d.Rounds)-req.Last:]
	default:
		out.Rounds = append(out.Rounds, d.Rounds...)
	}
	return out, nil
}

func (s *Store) remove(ctx context.Context, req *semaq.SessionRef) (any, error) {
	k, err := s.ref(ctx, *req, write)
	if err != nil {
		return nil, err
	}
	st, err := s.load(ctx, k)
	if err != nil {
		return nil, err
	}
	if st.doc == nil {
		return nil, notFound(k)
	}
	if err := s.purge(ctx, k); err != nil {
		return nil, err
	}
	s.event(k, st.doc.State, semaq.SessionDeleted, "deleted", st.doc.Revision)
	return semaq.SessionDeleteResponse{Success: true}, nil
}

// purge removes k's document, deltas and pending timer, and wakes its
// watchers (who then find it gone).
func (s *Store) purge(ctx context.Context, k key) error {
	s.cache.drop(k)
	if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(k.all())); err != nil {
		return err
	}
	if err := s.timers.Purge(ctx, jetstream.WithPurgeSubject(k.arm())); err != nil {
		s.log.Debug("session timer purge", "session", k, "err", err)
	}
	s.note(k)
	return nil
}

func cmpRound(a semaq.SessionRound, n int) int { return a.Round - n }

// insertRound puts r among d's rounds by its number (not taken).
func insertRound(d *doc, r semaq.SessionRound) {
	i, _ := slices.BinarySearchFunc(d.Rounds, r.Round, cmpRound)
	d.Rounds = slices.Insert(d.Rounds, i, r)
	d.NextRound = max(d.NextRound, r.Round+1)
}

// trimRounds drops d's rounds numbered below before.
func trimRounds(d *doc, before int) {
	d.Rounds = slices.DeleteFunc(d.Rounds, func(r semaq.SessionRound) bool { return r.Round < before })
}
