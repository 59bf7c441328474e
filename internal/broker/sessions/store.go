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
// A content change is one atomic batch of both: the delta, then the new
// document, which compares-and-sets on the last document's sequence. So a
// change is stored whole or not at all, writers on different nodes are
// serialised by JetStream, and the deltas are the document's history
// without a gap. A state change (a report, a transition) writes the
// document alone, on the same condition.
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
	"github.com/nats-io/nuid"

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
func (k key) all() string    { return subjectPrefix + k.token() + ".*" }
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

// stored is a document read with the sequence it was stored at.
type stored struct {
	doc  *doc
	seq  uint64 // 0: no document (the session does not exist)
	size int
}

// errConflict is JetStream refusing a change whose condition (the last
// document's sequence) no longer holds: another writer came first.
var errConflict = errors.New("sessions: the document changed meanwhile")

func sessionsStreamConfig(replicas int, maxBytes int64) jetstream.StreamConfig {
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
		// Reads go to the leader: a direct get may be answered by a
		// replica that has not applied the last change yet, and a reader
		// must see the change its own write was acked for.
		AllowDirect:        false,
		AllowAtomicPublish: true,
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

// load reads k's document.
func (s *Store) load(ctx context.Context, k key) (stored, error) {
	m, err := s.stream.GetLastMsgForSubject(ctx, k.doc())
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return stored{}, nil
	}
	if err != nil {
		return stored{}, err
	}
	var d doc
	if err := json.Unmarshal(m.Data, &d); err != nil {
		return stored{}, fmt.Errorf("session %s: stored document does not decode: %w", k, err)
	}
	return stored{doc: &d, seq: m.Sequence, size: len(m.Data)}, nil
}

// commit stores d on the condition that k's last document is at seq (0:
// there is none), with delta in the same atomic batch when it is a
// content change. It returns the document's new sequence and size.
func (s *Store) commit(ctx context.Context, k key, d *doc, seq uint64, delta *semaq.SessionDelta) (uint64, int, error) {
	body, err := json.Marshal(d)
	if err != nil {
		return 0, 0, err
	}
	if len(body) > semaq.MaxSessionBytes {
		return 0, 0, semaq.NewAPIError(semaq.ErrBadSession, "session %s: the document would be %d bytes, over the %d allowed: trim its rounds or shrink its data",
			k.id, len(body), semaq.MaxSessionBytes)
	}
	docMsg := &nats.Msg{Subject: k.doc(), Data: body, Header: nats.Header{
		"Nats-Rollup":                         {"sub"},
		"Nats-Expected-Last-Subject-Sequence": {strconv.FormatUint(seq, 10)},
		hdrRevision:                           {strconv.FormatUint(d.Revision, 10)},
	}}
	if delta == nil {
		ack, err := s.deps.JS.PublishMsg(ctx, docMsg)
		if err != nil {
			return 0, 0, publishError(err)
		}
		return ack.Sequence, len(body), nil
	}
	dbody, err := json.Marshal(delta)
	if err != nil {
		return 0, 0, err
	}
	id := nuid.Next()
	deltaMsg := &nats.Msg{Subject: k.delta(), Data: dbody, Header: nats.Header{
		"Nats-Batch-Id":       {id},
		"Nats-Batch-Sequence": {"1"},
		hdrRevision:           {strconv.FormatUint(delta.Revision, 10)},
	}}
	docMsg.Header.Set("Nats-Batch-Id", id)
	docMsg.Header.Set("Nats-Batch-Sequence", "2")
	docMsg.Header.Set("Nats-Batch-Commit", "1")
	if err := s.deps.Conn.PublishMsg(deltaMsg); err != nil {
		return 0, 0, err
	}
	ack, err := s.deps.JS.PublishMsg(ctx, docMsg)
	if err != nil {
		return 0, 0, publishError(err)
	}
	return ack.Sequence, len(body), nil
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
