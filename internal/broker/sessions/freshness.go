package sessions

import (
	"strconv"
	"time"

	"github.com/semaq/semaq/semaq"
)

// The freshness state machine, as pure functions of a session's metadata
// and the time: no I/O, so every transition is tested with data alone
// (freshness_test.go). docs/sessions.md draws it.
//
//	active   --idle StaleAfter------------------------> stale
//	active   --LowStreak reports < LowConfidence------> degraded
//	stale    --LowStreak reports < LowConfidence------> degraded
//	any      --a declared dependency moved------------> degraded
//	any      --content write--------------------------> active
//	any      --idle TTL-------------------------------> expired (deleted)
//
// Activity (a message carrying the session) keeps an active session
// active; it does not make a stale or degraded one active again: only a
// write of its content does.

// transition is one change of state.
type transition struct {
	from, to semaq.SessionState
	reason   string
}

// changed reports whether t changes anything.
func (t transition) changed() bool { return t.from != t.to }

// wrote is the transition of a content write at now: the session is
// active, its streak of low reports forgotten.
func wrote(m *meta, now time.Time) transition {
	t := transition{from: m.State, to: semaq.SessionActive}
	m.State, m.Reason, m.LowStreak = semaq.SessionActive, "", 0
	m.UpdatedAt, m.ActiveAt = now, now
	return t
}

// touched records activity at at (never earlier than what is recorded).
func touched(m *meta, at time.Time) {
	if at.After(m.ActiveAt) {
		m.ActiveAt = at
	}
}

// reported applies one confidence report.
func reported(m *meta, confidence float64) transition {
	t := transition{from: m.State, to: m.State}
	if confidence >= m.Settings.LowConfidence {
		m.LowStreak = 0
		return t
	}
	m.LowStreak++
	if m.LowStreak >= m.Settings.LowStreak && m.State != semaq.SessionDegraded {
		t.to, t.reason = semaq.SessionDegraded, lowStreakReason(m)
		m.State, m.Reason = t.to, t.reason
	}
	return t
}

func lowStreakReason(m *meta) string {
	return "low confidence: " + strconv.Itoa(m.LowStreak) + " reports in a row below " + strconv.FormatFloat(m.Settings.LowConfidence, 'g', -1, 64)
}

// dependencyMoved degrades a session that declared another version of
// name; ok is false when it declared none.
func dependencyMoved(m *meta, name, version string) (transition, bool) {
	have, ok := m.Settings.Depends[name]
	t := transition{from: m.State, to: m.State}
	if !ok || have == version {
		return t, false
	}
	t.reason = "dependency " + name + " moved from " + have + " to " + version
	t.to = semaq.SessionDegraded
	m.State, m.Reason = t.to, t.reason
	return t, true
}

// tick is the transition that time alone makes at now: expiry at
// ActiveAt+TTL, an active session stale at ActiveAt+StaleAfter.
func tick(m *meta, now time.Time) transition {
	t := transition{from: m.State, to: m.State}
	switch {
	case !now.Before(m.ActiveAt.Add(m.Settings.TTL)):
		t.to, t.reason = semaq.SessionExpired, "idle for "+m.Settings.TTL.String()
	case m.State == semaq.SessionActive && !now.Before(m.ActiveAt.Add(m.Settings.StaleAfter)):
		t.to, t.reason = semaq.SessionStale, "idle for "+m.Settings.StaleAfter.String()
		m.State, m.Reason = t.to, t.reason
	}
	return t
}

// deadline is when tick next has something to do.
func deadline(m *meta) time.Time {
	d := m.ActiveAt.Add(m.Settings.TTL)
	if m.State == semaq.SessionActive {
		if stale := m.ActiveAt.Add(m.Settings.StaleAfter); stale.Before(d) {
			d = stale
		}
	}
	return d
}
