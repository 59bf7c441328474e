package models

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/semaq/semaq/semaq"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func mustRegister(t *testing.T, m *semaq.ModelInfo, v string) *semaq.ModelInfo {
	t.Helper()
	m, _, err := register(m, &semaq.ModelRegisterRequest{ModelRef: semaq.ModelRef{Model: "llama3", Version: v}}, "admin", t0)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func states(m *semaq.ModelInfo) string {
	s := ""
	for _, v := range m.Versions {
		s += v.Version + "=" + string(v.State) + " "
	}
	return s + "active=" + m.Active + " canary=" + m.Canary + " previous=" + m.Previous
}

func isCode(err error, code uint16) bool {
	var e *semaq.APIError
	return errors.As(err, &e) && e.ErrCode == code
}

// The lifecycle end to end, as data: each step's states and the events it
// makes, and the refusals a user meets.
func TestLifecycle(t *testing.T) {
	m := mustRegister(t, nil, "v1")
	m = mustRegister(t, m, "v2")
	if _, _, err := register(m, &semaq.ModelRegisterRequest{ModelRef: semaq.ModelRef{Model: "llama3", Version: "v2"}}, "a", t0); !isCode(err, semaq.ErrCodeModelConflict) {
		t.Fatalf("registering v2 twice: %v", err)
	}
	if _, err := promote(m, &semaq.ModelPromoteRequest{ModelRef: semaq.ModelRef{Version: "v2"}, CanaryPercent: 10}, nil, "a", t0); !isCode(err, semaq.ErrCodeModelConflict) {
		t.Fatalf("a canary without an active version: %v", err)
	}
	steps := []struct {
		name   string
		do     func() (change, error)
		want   string
		events []string
	}{
		{"v1 active", func() (change, error) {
			return promote(m, &semaq.ModelPromoteRequest{ModelRef: semaq.ModelRef{Version: "v1"}}, nil, "a", t0)
		}, "v1=active v2=registered active=v1 canary= previous=", []string{semaq.ModelDeployed}},
		{"v2 canary 10%", func() (change, error) {
			return promote(m, &semaq.ModelPromoteRequest{ModelRef: semaq.ModelRef{Version: "v2"}, CanaryPercent: 10}, nil, "a", t0)
		}, "v1=active v2=canary active=v1 canary=v2 previous=", []string{semaq.ModelCanary}},
		{"canary rolled back", func() (change, error) { return rollback(m, "a", t0) },
			"v1=active v2=draining active=v1 canary= previous=", []string{semaq.ModelRolledBack}},
		{"v2 promoted from draining", func() (change, error) {
			return promote(m, &semaq.ModelPromoteRequest{ModelRef: semaq.ModelRef{Version: "v2"}}, &semaq.ModelGateResult{Passed: true}, "a", t0)
		}, "v1=draining v2=active active=v2 canary= previous=v1", []string{semaq.ModelValidated, semaq.ModelDrainStarted, semaq.ModelDeployed}},
		{"rollback to v1", func() (change, error) { return rollback(m, "a", t0) },
			"v1=active v2=draining active=v1 canary= previous=v2", []string{semaq.ModelRolledBack, semaq.ModelDeployed}},
		{"v2 retired", func() (change, error) { return retire(m, "v2", "a", t0) },
			"v1=active v2=retired active=v1 canary= previous=", []string{semaq.ModelRetired}},
	}
	for _, st := range steps {
		c, err := st.do()
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := states(m); got != st.want {
			t.Fatalf("%s: %s, want %s", st.name, got, st.want)
		}
		var evs []string
		for _, e := range c.events {
			evs = append(evs, e.Event)
		}
		if strconv.Quote(fmtList(evs)) != strconv.Quote(fmtList(st.events)) {
			t.Fatalf("%s: events %v, want %v", st.name, evs, st.events)
		}
	}
	for name, err := range map[string]error{
		"promote retired": func() error {
			_, err := promote(m, &semaq.ModelPromoteRequest{ModelRef: semaq.ModelRef{Version: "v2"}}, nil, "a", t0)
			return err
		}(),
		"drain the active version":           func() error { _, err := drain(m, "v1", "a", t0); return err }(),
		"rollback with nothing to return to": func() error { _, err := rollback(m, "a", t0); return err }(),
	} {
		if !isCode(err, semaq.ErrCodeModelConflict) {
			t.Errorf("%s: %v, want ErrModelConflict", name, err)
		}
	}
	if _, err := drain(m, "v9", "a", t0); !isCode(err, semaq.ErrCodeModelNotFound) {
		t.Errorf("drain of an unknown version: %v", err)
	}
	if len(m.History) != 11 {
		t.Errorf("history holds %d changes, want 11 (2 registrations and the steps' 9 events)", len(m.History))
	}
}

func fmtList(l []string) string {
	s := ""
	for _, x := range l {
		s += x + ","
	}
	return s
}

// History and versions stay within their bounds: the oldest changes go,
// and a model full of live versions refuses another.
func TestLifecycleBounds(t *testing.T) {
	var m *semaq.ModelInfo
	for i := range semaq.MaxModelVersions {
		m = mustRegister(t, m, "v"+strconv.Itoa(i))
	}
	if _, _, err := register(m, &semaq.ModelRegisterRequest{ModelRef: semaq.ModelRef{Model: "llama3", Version: "extra"}}, "a", t0); !isCode(err, semaq.ErrCodeBadModel) {
		t.Fatalf("version %d with none retired: %v", semaq.MaxModelVersions+1, err)
	}
	for range semaq.MaxModelHistory {
		if _, err := report(m, &semaq.ModelReportRequest{ModelRef: semaq.ModelRef{Version: "v1"}}, "w", t0); err != nil {
			t.Fatal(err)
		}
	}
	if len(m.History) != semaq.MaxModelHistory || m.History[len(m.History)-1].Event != semaq.ModelReported {
		t.Fatalf("history %d, want its bound %d, newest last", len(m.History), semaq.MaxModelHistory)
	}
	m.Versions[0].State = semaq.ModelStateRetired
	m, _, err := register(m, &semaq.ModelRegisterRequest{ModelRef: semaq.ModelRef{Model: "llama3", Version: "extra"}}, "a", t0)
	if err != nil || len(m.Versions) != semaq.MaxModelVersions || m.Version("v0") != nil {
		t.Fatalf("a retired version makes room: %v, %d versions", err, len(m.Versions))
	}
}
