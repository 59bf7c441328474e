// Package sessions is the session store (docs/sessions.md): conversation
// state the broker keeps for its clients, on $SQ.API.SESSION.*.
//
// A session lives in the stream SQ_SESSIONS under two subjects of its own:
//
//	$SQ.w.$sess.<tenant>.<id>.doc    the document: data, rounds, metadata;
//	                                 only the last is kept (rolled up), as a
//	                                 KV bucket keeps a key
//	$SQ.w.$sess.<tenant>.<id>.delta  one message per content change, its
//	                                 revision in AI-Session-Revision; the
//	                                 last MaxSessionDeltas are kept
//
// Every write compares-and-sets on the last sequence of the session's
// subjects (Nats-Expected-Last-Subject-Sequence on <tenant>.<id>.*), so
// writers on different nodes are serialised by JetStream. A content
// change writes its delta, the commit point, and is acked once JetStream
// stored it; the new document follows without waiting. A state change
// writes the document alone. A reader that finds a delta after the last
// document (its document is on the way, or its writer died between the
// two) applies it: the document is a materialised view of the deltas,
// and the next write stores it whole again. So the deltas are the
// document's history without a gap, and a change is seen whole or not at
// all. (One atomic batch of both would do the same, but a one-replica
// file stream stages each batch in a store of its own that it syncs to
// disk: milliseconds per change.) A node caches the documents it wrote
// (cache.go), so a write need not read first: a stale entry fails the
// condition and is read again; a node of its own also reads from it.
//
// Time-driven transitions (stale, expired) are JetStream message
// schedules in a second stream, SQ_SESSION_TIMERS: each session has at
// most one pending schedule, at or before its next deadline; when it
// fires, one node (a shared durable consumer) evaluates the session and
// arms the next. Activity moves a deadline later, never earlier, so it
// writes no timer: an early firing only re-arms.
package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/mergepatch"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// Subjects and headers of the session store.
const (
	subjectPrefix = reserved.SessionPrefix
	timerPrefix   = reserved.SessionTimerPrefix
	firePrefix    = timerPrefix + "fire."
	armPrefix     = timerPrefix + "at."
	// notePrefix is where a node says "session changed" after a change
	// is stored, so every node wakes the deltas requests waiting on it.
	// Core NATS: a lost note costs a waiter its wait, nothing else.
	notePrefix = reserved.SessionNoteInbox

	hdrRevision = "AI-Session-Revision"
)

// key names one session.
type key struct {
	tenant string // "" for none
	id     string
}

func (k key) token() string  { return semaq.TokenTenant(k.tenant) + "." + k.id }
func (k key) doc() string    { return subjectPrefix + k.token() + ".doc" }
func (k key) delta() string  { return subjectPrefix + k.token() + ".delta" }
func (k key) all() string    { return subjectPrefix + k.token() + ".*" } // the CAS subject
func (k key) arm() string    { return armPrefix + k.token() }
func (k key) fire() string   { return firePrefix + k.token() }
func (k key) note() string   { return notePrefix + k.token() }
func (k key) String() string { return k.token() }

// keyOf parses the "<tenant>.<id>" tail of a subject.
func keyOf(tail string) (key, bool) {
	t, id, ok := cut(tail)
	if !ok || semaq.CheckSessionID(id) != nil {
		return key{}, false
	}
	if t == semaq.TokenNoTenant {
		t = ""
	}
	return key{tenant: t, id: id}, true
}

func cut(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == '.' {
			return s[:i], s[i+1:], true
		}
	}
	return "", "", false
}

// meta is a session's metadata as stored.
type meta struct {
	ID        string                `json:"id"`
	Tenant    string                `json:"tenant,omitempty"`
	Revision  uint64                `json:"revision"`
	State     semaq.SessionState    `json:"state"`
	Reason    string                `json:"reason,omitempty"`
	Settings  semaq.SessionSettings `json:"settings"`
	CreatedAt time.Time             `json:"created_at"`
	UpdatedAt time.Time             `json:"updated_at"`
	ActiveAt  time.Time             `json:"active_at"`
	LowStreak int                   `json:"low_streak,omitempty"`
	// NextRound numbers the next appended round.
	NextRound int `json:"next_round"`
	// TimerAt is when the session's pending schedule fires (zero: none).
	TimerAt time.Time `json:"timer_at,omitzero"`
}

// doc is a session as stored on its doc subject.
type doc struct {
	meta
	Data   json.RawMessage      `json:"data"`
	Rounds []semaq.SessionRound `json:"rounds,omitempty"`
}

// info is the SessionInfo of d stored in size bytes.
func (d *doc) info(size int) semaq.SessionInfo {
	in := semaq.SessionInfo{
		ID: d.ID, Tenant: d.Tenant, Revision: d.Revision, State: d.State, Settings: d.Settings, Reason: d.Reason,
		CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt, ActiveAt: d.ActiveAt, ExpiresAt: d.ActiveAt.Add(d.Settings.TTL),
		LowStreak: d.LowStreak, RoundCount: len(d.Rounds), Bytes: size,
	}
	if n := len(d.Rounds); n > 0 {
		in.FirstRound, in.LastRound = d.Rounds[0].Round, d.Rounds[n-1].Round
	}
	return in
}

// stored is a session as read: its document (with a delta stored after
// it applied) and the last sequence of its subjects, which the next
// write compares-and-sets on.
type stored struct {
	doc  *doc
	seq  uint64 // 0: nothing stored (the session does not exist)
	size int
}

// errConflict is JetStream refusing a change whose condition (the
// session's last sequence) no longer holds: another writer came first.
var errConflict = errors.New("sessions: the document changed meanwhile")

func sessionsStreamConfig(replicas int, maxBytes int64, clustered bool) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        reserved.SessionStream,
		Description: "SemaQ sessions: one document and its deltas per session",
		Subjects:    []string{subjectPrefix + ">"},
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
		Retention:   jetstream.LimitsPolicy,
		// A full store refuses new changes rather than dropping the oldest
		// sessions' documents.
		Discard:           jetstream.DiscardNew,
		MaxBytes:          maxBytes,
		MaxMsgs:           -1,
		MaxMsgsPerSubject: semaq.MaxSessionDeltas,
		MaxMsgSize:        semaq.MaxSessionBytes + 64<<10,
		AllowRollup:       true,
		// On a cluster reads go to the leader: a direct get may be
		// answered by a replica that has not applied the last change yet,
		// and a reader must see the change its own write was acked for.
		// A node of its own is the only replica: it reads directly.
		AllowDirect: !clustered,
	}
}

func timersStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:              reserved.SessionTimerStream,
		Description:       "SemaQ session timers: one pending schedule per session, and their firings",
		Subjects:          []string{timerPrefix + ">"},
		Storage:           jetstream.FileStorage,
		Replicas:          max(replicas, 1),
		Retention:         jetstream.LimitsPolicy,
		MaxMsgs:           -1,
		MaxBytes:          -1,
		MaxMsgsPerSubject: 1,
		AllowRollup:       true,
		AllowMsgTTL:       true,
		AllowMsgSchedules: true,
	}
}

// load reads k: the last message of its subjects, which is its
// document, or a delta whose document is not stored yet (then the
// document before it, with the delta applied).
func (s *Store) load(ctx context.Context, k key) (stored, error) {
	m, err := s.stream.GetLastMsgForSubject(ctx, k.all())
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return stored{}, nil
	}
	if err != nil {
		return stored{}, err
	}
	if m.Subject == k.doc() {
		d, err := decodeDoc(k, m.Data)
		if err != nil {
			return stored{}, err
		}
		return stored{doc: d, seq: m.Sequence, size: len(m.Data)}, nil
	}
	var delta semaq.SessionDelta
	if err := json.Unmarshal(m.Data, &delta); err != nil {
		return stored{}, fmt.Errorf("session %s: stored delta does not decode: %w", k, err)
	}
	var d *doc
	size := 0
	dm, err := s.stream.GetLastMsgForSubject(ctx, k.doc())
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		// The session's first change, whose document is on its way (or
		// was never stored): the session is its deltas from the start.
		at := delta.At
		if at.IsZero() {
			at = time.Now().UTC()
		}
		d = newDoc(k, at)
	case err != nil:
		return stored{}, fmt.Errorf("session %s: a delta without a document: %w", k, err)
	default:
		if d, err = decodeDoc(k, dm.Data); err != nil {
			return stored{}, err
		}
		if dm.Sequence > m.Sequence {
			// The delta's document was stored between the two reads.
			return stored{doc: d, seq: dm.Sequence, size: len(dm.Data)}, nil
		}
		size = len(dm.Data)
	}
	deltas := []semaq.SessionDelta{delta}
	if delta.Revision > d.Revision+1 {
		// Several documents were not stored (a full store refuses the
		// large document and takes the small delta): apply every delta
		// since the last one that was.
		if deltas, err = s.readDeltas(ctx, k, d.Revision, delta.Revision, m.Sequence, semaq.MaxSessionDeltas); err != nil {
			return stored{}, err
		}
	}
	for i := range deltas {
		if deltas[i].Revision != d.Revision+1 {
			return stored{}, fmt.Errorf("session %s: delta %d follows document revision %d", k, deltas[i].Revision, d.Revision)
		}
		if err := applyDelta(d, &deltas[i]); err != nil {
			return stored{}, fmt.Errorf("session %s: applying delta %d: %w", k, deltas[i].Revision, err)
		}
	}
	return stored{doc: d, seq: m.Sequence, size: size}, nil
}

func decodeDoc(k key, b []byte) (*doc, error) {
	var d doc
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("session %s: stored document does not decode: %w", k, err)
	}
	return &d, nil
}

// applyDelta makes d what its writer made it with delta.
func applyDelta(d *doc, delta *semaq.SessionDelta) error {
	switch delta.Op {
	case semaq.SessionOpPut:
		d.Data = delta.Data
		if delta.Settings != nil {
			d.Settings = *delta.Settings
		}
	case semaq.SessionOpPatch:
		merged, err := mergepatch.Apply(d.Data, delta.Data)
		if err != nil {
			return err
		}
		d.Data = merged
	case semaq.SessionOpRound:
		if delta.Round == nil {
			return errors.New("a round delta without its round")
		}
		insertRound(d, *delta.Round)
	case semaq.SessionOpTrim:
		trimRounds(d, delta.BeforeRound)
	default:
		return fmt.Errorf("unknown op %q", delta.Op)
	}
	d.Revision = delta.Revision
	if delta.At.After(d.UpdatedAt) {
		wrote(&d.meta, delta.At)
	}
	return nil
}

// commit stores d on the condition that k's last sequence is seq (0:
// nothing is stored), after delta when it is a content change.
//
// The delta is the commit point: once it is stored the change is made.
// The document after it is only its materialised view, so it is
// published without waiting: the change is acked after one round trip
// to JetStream, and doc, when not nil, says how the document's write
// ended (a refusal means another writer stored a later view; a document
// never stored is the delta a reader applies). It returns the session's
// last sequence as far as known (the delta's when doc is not nil) and the
// size of d as stored.
func (s *Store) commit(ctx context.Context, k key, d *doc, seq uint64, delta *semaq.SessionDelta) (last uint64, size int, doc jetstream.PubAckFuture, err error) {
	body, err := json.Marshal(d)
	if err != nil {
		return 0, 0, nil, err
	}
	limit := semaq.MaxSessionBytes
	if mp := int(s.deps.Conn.MaxPayload()) - 1024; mp > 0 && mp < limit {
		limit = mp // a node with a smaller max_payload: its headers fit too
	}
	if len(body) > limit {
		return 0, 0, nil, semaq.NewAPIError(semaq.ErrBadSession, "session %s: the document would be %d bytes, over the %d allowed: trim its rounds or shrink its data",
			k.id, len(body), limit)
	}
	msg := func(subject string, data []byte, seq uint64) *nats.Msg {
		return &nats.Msg{Subject: subject, Data: data, Header: nats.Header{
			"Nats-Expected-Last-Subject-Sequence":         {strconv.FormatUint(seq, 10)},
			"Nats-Expected-Last-Subject-Sequence-Subject": {k.all()},
			hdrRevision: {strconv.FormatUint(d.Revision, 10)},
		}}
	}
	if delta != nil {
		dbody, err := json.Marshal(delta)
		if err != nil {
			return 0, 0, nil, err
		}
		ack, err := s.deps.JS.PublishMsg(ctx, msg(k.delta(), dbody, seq))
		if err != nil {
			return 0, 0, nil, publishError(err)
		}
		dm := msg(k.doc(), body, ack.Sequence)
		dm.Header.Set("Nats-Rollup", "sub")
		fut, err := s.deps.JS.PublishMsgAsync(dm)
		if err != nil {
			// Stored all the same: the next reader applies the delta.
			s.log.Debug("session document after its delta", "session", k, "err", err)
			fut = nil
		}
		if fut == nil {
			return 0, len(body), nil, nil
		}
		return ack.Sequence, len(body), fut, nil
	}
	dm := msg(k.doc(), body, seq)
	dm.Header.Set("Nats-Rollup", "sub")
	ack, err := s.deps.JS.PublishMsg(ctx, dm)
	if err != nil {
		return 0, 0, nil, publishError(err)
	}
	return ack.Sequence, len(body), nil, nil
}

// publishError names a failed condition errConflict and a full store a
// clear refusal.
func publishError(err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch {
		case apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence,
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant:
			return errConflict
		case strings.Contains(apiErr.Description, "maximum bytes"):
			return semaq.NewAPIError(semaq.ErrUnavailable, "the session store is full (%s): delete sessions or raise its bound", apiErr.Description)
		}
	}
	return err
}
