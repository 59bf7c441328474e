package sessions

import (
	"context"
	"sync"
	"time"

	"github.com/semaq/semaq/semaq"
)

// Activity from messages (docs/sessions.md, Activity). A message or
// request carrying AI-Session touches its session; with AI-Confidence it
// also reports. Neither is written per message: they are gathered in
// memory and written by one goroutine, a session's activity at most once
// per SessionActivityEvery and its reports at most once per flush, in one
// write of its document. The memory is bounded: past maxPending sessions
// with something unwritten, or maxReports reports for one, more are
// dropped and counted.
const (
	maxPending  = 100_000
	maxReports  = 64
	flushEvery  = time.Second
	flushBudget = 10 * time.Second
)

type pending struct {
	at      time.Time // latest activity seen
	reports []float64 // in arrival order
}

type activity struct {
	s *Store

	mu      sync.Mutex
	pending map[key]*pending
	written map[key]time.Time // when each session's activity was last written
}

func newActivity(s *Store) *activity {
	return &activity{s: s, pending: map[key]*pending{}, written: map[key]time.Time{}}
}

// Observe records that a message of tenant carried session id, with a
// confidence report when hasConfidence. It never blocks on I/O: the
// ingress calls it for every message that names a session.
func (s *Store) Observe(tenant, id string, confidence float64, hasConfidence bool) {
	if semaq.CheckSessionID(id) != nil || tenant != "" && semaq.CheckName(tenant) != nil {
		return
	}
	s.act.observe(key{tenant: tenant, id: id}, s.now(), confidence, hasConfidence)
}

func (a *activity) observe(k key, now time.Time, c float64, hasC bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	p := a.pending[k]
	if p == nil {
		if len(a.pending) >= maxPending {
			a.s.deps.Metrics.SessionActivity("dropped")
			return
		}
		p = &pending{}
		a.pending[k] = p
	}
	if now.After(p.at) {
		p.at = now
	}
	if hasC {
		if len(p.reports) >= maxReports {
			a.s.deps.Metrics.SessionActivity("dropped")
			return
		}
		p.reports = append(p.reports, c)
	}
}

// due takes what is due to be written at now: every session with
// reports, and those whose activity was last written SessionActivityEvery
// ago or more. The rest stays pending.
func (a *activity) due(now time.Time) map[key]*pending {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[key]*pending{}
	for k, p := range a.pending {
		if len(p.reports) > 0 || now.Sub(a.written[k]) >= semaq.SessionActivityEvery {
			out[k] = p
			delete(a.pending, k)
			a.written[k] = now
		}
	}
	for k, at := range a.written {
		if now.Sub(at) >= semaq.SessionActivityEvery {
			delete(a.written, k) // nothing to hold back any more
		}
	}
	return out
}

// run writes what is due every flushEvery until the store closes, then
// what is left.
func (a *activity) run(ctx context.Context) {
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			a.flush(a.due(a.s.now()))
		case <-a.s.closing:
			a.flush(a.due(a.s.now().Add(semaq.SessionActivityEvery)))
			return
		}
	}
}

func (a *activity) flush(due map[key]*pending) {
	if len(due) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), flushBudget)
	defer cancel()
	for k, p := range due {
		_, err := a.s.apply(ctx, k, change{fn: func(d *doc, _ time.Time) (*semaq.SessionDelta, bool, error) {
			changed := p.at.After(d.ActiveAt)
			touched(&d.meta, p.at)
			for _, c := range p.reports {
				reported(&d.meta, c)
				changed = true
			}
			return nil, changed, nil
		}})
		switch {
		case err == nil:
			a.s.deps.Metrics.SessionActivity("written")
		case isNotFound(err):
			a.s.deps.Metrics.SessionActivity("no_session")
		default:
			a.s.deps.Metrics.SessionActivity("error")
			a.s.log.Debug("session activity", "session", k, "err", err)
		}
	}
}
