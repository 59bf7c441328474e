package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/semaq"
)

// Token-stream store (docs/tokens.md).
//
// Writers (workers, through client.OpenTokenStream) send records to the
// relay (tokens_relay.go), which is the only writer of SQ_TOKENS: it checks
// each record's writer key, form and limits and stores it with the
// writer's reply subject, so the writer gets JetStream's PubAck directly.
// SQ_TOKENS captures $SQ.w.$tok.> and stores under $SQ.tok.>, so readers'
// consumer filters name the stored subjects; it republishes each stored
// record on $SQ.w.$tokl.> for live readers, who so see only what was
// stored. The store also enforces retention: when the relay stores a
// terminal record it schedules the purge of the stream's subjects once the
// retention after close has passed. Timers and claims live in memory; the
// stream's MaxAge (semaq.MaxTokenAge) removes what a restart forgets and
// streams never closed.

// tokenStore is the relay and the retention timers of token streams.
type tokenStore struct {
	js       jetstream.JetStream
	stream   jetstream.Stream
	nc       *nats.Conn // internal: stores records
	egress   *nats.Conn // answers refusals; nil answers nothing
	log      *slog.Logger
	onEnd    func(m *nats.Msg) // metrics of a stored terminal record
	relaySub *nats.Subscription
	stats    relayStats
	purging  sync.WaitGroup // purgeForeign goroutines
	sweeper  chan struct{}  // closed by stop
	swept    chan struct{}  // closed when the sweeper exits

	mu     sync.Mutex
	limits tokenLimits
	claims map[string]*tokenClaim // request id -> what the relay knows of it
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

// tokenLimits are the limits of token streams. Config wiring (config.go,
// not here): token_max_bytes -> storeBytes, token_stream_max_bytes ->
// streamBytes, token_stream_max_records -> streamRecords,
// token_max_streams -> maxStreams; zero keeps the default.
func (s *Server) tokenLimits() tokenLimits {
	l := defaultTokenLimits()
	c := &s.cfg
	if c.TokenMaxBytes > 0 {
		l.storeBytes = c.TokenMaxBytes
	}
	if c.TokenStreamMaxBytes > 0 {
		l.streamBytes = c.TokenStreamMaxBytes
	}
	if c.TokenStreamMaxRecords > 0 {
		l.streamRecords = c.TokenStreamMaxRecords
	}
	if c.TokenMaxStreams > 0 {
		l.maxStreams = c.TokenMaxStreams
	}
	return l
}

// tokenStreamConfig is SQ_TOKENS' configuration.
func tokenStreamConfig(storage jetstream.StorageType, l tokenLimits) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        semaq.TokenStream,
		Description: "SemaQ token streams",
		// Only the relay writes here; stored under the subjects readers
		// filter on.
		Subjects:         []string{semaq.TokenStorePrefix + ">"},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: semaq.TokenStorePrefix + ">", Destination: semaq.TokenPrefix + ">"},
		RePublish:        &jetstream.RePublish{Source: semaq.TokenPrefix + ">", Destination: semaq.TokenLivePrefix + ">"},
		Storage:          storage,
		Retention:        jetstream.LimitsPolicy,
		MaxAge:           semaq.MaxTokenAge,
		MaxBytes:         l.storeBytes,
		MaxMsgSize:       semaq.MaxTokenRecordBytes + 4096,
		// Full means new records are refused: evicting the oldest would
		// cut other tenants' answers, possibly ones still being read.
		Discard:  jetstream.DiscardNew,
		Replicas: 1,
		// Chunks carry no Nats-Msg-Id; a short window keeps the dedup
		// table empty.
		Duplicates: time.Second,
	}
}

// startTokens creates (or updates) SQ_TOKENS and starts the relay.
func (s *Server) startTokens(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	limits := s.tokenLimits()
	cfg := tokenStreamConfig(s.tokenStorage(), limits)
	st, err := s.js.CreateOrUpdateStream(ctx, cfg)
	if err != nil && strings.Contains(err.Error(), "storage type") {
		// A stream kept from an earlier run with the other storage: keep
		// its storage rather than refuse to start, but take the rest.
		s.log.Warn("token stream storage differs from the configuration; delete SQ_TOKENS to change it", "want", cfg.Storage)
		if cfg.Storage == jetstream.FileStorage {
			cfg.Storage = jetstream.MemoryStorage
		} else {
			cfg.Storage = jetstream.FileStorage
		}
		st, err = s.js.CreateOrUpdateStream(ctx, cfg)
	}
	if err != nil {
		return fmt.Errorf("broker: token stream %s: %w", semaq.TokenStream, err)
	}
	ts := &tokenStore{js: s.js, stream: st, nc: s.nc, egress: s.egress, log: s.log.With("component", "tokens"),
		limits: limits, claims: map[string]*tokenClaim{}, timers: map[string]*time.Timer{},
		sweeper: make(chan struct{}), swept: make(chan struct{})}
	ts.onEnd = s.observeTokenEnd // observe_tokens.go
	if err := ts.loadLegacy(ctx); err != nil {
		return fmt.Errorf("broker: token streams stored before this start: %w", err)
	}
	if err := ts.startRelay(s.nc); err != nil {
		return err
	}
	go ts.sweepLoop()
	s.tokens = ts
	return nil
}

// ended handles a stored terminal record: metrics, then the purge after
// its retention.
func (ts *tokenStore) ended(id string, m *nats.Msg) {
	if ts.onEnd != nil {
		ts.onEnd(m)
	}
	ts.closedStream(id, m, ts.debug)
}

func (ts *tokenStore) sweepLoop() {
	defer close(ts.swept)
	t := time.NewTicker(time.Minute)
	defer t.Stop()
	for {
		select {
		case now := <-t.C:
			ts.sweep(now)
		case <-ts.sweeper:
			return
		}
	}
}

// closedStream schedules the purge of the stream a terminal record closed.
func (ts *tokenStore) closedStream(id string, m *nats.Msg, logf func(string, ...any)) {
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
	if err := ts.stream.Purge(ctx, jetstream.WithPurgeSubject(semaq.TokenSubjectFilter(id))); err != nil {
		if !errors.Is(err, nats.ErrConnectionClosed) {
			logf("token stream: purge after retention", "id", id, "err", err)
		}
		return
	}
	ts.forget(id)
}

// stop stops the relay and cancels every pending purge (the stream's
// MaxAge takes over), and waits for the goroutines it started.
func (ts *tokenStore) stop() {
	if ts == nil {
		return
	}
	if ts.relaySub != nil {
		_ = ts.relaySub.Unsubscribe()
	}
	ts.mu.Lock()
	if !ts.closed {
		close(ts.sweeper)
	}
	ts.closed = true
	for id, t := range ts.timers {
		t.Stop()
		delete(ts.timers, id)
	}
	ts.mu.Unlock()
	<-ts.swept
	ts.purging.Wait()
}

// pendingPurges is the number of closed streams waiting for their purge.
func (ts *tokenStore) pendingPurges() int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return len(ts.timers)
}

// setTokenLimits replaces the limits of token streams on a running node:
// SQ_TOKENS' MaxBytes and the relay's per-request limits.
func (s *Server) setTokenLimits(ctx context.Context, l tokenLimits) error {
	ts := s.tokens
	info, err := ts.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("broker: token stream: %w", err)
	}
	if _, err := s.js.UpdateStream(ctx, tokenStreamConfig(info.Config.Storage, l)); err != nil {
		return fmt.Errorf("broker: token stream limits: %w", err)
	}
	ts.mu.Lock()
	ts.limits = l
	ts.mu.Unlock()
	return nil
}
