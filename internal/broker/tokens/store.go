// Package tokens is the broker's side of token streams (docs/tokens.md):
// the SQ_TOKENS stream, the relay that is its only writer, the retention
// of closed streams, the $SQ.API.TOKENS.STATUS handler and the metrics and
// span of each stream's end.
//
// Writers (workers, through client.OpenTokenStream) send records to the
// relay (relay.go), which checks each record's writer key, form and limits
// and stores it with the writer's reply subject, so the writer gets
// JetStream's PubAck directly. The relay names the stream's tenant in the
// subject it stores under ($SQ.w.$tok.<tenant>.<id>.c|end); SQ_TOKENS
// captures $SQ.w.$tok.> and stores under $SQ.tok.>, so readers' consumer
// filters name the stored subjects, and NATS permissions on the tenant
// token keep each tenant to its own; it republishes each stored record on
// $SQ.w.$tokl.> for live readers, who so see only what was stored. The store also enforces retention: when the
// relay stores a terminal record it schedules the purge of the stream's
// subjects once the retention after close has passed. Timers and claims
// live in memory; the stream's MaxAge (semaq.MaxTokenAge) removes what a
// restart forgets and streams never closed.
//
// The package knows the rest of the node only through Deps: it imports no
// other subsystem. The dispatcher reaches it through BindJob and EndJob.
package tokens

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

	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/internal/telemetry"
	"github.com/semaq/semaq/semaq"
)

// Deps is what the token store needs from the node.
type Deps struct {
	// JS is JetStream on the internal connection: it creates SQ_TOKENS,
	// reads it for the status API and purges it. Required.
	JS jetstream.JetStream
	// Conn is the internal connection: the relay subscribes on it and
	// stores the records it admits with it. Required.
	Conn *nats.Conn
	// Egress answers refused records on the writer's reply subject
	// (docs/security.md); nil answers nothing.
	Egress *nats.Conn
	// Reply maps a writer's reply subject to the one its stored record
	// carries, for the ack JetStream sends; nil keeps it. The node routes
	// the replies the NATS server would refuse from a client of its
	// account (another account's, _R_.…) through its ack router.
	Reply func(reply string) string
	// ReplyDropped undoes Reply for a record that was not sent after all
	// (reply is the writer's, via what Reply made of it). Nil: nothing.
	ReplyDropped func(reply, via string)
	// Log receives the store's warnings and debug lines; nil discards them.
	Log *slog.Logger
	// Limits bound token streams; a zero field keeps its default
	// (DefaultLimits).
	Limits Limits
	// FileStorage keeps SQ_TOKENS on file; memory otherwise. A stream kept
	// from an earlier run with the other storage keeps it.
	FileStorage bool
	// Replicas of SQ_TOKENS (0 means 1); a stream with fewer is raised to
	// them, one with more keeps its own.
	Replicas int
	// QueuedJob reports whether a work queue of this node holds a request
	// whose Nats-Msg-Id is id (queued, delayed or held), and its tenant:
	// the status API's last resort. It must not block on the store. Nil:
	// none is.
	QueuedJob func(id string) (tenant string, ok bool)
	// Sender says who sent a record or a status request, from its
	// headers. A stream's tenant is its job's (BindJob); a writer no job
	// binds yet writes under its own tenant, or under the AI-Tenant it
	// names if it may write for any (Sender). Nil: every sender acts for
	// every tenant.
	Sender func(h nats.Header) Sender
	// Node is this node's name, and ShareBinds makes BindJob tell every
	// other node's relay (a cluster: a worker's records reach the relay of
	// the node it is connected to, which may not be the dispatcher's).
	Node       string
	ShareBinds bool
	// WritePrefix is where the relay listens for records: the node maps
	// semaq.TokenWritePrefix to NodeWritePrefix(Node) (bind.go). Empty:
	// semaq.TokenWritePrefix itself (a node alone, without the mapping).
	WritePrefix string
	// Filter returns the policy of request id's stream of tenant token
	// tenant, nil when none applies (policy.go). Nil: no stream has one.
	Filter func(id, tenant string) Filter
	// Metrics and Tracing, when set, measure every stream from its
	// terminal record (observe.go).
	Metrics *metrics.Metrics
	Tracing *telemetry.Tracing
	// Gate runs the store's goroutines (the sweeper, purges of a foreign
	// writer's records, a stream's end); Close closes it. Nil makes one
	// of the store's own.
	Gate *subsystem.Gate
}

// Sender is who sent a record or a status request, as far as token
// streams care (Deps.Sender).
type Sender struct {
	// Tenant is the sender's own tenant; "" for none.
	Tenant string
	// AnyTenant: it reads every tenant's streams and writes for any
	// (services, admins, the broker, anyone with auth off).
	AnyTenant bool
	// Worker: a worker without a tenant, which serves every tenant's jobs
	// and so writes for the tenant of the job it serves (it names it on
	// record 1), but reads no one's.
	Worker bool
}

// Store is the relay and the retention timers of token streams. Make it
// with New, start it with Start, stop it with Close. Its methods are safe
// for concurrent use; BindJob, EndJob and Close may be called on a nil
// Store, and do nothing.
//
// Goroutines and subscriptions, all started by Start or by the store's
// own work and all waited for by Close: the relay's subscription on
// Deps.WritePrefix (its handler runs on the subscription's goroutine), the
// sweeper (once a minute), the retention timers' purges and the purges of
// a foreign writer's records (BindJob).
type Store struct {
	js        jetstream.JetStream
	nc        *nats.Conn // internal: stores records
	egress    *nats.Conn // answers refusals; nil answers nothing
	log       *slog.Logger
	storage   jetstream.StorageType
	replicas  int
	queuedJob func(id string) (string, bool)
	sender    func(h nats.Header) Sender
	node      string
	share     bool // BindJob tells the other nodes (bind.go)
	// writePrefix is where the relay listens (Deps.WritePrefix).
	writePrefix string
	gate        *subsystem.Gate
	reply       func(string) string // nil keeps a writer's reply
	replyDrop   func(reply, via string)
	metrics     *metrics.Metrics
	tracing     *telemetry.Tracing
	filter      func(id, tenant string) Filter

	stream   jetstream.Stream // set by Start
	relaySub *nats.Subscription
	bindSub  *nats.Subscription // other nodes' bindings (bind.go)
	stats    relayStats
	work     sync.WaitGroup // purges and purgeForeign; Add only under mu while !closed
	sweeper  chan struct{}  // closed by Close
	swept    chan struct{}  // closed when the sweeper exits; nil before Start

	mu     sync.Mutex
	limits Limits
	claims map[string]*claim      // request id -> what the relay knows of it
	timers map[string]*time.Timer // request id -> purge
	closed bool
	// answering: this node's answer recorder runs; lateAnswers counts the
	// unbound answers being written (answers.go).
	answering   bool
	lateAnswers int
}

// New checks deps and makes a store. It starts nothing: Start does.
func New(deps Deps) (*Store, error) {
	if deps.JS == nil || deps.Conn == nil {
		return nil, errors.New("tokens: JetStream and the internal connection are required")
	}
	log := deps.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	storage := jetstream.MemoryStorage
	if deps.FileStorage {
		storage = jetstream.FileStorage
	}
	writePrefix := deps.WritePrefix
	if writePrefix == "" {
		writePrefix = semaq.TokenWritePrefix
	}
	if deps.Gate == nil {
		deps.Gate = subsystem.NewGate("tokens")
	}
	return &Store{js: deps.JS, gate: deps.Gate, writePrefix: writePrefix, nc: deps.Conn, egress: deps.Egress, log: log, storage: storage, replicas: deps.Replicas,
		queuedJob: deps.QueuedJob, sender: deps.Sender, node: deps.Node, share: deps.ShareBinds, reply: deps.Reply, replyDrop: deps.ReplyDropped, metrics: deps.Metrics, tracing: deps.Tracing, filter: deps.Filter,
		limits: deps.Limits.withDefaults(), claims: map[string]*claim{}, timers: map[string]*time.Timer{},
		sweeper: make(chan struct{})}, nil
}

// streamConfig is SQ_TOKENS' configuration.
func streamConfig(storage jetstream.StorageType, l Limits, replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        semaq.TokenStream,
		Description: "SemaQ token streams",
		// Only the relay writes here; stored under the subjects readers
		// filter on.
		Subjects:         []string{reserved.TokenStorePrefix + ">"},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: reserved.TokenStorePrefix + ">", Destination: semaq.TokenPrefix + ">"},
		RePublish:        &jetstream.RePublish{Source: semaq.TokenPrefix + ">", Destination: semaq.TokenLivePrefix + ">"},
		Storage:          storage,
		Retention:        jetstream.LimitsPolicy,
		MaxAge:           semaq.MaxTokenAge,
		MaxBytes:         l.StoreBytes,
		MaxMsgSize:       semaq.MaxTokenRecordBytes + 4096,
		// Full means new records are refused: evicting the oldest would
		// cut other tenants' answers, possibly ones still being read.
		Discard:  jetstream.DiscardNew,
		Replicas: max(replicas, 1),
		// Chunks carry no Nats-Msg-Id; a short window keeps the dedup
		// table empty.
		Duplicates: time.Second,
	}
}

// Start creates (or updates) SQ_TOKENS, learns the streams stored before
// it, subscribes the relay and starts the sweeper. On an error, Close
// stops whatever was started.
func (ts *Store) Start(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ts.mu.Lock()
	cfg := streamConfig(ts.storage, ts.limits, ts.replicas)
	ts.mu.Unlock()
	st, err := jsutil.EnsureStream(ctx, ts.js, cfg)
	if err != nil && strings.Contains(err.Error(), "storage type") {
		// A stream kept from an earlier run with the other storage: keep
		// its storage rather than refuse to start, but take the rest.
		ts.log.Warn("token stream storage differs from the configuration; delete SQ_TOKENS to change it", "want", cfg.Storage)
		if cfg.Storage == jetstream.FileStorage {
			cfg.Storage = jetstream.MemoryStorage
		} else {
			cfg.Storage = jetstream.FileStorage
		}
		st, err = jsutil.EnsureStream(ctx, ts.js, cfg)
	}
	if err != nil {
		return fmt.Errorf("broker: token stream %s: %w", semaq.TokenStream, err)
	}
	ts.stream = st
	if err := ts.loadLegacy(ctx); err != nil {
		return fmt.Errorf("broker: token streams stored before this start: %w", err)
	}
	if err := ts.startBinds(); err != nil {
		return err
	}
	if err := ts.startRelay(); err != nil {
		return err
	}
	ts.startAnswersIfKept(ctx)
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.closed {
		return errors.New("broker: token streams: closed while starting")
	}
	ts.swept = make(chan struct{})
	if !ts.gate.Go("sweeper", func(context.Context) { ts.sweepLoop() }) {
		close(ts.swept)
		return errors.New("broker: token streams: the node is shutting down")
	}
	return nil
}

// ended handles a stored terminal record: metrics, then the purge after
// its retention.
func (ts *Store) ended(id string, m *nats.Msg) {
	ts.observeEnd(m)
	ts.closedStream(id, m, ts.debug)
}

func (ts *Store) sweepLoop() {
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
func (ts *Store) closedStream(id string, m *nats.Msg, logf func(string, ...any)) {
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

func (ts *Store) purge(id string, logf func(string, ...any)) {
	ts.mu.Lock()
	delete(ts.timers, id)
	if ts.closed {
		ts.mu.Unlock()
		return
	}
	ts.work.Add(1) // under mu while open: Close waits for it
	ts.mu.Unlock()
	defer ts.work.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ts.stream.Purge(ctx, jetstream.WithPurgeSubject(semaq.TokenSubjectFilter(semaq.TokenAnyTenant, id))); err != nil {
		if !errors.Is(err, nats.ErrConnectionClosed) {
			logf("token stream: purge after retention", "id", id, "err", err)
		}
		return
	}
	ts.forget(id)
}

// Close stops the relay (records already delivered to it are answered:
// the broker is stopping), cancels every pending purge (the stream's
// MaxAge takes over) and waits, bounded by ctx, for every goroutine and
// subscription the store started. It may be called more than once.
func (ts *Store) Close(ctx context.Context) error {
	if ts == nil {
		return nil
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
	swept := ts.swept
	ts.mu.Unlock()

	var errs []error
	ts.stopBinds()
	if err := ts.stopRelay(ctx); err != nil {
		errs = append(errs, err)
	}
	done := make(chan struct{})
	go func() {
		if swept != nil {
			<-swept
		}
		ts.work.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("token streams: waiting for purges: %w", ctx.Err()))
	}
	if err := ts.gate.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("token streams: goroutines: %w", err))
	}
	return errors.Join(errs...)
}

// Stats is what the store holds and what its relay did.
type Stats struct {
	Stored        uint64 // records the relay handed to JetStream
	Refused       uint64 // records the relay refused
	Claims        int    // request ids the relay tracks
	PendingPurges int    // closed streams waiting for their purge
}

// Stats reports the store's counters.
func (ts *Store) Stats() Stats {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return Stats{Stored: ts.stats.stored.Load(), Refused: ts.stats.refused.Load(),
		Claims: len(ts.claims), PendingPurges: len(ts.timers)}
}

// SetLimits replaces the limits of token streams on a running node:
// SQ_TOKENS' MaxBytes and the relay's per-request limits. A zero field
// keeps its default.
func (ts *Store) SetLimits(ctx context.Context, l Limits) error {
	if ts.stream == nil {
		return errors.New("broker: token stream: not started")
	}
	l = l.withDefaults()
	info, err := ts.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("broker: token stream: %w", err)
	}
	if _, err := ts.js.UpdateStream(ctx, streamConfig(info.Config.Storage, l, max(ts.replicas, info.Config.Replicas))); err != nil {
		return fmt.Errorf("broker: token stream limits: %w", err)
	}
	ts.mu.Lock()
	ts.limits = l
	ts.mu.Unlock()
	return nil
}
