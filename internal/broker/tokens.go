package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/semaq"
)

// Token-stream store (docs/tokens.md).
//
// Records are written straight into SQ_TOKENS by whoever produces them
// (workers, through client.OpenTokenStream): the store is on the hot path
// of every generated token, so it skips the ingress. The broker only keeps
// the stream and enforces retention: it listens to the terminal records
// ($SQ.tok.*.end, a few per request, never the chunks) and purges a
// stream's subjects once its retention after close has passed. Timers live
// in memory; the stream's MaxAge (semaq.MaxTokenAge) removes what a
// restart forgets and streams never closed.

// tokenStore runs the retention timers of closed token streams.
type tokenStore struct {
	js     jetstream.JetStream
	stream jetstream.Stream
	sub    *nats.Subscription

	mu     sync.Mutex
	timers map[string]*time.Timer // request id -> purge
	closed bool
}

// tokenStorage is the JetStream storage of SQ_TOKENS: memory unless the
// configuration asks for file.
func (s *Server) tokenStorage() jetstream.StorageType {
	if s.cfg.TokenStorage == "file" {
		return jetstream.FileStorage
	}
	return jetstream.MemoryStorage
}

// startTokens creates (or updates) SQ_TOKENS and subscribes to the
// terminal records.
func (s *Server) startTokens(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cfg := jetstream.StreamConfig{
		Name:        semaq.TokenStream,
		Description: "SemaQ token streams",
		Subjects:    []string{semaq.TokenPrefix + ">"},
		Storage:     s.tokenStorage(),
		Retention:   jetstream.LimitsPolicy,
		MaxAge:      semaq.MaxTokenAge,
		Discard:     jetstream.DiscardOld,
		Replicas:    1,
		// Chunks carry no Nats-Msg-Id; a short window keeps the dedup
		// table empty.
		Duplicates: time.Second,
	}
	st, err := s.js.CreateOrUpdateStream(ctx, cfg)
	if err != nil && strings.Contains(err.Error(), "storage type") {
		// A stream kept from an earlier run with the other storage: use
		// it as it is rather than refuse to start.
		st, err = s.js.Stream(ctx, semaq.TokenStream)
		if err == nil {
			s.log.Warn("token stream storage differs from the configuration; delete SQ_TOKENS to change it",
				"have", st.CachedInfo().Config.Storage, "want", cfg.Storage)
		}
	}
	if err != nil {
		return fmt.Errorf("broker: token stream %s: %w", semaq.TokenStream, err)
	}
	ts := &tokenStore{js: s.js, stream: st, timers: map[string]*time.Timer{}}
	ts.sub, err = s.nc.QueueSubscribe(semaq.TokenPrefix+"*.end", "semaq.tokens", func(m *nats.Msg) {
		ts.closedStream(m, s.log.Debug)
		s.observeTokenEnd(m) // metrics and span of the stream (observe_tokens.go)
	})
	if err != nil {
		return fmt.Errorf("broker: token stream retention: %w", err)
	}
	s.tokens = ts
	return nil
}

// closedStream schedules the purge of the stream a terminal record closed.
func (ts *tokenStore) closedStream(m *nats.Msg, logf func(string, ...any)) {
	id := strings.TrimSuffix(strings.TrimPrefix(m.Subject, semaq.TokenPrefix), ".end")
	if semaq.CheckRequestID(id) != nil {
		return
	}
	retention := semaq.DefaultTokenRetention
	if v := m.Header.Get(semaq.HdrTokenRetention); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			logf("token stream: ignoring bad retention", "id", id, "value", v)
		} else {
			retention = min(d, semaq.MaxTokenAge)
		}
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		return
	}
	if t := ts.timers[id]; t != nil {
		t.Stop()
	}
	ts.timers[id] = time.AfterFunc(retention, func() { ts.purge(id, logf) })
}

func (ts *tokenStore) purge(id string, logf func(string, ...any)) {
	ts.mu.Lock()
	delete(ts.timers, id)
	closed := ts.closed
	ts.mu.Unlock()
	if closed {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ts.stream.Purge(ctx, jetstream.WithPurgeSubject(semaq.TokenSubjectFilter(id))); err != nil &&
		!errors.Is(err, nats.ErrConnectionClosed) {
		logf("token stream: purge after retention", "id", id, "err", err)
	}
}

// stop cancels every pending purge; the stream's MaxAge takes over.
func (ts *tokenStore) stop() {
	if ts == nil {
		return
	}
	if ts.sub != nil {
		_ = ts.sub.Unsubscribe()
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.closed = true
	for id, t := range ts.timers {
		t.Stop()
		delete(ts.timers, id)
	}
}

// pendingPurges is the number of closed streams waiting for their purge.
func (ts *tokenStore) pendingPurges() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.timers)
}
