package sessions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/reserved"
)

// DefaultMaxBytes bounds SQ_SESSIONS when Deps.MaxBytes is 0.
const DefaultMaxBytes = 1 << 30

// DefaultMaxWatchers bounds the deltas requests one node holds waiting.
const DefaultMaxWatchers = 4096

// Deps is what the session store needs from the node.
type Deps struct {
	// Log gets what could not be done in the background (a timer, an
	// activity write). Nil logs nothing.
	Log *slog.Logger
	// JS and Conn write and read the streams, follow the notes and
	// publish the events: the node's internal connection, which may write
	// storage and the broker's subjects.
	JS   jetstream.JetStream
	Conn *nats.Conn
	// Replicas of the two streams (0 means 1).
	Replicas int
	// Clustered: the node is one of a cluster, where the streams' reads
	// go to their leaders.
	Clustered bool
	// MaxBytes bounds SQ_SESSIONS; 0 is DefaultMaxBytes.
	MaxBytes int64
	// MaxWatchers bounds the waiting deltas requests; 0 is
	// DefaultMaxWatchers.
	MaxWatchers int
	// Principal names the sender of a request; nil: anonymous (auth off).
	Principal func(nats.Header) api.Principal
	// Admit charges a content change of tenant, of n bytes, to the
	// quotas of the tenant and of the request's sender (docs/quotas.md),
	// or refuses it (semaq.ErrOverloaded). Nil: no quota applies.
	Admit func(ctx context.Context, tenant string, n int) error
	// Gate runs the store's goroutines. Required.
	Gate *subsystem.Gate
	// Audit records dependency moves. Nil records nothing.
	Audit api.AuditFunc
	// Metrics counts operations, transitions and waiting watchers. Nil
	// counts nothing.
	Metrics Metrics
	// Now is the store's clock; nil is time.Now.
	Now func() time.Time
}

// Metrics is what the store reports (internal/metrics implements it).
type Metrics interface {
	SessionOp(op, result string)
	SessionTransition(from, to string)
	SessionWatchers(delta int)
	SessionActivity(result string)
}

type noMetrics struct{}

func (noMetrics) SessionOp(string, string)         {}
func (noMetrics) SessionTransition(string, string) {}
func (noMetrics) SessionWatchers(int)              {}
func (noMetrics) SessionActivity(string)           {}

// Store is a node's session store and its $SQ.API.SESSION handlers. Its
// methods are safe for concurrent use.
type Store struct {
	deps    Deps
	log     *slog.Logger
	now     func() time.Time
	stream  jetstream.Stream
	timers  jetstream.Stream
	closing chan struct{}
	once    sync.Once

	watchSlots chan struct{}
	waitMu     sync.Mutex
	waiters    map[key]map[chan struct{}]struct{}

	noteSub *nats.Subscription
	fireCtx jetstream.ConsumeContext

	act   *activity
	cache *cache
}

// Open makes sure the streams and the timer consumer exist and starts
// following firings and notes. ctx bounds the opening only.
func Open(ctx context.Context, deps Deps) (*Store, error) {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.MaxBytes == 0 {
		deps.MaxBytes = DefaultMaxBytes
	}
	if deps.MaxWatchers <= 0 {
		deps.MaxWatchers = DefaultMaxWatchers
	}
	if deps.Audit == nil {
		deps.Audit = api.NoAudit
	}
	if deps.Metrics == nil {
		deps.Metrics = noMetrics{}
	}
	if deps.Principal == nil {
		deps.Principal = func(nats.Header) api.Principal { return api.Principal{Who: api.Anonymous} }
	}
	if deps.Gate == nil {
		return nil, errors.New("sessions: no goroutine gate")
	}
	// A JetStream context of the store's own: its documents' writes are
	// acked asynchronously (commit), on a reply subscription of its own.
	js, err := jetstream.New(deps.Conn)
	if err != nil {
		return nil, fmt.Errorf("sessions: %w", err)
	}
	deps.JS = js
	s := &Store{deps: deps, log: deps.Log, now: deps.Now, closing: make(chan struct{}),
		watchSlots: make(chan struct{}, deps.MaxWatchers), waiters: map[key]map[chan struct{}]struct{}{},
		cache: newCache(defaultCacheBytes)}
	if s.stream, err = jsutil.EnsureStream(ctx, deps.JS, sessionsStreamConfig(deps.Replicas, deps.MaxBytes, deps.Clustered)); err != nil {
		return nil, fmt.Errorf("sessions: stream %s: %w", reserved.SessionStream, err)
	}
	if s.timers, err = jsutil.EnsureStream(ctx, deps.JS, timersStreamConfig(deps.Replicas)); err != nil {
		return nil, fmt.Errorf("sessions: stream %s: %w", reserved.SessionTimerStream, err)
	}
	if s.noteSub, err = deps.Conn.Subscribe(notePrefix+">", s.onNote); err != nil {
		return nil, fmt.Errorf("sessions: notes: %w", err)
	}
	if err := s.followTimers(ctx); err != nil {
		_ = s.noteSub.Unsubscribe()
		return nil, err
	}
	s.act = newActivity(s)
	if !deps.Gate.Go("activity", s.act.run) {
		s.stopFollowing()
		return nil, errors.New("sessions: the node is closing")
	}
	return s, nil
}

func (s *Store) stopFollowing() {
	if s.fireCtx != nil {
		s.fireCtx.Stop()
	}
	_ = s.noteSub.Unsubscribe()
}

// Close stops the timers' consumer, the activity writer and every waiting
// deltas request (which answer with what they have), and waits for them
// through the gate. Idempotent.
func (s *Store) Close(ctx context.Context) error {
	s.once.Do(func() {
		close(s.closing)
		s.stopFollowing()
	})
	return s.deps.Gate.Close(ctx)
}

// onNote wakes the deltas requests waiting on the session a note names.
func (s *Store) onNote(m *nats.Msg) {
	k, ok := keyOf(m.Subject[len(notePrefix):])
	if !ok {
		return
	}
	s.waitMu.Lock()
	for ch := range s.waiters[k] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	s.waitMu.Unlock()
}

// note tells every node k changed.
func (s *Store) note(k key) {
	if err := s.deps.Conn.Publish(k.note(), nil); err != nil {
		s.log.Debug("session note", "session", k, "err", err)
	}
}

// waitFor registers a wake-up for k's next note; cancel removes it.
func (s *Store) waitFor(k key) (ch chan struct{}, cancel func()) {
	ch = make(chan struct{}, 1)
	s.waitMu.Lock()
	if s.waiters[k] == nil {
		s.waiters[k] = map[chan struct{}]struct{}{}
	}
	s.waiters[k][ch] = struct{}{}
	s.waitMu.Unlock()
	return ch, func() {
		s.waitMu.Lock()
		delete(s.waiters[k], ch)
		if len(s.waiters[k]) == 0 {
			delete(s.waiters, k)
		}
		s.waitMu.Unlock()
	}
}
