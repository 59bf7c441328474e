package sessions

import (
	"testing"
	"time"

	"github.com/semaq/semaq/semaq"
)

func fresh(t *testing.T, at time.Time) *meta {
	t.Helper()
	m := &meta{State: semaq.SessionActive, ActiveAt: at, UpdatedAt: at}
	m.Settings.Depends = map[string]string{"rag-index": "v7"}
	if err := semaq.CheckSessionSettings(&m.Settings); err != nil {
		t.Fatal(err)
	}
	return m
}

// The state machine, step by step, as data: each step is an event at a
// time, and the state and reason it leaves.
func TestFreshness(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	type step struct {
		at     time.Duration // after t0
		event  string        // "tick", "write", "touch", "low", "high", "dep"
		want   semaq.SessionState
		change bool // the step is a transition
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"idle 300s goes stale, a write reconciles", []step{
			{299 * time.Second, "tick", semaq.SessionActive, false},
			{300 * time.Second, "tick", semaq.SessionStale, true},
			{301 * time.Second, "write", semaq.SessionActive, true},
			{600 * time.Second, "tick", semaq.SessionActive, false},
		}},
		{"activity keeps a session active, not a stale one", []step{
			{200 * time.Second, "touch", semaq.SessionActive, false},
			{400 * time.Second, "tick", semaq.SessionActive, false},
			{500 * time.Second, "tick", semaq.SessionStale, true},
			{501 * time.Second, "touch", semaq.SessionStale, false},
		}},
		{"three low reports in a row degrade a stale session", []step{
			{300 * time.Second, "tick", semaq.SessionStale, true},
			{301 * time.Second, "low", semaq.SessionStale, false},
			{302 * time.Second, "low", semaq.SessionStale, false},
			{303 * time.Second, "low", semaq.SessionDegraded, true},
			{304 * time.Second, "low", semaq.SessionDegraded, false},
			{305 * time.Second, "write", semaq.SessionActive, true},
		}},
		{"a high report breaks the streak", []step{
			{1 * time.Second, "low", semaq.SessionActive, false},
			{2 * time.Second, "low", semaq.SessionActive, false},
			{3 * time.Second, "high", semaq.SessionActive, false},
			{4 * time.Second, "low", semaq.SessionActive, false},
			{5 * time.Second, "low", semaq.SessionActive, false},
			{6 * time.Second, "low", semaq.SessionDegraded, true},
		}},
		{"a moved dependency degrades; the TTL expires whatever the state", []step{
			{1 * time.Second, "dep", semaq.SessionDegraded, true},
			{24*time.Hour - 1, "tick", semaq.SessionDegraded, false},
			{24 * time.Hour, "tick", semaq.SessionExpired, true},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := fresh(t, t0)
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				var tr transition
				switch s.event {
				case "tick":
					tr = tick(m, now)
				case "write":
					tr = wrote(m, now)
				case "touch":
					before := m.State
					touched(m, now)
					tr = transition{from: before, to: m.State}
				case "low":
					tr = reported(m, 0.5)
				case "high":
					tr = reported(m, 0.9)
				case "dep":
					tr, _ = dependencyMoved(m, "rag-index", "v8")
				}
				if tr.to != s.want || tr.changed() != s.change {
					t.Fatalf("step %d (%s at %s): to %s changed %v, want %s %v", i, s.event, s.at, tr.to, tr.changed(), s.want, s.change)
				}
				if tr.changed() && tr.reason == "" && s.event != "write" {
					t.Fatalf("step %d: a transition to %s without a reason", i, tr.to)
				}
			}
		})
	}
}

// The next deadline is the stale time while active, then the expiry.
func TestDeadline(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m := fresh(t, t0)
	if got := deadline(m); !got.Equal(t0.Add(300 * time.Second)) {
		t.Fatalf("active: %s", got)
	}
	m.State = semaq.SessionStale
	if got := deadline(m); !got.Equal(t0.Add(24 * time.Hour)) {
		t.Fatalf("stale: %s", got)
	}
	if _, moved := dependencyMoved(m, "other", "x"); moved {
		t.Fatal("a dependency the session did not declare moved it")
	}
}
