package sessions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/semaq"
)

// timerConsumer is the durable every node reads the firings with: each
// firing goes to one node.
const timerConsumer = "semaq-session-timers"

// fireTTL is how long a firing stays in SQ_SESSION_TIMERS once acted on
// or not: long enough for a redelivery, short enough to stay small.
const fireTTL = "10m"

// arm makes sure k has a pending schedule at or before d's next deadline,
// and records it in d.TimerAt (stored with d by the caller). The schedule
// replaces the pending one (a schedule's subject is rolled up).
func (s *Store) arm(ctx context.Context, k key, d *doc, now time.Time) error {
	dl := deadline(&d.meta)
	if !d.TimerAt.IsZero() && !d.TimerAt.After(dl) && d.TimerAt.After(now) {
		return nil // the pending one fires in time
	}
	at := dl.Truncate(time.Second)
	if at.Before(dl) {
		at = at.Add(time.Second) // never before the deadline
	}
	if floor := now.Add(time.Second).Truncate(time.Second); at.Before(floor) {
		at = floor
	}
	m := &nats.Msg{Subject: k.arm(), Header: nats.Header{
		"Nats-Schedule":        {"@at " + at.UTC().Format(time.RFC3339)},
		"Nats-Schedule-Target": {k.fire()},
		"Nats-Schedule-TTL":    {fireTTL},
		"Nats-Schedule-Rollup": {"sub"},
	}}
	if _, err := s.deps.JS.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("session %s: arming its timer: %w", k.id, err)
	}
	d.TimerAt = at
	return nil
}

// followTimers makes the shared durable on the firings and consumes it.
func (s *Store) followTimers(ctx context.Context) error {
	// Retried: on a cluster electing leaders (a node starting after a
	// crash) one request may be lost or refused; a node must not fail to
	// start for it.
	var cons jetstream.Consumer
	err := jsutil.Retry(ctx, func(ctx context.Context) error {
		var err error
		cons, err = s.timers.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable:       timerConsumer,
			FilterSubject: firePrefix + ">",
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       30 * time.Second,
			MaxDeliver:    20,
			MaxAckPending: 1024,
		})
		return err
	})
	if err != nil {
		return fmt.Errorf("sessions: timer consumer: %w", err)
	}
	cc, err := cons.Consume(s.onFire, jetstream.PullMaxMessages(64),
		jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
			s.log.Debug("session timers", "err", err)
		}))
	if err != nil {
		return fmt.Errorf("sessions: timer consumer: %w", err)
	}
	s.fireCtx = cc
	return nil
}

// onFire evaluates the session a firing names, in a counted goroutine so
// Close waits for it.
func (s *Store) onFire(jm jetstream.Msg) {
	if !s.deps.Gate.Go("timer", func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, api.Timeout)
		defer cancel()
		if err := s.fire(ctx, jm.Subject()); err != nil {
			s.log.Warn("session timer", "subject", jm.Subject(), "err", err)
			_ = jm.NakWithDelay(time.Second)
			return
		}
		_ = jm.Ack()
	}) {
		_ = jm.Nak()
	}
}

// fire applies the transitions time made to the session of a firing and
// arms its next timer.
func (s *Store) fire(ctx context.Context, subject string) error {
	k, ok := keyOf(subject[len(firePrefix):])
	if !ok {
		return nil // not one of ours: nothing to do, ever
	}
	for attempt := 0; attempt < maxAttempts; attempt++ {
		st, err := s.load(ctx, k)
		if err != nil || st.doc == nil {
			return err
		}
		d, now := st.doc, s.now().UTC()
		from := d.State
		t := tick(&d.meta, now)
		if t.to == semaq.SessionExpired {
			return s.expire(ctx, k, d)
		}
		d.TimerAt = time.Time{} // this one fired
		if err := s.arm(ctx, k, d, now); err != nil {
			return err
		}
		if _, _, _, err := s.commit(ctx, k, d, st.seq, nil); errors.Is(err, errConflict) {
			continue // changed meanwhile: evaluate it again
		} else if err != nil {
			return err
		}
		if t.changed() {
			s.event(k, from, t.to, t.reason, d.Revision)
		}
		return nil
	}
	return fmt.Errorf("session %s: %d writers raced its timer", k.id, maxAttempts)
}

// expire deletes a session idle for its TTL, with its event.
func (s *Store) expire(ctx context.Context, k key, d *doc) error {
	if err := s.purge(ctx, k); err != nil {
		return err
	}
	s.event(k, d.State, semaq.SessionExpired, "idle for "+d.Settings.TTL.String(), d.Revision)
	return nil
}

// event publishes a transition on its public subject.
func (s *Store) event(k key, from, to semaq.SessionState, reason string, rev uint64) {
	s.deps.Metrics.SessionTransition(string(from), string(to))
	b, err := json.Marshal(semaq.SessionEvent{ID: k.id, Tenant: k.tenant, From: from, State: to, Reason: reason, Revision: rev, At: s.now().UTC()})
	if err != nil {
		return
	}
	if err := s.deps.Conn.Publish(semaq.SessionEventSubject(k.tenant, k.id, to), b); err != nil {
		s.log.Debug("session event", "session", k, "err", err)
	}
}
