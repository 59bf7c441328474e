package semaq

import (
	"encoding/json"
	"fmt"
	"time"
)

// Sessions: conversation state kept by the broker (docs/sessions.md). A
// session is a JSON document (Data) and the rounds of a conversation,
// versioned by a revision that every content change raises by one. Each
// change is also kept as a delta, so a client that was away reads every
// change since the revision it has, then the live ones. A session has a
// freshness state (Active, Stale, Degraded, Expired) whose transitions
// are events on SessionEventSubject.
const (
	APISessionPut      = "$SQ.API.SESSION.PUT"        // SessionPutRequest -> SessionInfo
	APISessionGet      = "$SQ.API.SESSION.GET"        // SessionGetRequest -> Session
	APISessionPatch    = "$SQ.API.SESSION.PATCH"      // SessionPatchRequest -> SessionInfo
	APISessionDelete   = "$SQ.API.SESSION.DELETE"     // SessionRef -> SessionDeleteResponse
	APISessionList     = "$SQ.API.SESSION.LIST"       // SessionListRequest -> SessionListResponse
	APISessionDeltas   = "$SQ.API.SESSION.DELTAS"     // SessionDeltasRequest -> SessionDeltasResponse
	APISessionRounds   = "$SQ.API.SESSION.ROUNDS"     // SessionRoundsRequest -> SessionRoundsResponse
	APISessionRoundAdd = "$SQ.API.SESSION.ROUND.ADD"  // SessionRoundAddRequest -> SessionInfo
	APISessionTrim     = "$SQ.API.SESSION.TRIM"       // SessionTrimRequest -> SessionInfo
	APISessionReport   = "$SQ.API.SESSION.REPORT"     // SessionReportRequest -> SessionInfo
	APISessionDepend   = "$SQ.API.SESSION.DEPENDENCY" // SessionDependencyRequest -> SessionDependencyResponse
)

// SessionEventPrefix starts the subjects of session events:
// SessionEventPrefix + "<tenant>.<id>.<state>", with the tenant token of
// TokenTenant ("$none" for sessions without a tenant). With auth on a
// user receives its own tenant's events only.
const SessionEventPrefix = "$SQ.SESSION.EVENT."

// SessionEventSubject is the subject of a session's transition to state.
func SessionEventSubject(tenant, id string, state SessionState) string {
	return SessionEventPrefix + TokenTenant(tenant) + "." + id + "." + string(state)
}

// SessionEventFilter matches the events of tenant's sessions ("*" for
// every tenant, with the rights to).
func SessionEventFilter(tenant string) string {
	if tenant == "*" {
		return SessionEventPrefix + ">"
	}
	return SessionEventPrefix + TokenTenant(tenant) + ".>"
}

// HdrConfidence on a message that also carries HdrSession reports the
// confidence (0 to 1) of a result made with the session's context, as
// SessionReportRequest does.
const HdrConfidence = "AI-Confidence"

// SessionState is a session's freshness.
type SessionState string

const (
	// SessionActive: written or used within its StaleAfter.
	SessionActive SessionState = "active"
	// SessionStale: idle for StaleAfter; its context may be out of date.
	SessionStale SessionState = "stale"
	// SessionDegraded: its context cannot be trusted: a streak of
	// low-confidence results, a changed model version, or a dependency
	// that moved. A fresh write makes it Active again.
	SessionDegraded SessionState = "degraded"
	// SessionExpired: idle for its TTL; it is deleted. Only events carry
	// this state.
	SessionExpired SessionState = "expired"
	// SessionDeleted: deleted by a client. Only events carry this state.
	SessionDeleted SessionState = "deleted"
)

// Bounds and defaults of sessions.
const (
	// MaxSessionBytes bounds a session's stored document: its data, its
	// rounds and its metadata, as JSON.
	MaxSessionBytes = 512 << 10
	// MaxSessionDeltas is how many deltas of one session are kept: a watch
	// from an older revision is refused (ErrSessionRevisionGone).
	MaxSessionDeltas = 10_000
	// DefaultSessionTTL is the idle time after which a session that names
	// no TTL expires; MinSessionTTL and MaxSessionTTL bound any.
	DefaultSessionTTL = 24 * time.Hour
	MinSessionTTL     = time.Second
	MaxSessionTTL     = 90 * 24 * time.Hour
	// DefaultSessionStaleAfter is the idle time after which an active
	// session becomes stale.
	DefaultSessionStaleAfter = 300 * time.Second
	// DefaultSessionLowConfidence and DefaultSessionLowStreak: this many
	// consecutive reports below this confidence degrade a session.
	DefaultSessionLowConfidence = 0.65
	DefaultSessionLowStreak     = 3
	// MaxSessionDepends bounds the dependencies a session declares.
	MaxSessionDepends = 32
	// SessionListMax bounds one list reply; SessionDeltasMax one deltas
	// reply; MaxSessionWait a deltas request's wait for new ones.
	SessionListMax   = 1000
	SessionDeltasMax = 1000
	MaxSessionWait   = 30 * time.Second
	// SessionActivityEvery is how often at most the broker writes a
	// session's activity time from the messages that carry its AI-Session.
	SessionActivityEvery = 5 * time.Second
)

// SessionRef names a session. Tenant is for callers that act for every
// tenant (admins, services, workers, the node); with auth on anyone else
// acts in its own tenant and may leave it empty.
type SessionRef struct {
	ID     string `json:"id"`
	Tenant string `json:"tenant,omitempty"`
}

// SessionSettings are a session's own freshness settings; zero values
// take the defaults.
type SessionSettings struct {
	// TTL: idle time after which the session expires and is deleted.
	TTL time.Duration `json:"ttl,omitempty"`
	// StaleAfter: idle time after which an active session is stale.
	StaleAfter time.Duration `json:"stale_after,omitempty"`
	// LowConfidence and LowStreak: LowStreak consecutive reports below
	// LowConfidence degrade the session.
	LowConfidence float64 `json:"low_confidence,omitempty"`
	LowStreak     int     `json:"low_streak,omitempty"`
	// Depends are the versions of what the session's context was made
	// from (a RAG index, a document set), by name: when a dependency
	// moves to another version (SessionDependencyRequest), the session is
	// degraded. A model version goes under "model:<model>".
	Depends map[string]string `json:"depends,omitempty"`
}

// SessionPutRequest creates a session or replaces its data.
type SessionPutRequest struct {
	SessionRef
	// Data is the session's document: a JSON object.
	Data json.RawMessage `json:"data"`
	// Revision, when set, is the revision the writer read: the put is
	// refused with ErrSessionConflict if the session is at another one
	// (0: it must not exist yet).
	Revision *uint64 `json:"revision,omitempty"`
	// Settings replace the session's settings when given (nil keeps them).
	Settings *SessionSettings `json:"settings,omitempty"`
}

// SessionPatchRequest applies a JSON merge patch (RFC 7396) to a
// session's data.
type SessionPatchRequest struct {
	SessionRef
	Patch    json.RawMessage `json:"patch"`
	Revision *uint64         `json:"revision,omitempty"`
	// Create makes the session (from an empty object) when it does not
	// exist; otherwise patching a missing session is ErrSessionNotFound.
	Create bool `json:"create,omitempty"`
}

// SessionGetRequest reads a session.
type SessionGetRequest struct {
	SessionRef
	// Rounds: how many of the last rounds to return (-1 all, 0 none).
	Rounds int `json:"rounds,omitempty"`
}

// SessionInfo is a session without its data and rounds.
type SessionInfo struct {
	ID       string          `json:"id"`
	Tenant   string          `json:"tenant,omitempty"`
	Revision uint64          `json:"revision"`
	State    SessionState    `json:"state"`
	Settings SessionSettings `json:"settings"`
	// Reason says why the session is degraded.
	Reason    string    `json:"reason,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// UpdatedAt is the last content change; ActiveAt the last activity
	// (a change, or a message carrying the session, at most
	// SessionActivityEvery late).
	UpdatedAt time.Time `json:"updated_at"`
	ActiveAt  time.Time `json:"active_at"`
	// ExpiresAt is when the session expires without activity.
	ExpiresAt time.Time `json:"expires_at"`
	// LowStreak is the current run of low-confidence reports.
	LowStreak int `json:"low_streak,omitempty"`
	// RoundCount counts the rounds kept; FirstRound and LastRound number
	// them.
	RoundCount int `json:"round_count"`
	FirstRound int `json:"first_round,omitempty"`
	LastRound  int `json:"last_round,omitempty"`
	// Bytes is the size of the stored document.
	Bytes int `json:"bytes"`
}

// Session is a session with its data and the rounds asked for.
type Session struct {
	SessionInfo
	Data   json.RawMessage `json:"data"`
	Rounds []SessionRound  `json:"rounds,omitempty"`
}

// SessionMessage is one message of a round, in the OpenAI chat shape.
type SessionMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// SessionRound is one turn of a conversation: what was asked and what was
// answered.
type SessionRound struct {
	// Round numbers the turn, from 1, in order; a trim keeps the numbers.
	Round    int              `json:"round"`
	Messages []SessionMessage `json:"messages"`
	// Tokens is the round's size in tokens, as counted or estimated.
	Tokens int       `json:"tokens,omitempty"`
	At     time.Time `json:"at"`
}

// SessionRoundAddRequest adds a round.
type SessionRoundAddRequest struct {
	SessionRef
	// Round is the number to give it: 0 appends after the last; a number
	// between kept rounds that none has inserts it there.
	Round    int              `json:"round,omitempty"`
	Messages []SessionMessage `json:"messages"`
	Tokens   int              `json:"tokens,omitempty"`
	Revision *uint64          `json:"revision,omitempty"`
	// Create makes the session when it does not exist.
	Create bool `json:"create,omitempty"`
}

// SessionRoundsRequest reads rounds: the last Last, or the one numbered
// Round.
type SessionRoundsRequest struct {
	SessionRef
	Last  int `json:"last,omitempty"`
	Round int `json:"round,omitempty"`
}

// SessionRoundsResponse lists rounds, oldest first.
type SessionRoundsResponse struct {
	Revision uint64         `json:"revision"`
	Rounds   []SessionRound `json:"rounds"`
}

// SessionTrimRequest drops the rounds numbered below BeforeRound.
type SessionTrimRequest struct {
	SessionRef
	BeforeRound int     `json:"before_round"`
	Revision    *uint64 `json:"revision,omitempty"`
}

// SessionReportRequest reports the confidence of a result made with the
// session's context.
type SessionReportRequest struct {
	SessionRef
	Confidence float64 `json:"confidence"`
}

// SessionDependencyRequest says that dependency Name is now at Version
// for tenant's sessions: those that declared another version are
// degraded.
type SessionDependencyRequest struct {
	Tenant  string `json:"tenant,omitempty"`
	Name    string `json:"name"`
	Version string `json:"version"`
}

// SessionDependencyResponse counts the sessions degraded.
type SessionDependencyResponse struct {
	Degraded int `json:"degraded"`
}

// SessionListRequest lists a tenant's sessions by ID, after After.
type SessionListRequest struct {
	Tenant string       `json:"tenant,omitempty"`
	State  SessionState `json:"state,omitempty"`
	After  string       `json:"after,omitempty"`
	Limit  int          `json:"limit,omitempty"`
}

// SessionListResponse is one page of sessions. More says there are more:
// the next page starts after Next (a page filtered by state reads at most
// SessionListMax sessions, so Next may be past the last one listed).
type SessionListResponse struct {
	Sessions []SessionInfo `json:"sessions"`
	More     bool          `json:"more,omitempty"`
	Next     string        `json:"next,omitempty"`
}

// SessionDeleteResponse confirms a delete.
type SessionDeleteResponse struct {
	Success bool `json:"success"`
}

// Delta operations.
const (
	SessionOpPut   = "put"
	SessionOpPatch = "patch"
	SessionOpRound = "round"
	SessionOpTrim  = "trim"
)

// SessionDelta is one content change of a session: applying a session's
// deltas in revision order to an empty document gives its data and rounds.
type SessionDelta struct {
	Revision uint64 `json:"revision"`
	// Op is SessionOpPut (Data replaces the data), SessionOpPatch (Data is
	// a merge patch of it), SessionOpRound (Round is added) or
	// SessionOpTrim (rounds before BeforeRound are dropped).
	Op          string          `json:"op"`
	Data        json.RawMessage `json:"data,omitempty"`
	Round       *SessionRound   `json:"round,omitempty"`
	BeforeRound int             `json:"before_round,omitempty"`
	At          time.Time       `json:"at"`
}

// SessionDeltasRequest reads a session's deltas after revision After, up
// to Limit (0: SessionDeltasMax). With Wait, a request that finds none
// waits up to Wait for the next.
type SessionDeltasRequest struct {
	SessionRef
	After uint64        `json:"after"`
	Limit int           `json:"limit,omitempty"`
	Wait  time.Duration `json:"wait,omitempty"`
}

// SessionDeltasResponse carries deltas in revision order and the
// session's revision when read.
type SessionDeltasResponse struct {
	Deltas   []SessionDelta `json:"deltas"`
	Revision uint64         `json:"revision"`
}

// SessionEvent is the message of a transition on SessionEventSubject.
type SessionEvent struct {
	ID       string       `json:"id"`
	Tenant   string       `json:"tenant,omitempty"`
	From     SessionState `json:"from,omitempty"`
	State    SessionState `json:"state"`
	Reason   string       `json:"reason,omitempty"`
	Revision uint64       `json:"revision"`
	At       time.Time    `json:"at"`
}

var (
	// ErrSessionNotFound: no such session in the caller's tenant (with
	// auth on, another tenant's session is not found either).
	ErrSessionNotFound = &APIError{Code: 404, ErrCode: ErrCodeSessionNotFound, Description: "session not found"}
	// ErrSessionConflict: the session is not at the revision the writer
	// named; read it again and retry.
	ErrSessionConflict = &APIError{Code: 409, ErrCode: ErrCodeSessionConflict, Description: "session revision conflict"}
	// ErrBadSession: a request the broker refuses: a bad ID, data that is
	// not a JSON object, a setting out of bounds, a document past
	// MaxSessionBytes.
	ErrBadSession = &APIError{Code: 400, ErrCode: ErrCodeBadSession, Description: "invalid session request"}
	// ErrSessionRevisionGone: a deltas read from a revision whose deltas
	// are no longer kept (MaxSessionDeltas); read the session and go on
	// from its revision.
	ErrSessionRevisionGone = &APIError{Code: 410, ErrCode: ErrCodeSessionRevisionGone, Description: "session revision no longer kept"}
)

// CheckSessionID accepts session IDs that are safe as a subject token: 1
// to 128 letters, digits, '-' and '_'.
func CheckSessionID(id string) error {
	if id == "" {
		return fmt.Errorf("session id is empty")
	}
	if len(id) > 128 {
		return fmt.Errorf("session id %q is longer than 128 bytes", id[:32]+"…")
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("session id %q has %q at byte %d; use letters, digits, '-' and '_'", id, c, i)
		}
	}
	return nil
}

// CheckSessionSettings validates s and fills its defaults.
func CheckSessionSettings(s *SessionSettings) error {
	if s.TTL == 0 {
		s.TTL = DefaultSessionTTL
	}
	if s.TTL < MinSessionTTL || s.TTL > MaxSessionTTL {
		return fmt.Errorf("ttl %s is outside %s to %s", s.TTL, MinSessionTTL, MaxSessionTTL)
	}
	if s.StaleAfter == 0 {
		s.StaleAfter = min(DefaultSessionStaleAfter, s.TTL)
	}
	if s.StaleAfter < MinSessionTTL || s.StaleAfter > s.TTL {
		return fmt.Errorf("stale_after %s is outside %s to the ttl %s", s.StaleAfter, MinSessionTTL, s.TTL)
	}
	if s.LowConfidence == 0 {
		s.LowConfidence = DefaultSessionLowConfidence
	}
	if !(s.LowConfidence > 0 && s.LowConfidence <= 1) {
		return fmt.Errorf("low_confidence %v is outside (0, 1]", s.LowConfidence)
	}
	if s.LowStreak == 0 {
		s.LowStreak = DefaultSessionLowStreak
	}
	if s.LowStreak < 1 || s.LowStreak > 1000 {
		return fmt.Errorf("low_streak %d is outside 1 to 1000", s.LowStreak)
	}
	if len(s.Depends) > MaxSessionDepends {
		return fmt.Errorf("%d dependencies; at most %d", len(s.Depends), MaxSessionDepends)
	}
	for k, v := range s.Depends {
		if err := checkDependency(k, v); err != nil {
			return err
		}
	}
	return nil
}

// checkDependency accepts a dependency name and version: 1 to 128 visible
// ASCII characters each.
func checkDependency(name, version string) error {
	for _, f := range [2][2]string{{"dependency name", name}, {"dependency " + name + " version", version}} {
		if f[1] == "" || len(f[1]) > 128 {
			return fmt.Errorf("%s: 1 to 128 characters", f[0])
		}
		if _, err := token(f[1]); err != nil {
			return fmt.Errorf("%s: %v", f[0], err)
		}
	}
	return nil
}

// CheckSessionDependency validates a dependency move.
func CheckSessionDependency(r *SessionDependencyRequest) error {
	return checkDependency(r.Name, r.Version)
}
