// Package routes is the route rules of a node: the ingress stores a message
// under a target subject chosen by CEL rules instead of the subject it was
// published to (docs/routing.md).
//
// The rules live in the KV bucket SQ_ROUTES, one key per rule. Every node
// keeps them compiled in an immutable table (routes/table, a leaf the
// ingress imports instead of this package), rebuilt by a KV watcher
// (jsutil.Follower) on each change: the ingress reads the table with one
// atomic load and no lock. The node that handles an add or delete replies
// once its own table shows the change, so the publisher that changed a rule
// sees it applied on its next publish; other nodes follow within the
// watcher's delivery time.
//
// Per-rule counters live in the compiled rule, which a rebuild reuses while
// the rule's KV revision is unchanged. Adaptive splits move their weights
// with the health of their targets' consumers (health.go).
package routes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/routes/table"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/expr"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// loadTimeout bounds loading the rules when the node starts.
const loadTimeout = 30 * time.Second

// bucketBytes bounds the route rules on disk.
const bucketBytes = 16 << 20

// Deps is what the route rules need from the node.
type Deps struct {
	// Log gets rule changes and the rules this node cannot run. Nil logs
	// nothing.
	Log *slog.Logger
	// JS opens the SQ_ROUTES bucket (created when missing) and reads the
	// stored messages an adaptive split's error advisories point at: the
	// internal connection's JetStream, which may write the bucket.
	JS jetstream.JetStream
	// Replicas of SQ_ROUTES (0 means 1); a bucket with fewer is raised to
	// them.
	Replicas int
	// Conn subscribes to the consumer advisories and ack metrics adaptive
	// splits follow: the internal connection.
	Conn *nats.Conn
	// Expr configures the CEL environment rules compile in.
	Expr expr.Config
	// StreamFor names the stream the ingress serves that captures a
	// literal subject, "" when none does. Called from API handlers and
	// the health interval; must not block.
	StreamFor func(subject string) string
	// StreamSubjects returns the subject patterns the ingress serves for
	// a stream, nil when it serves none. Called from advisory handlers;
	// must not block.
	StreamSubjects func(stream string) []string
	// StreamsCapturing names the streams of the cluster (not only those
	// served here) that capture a public subject: an added rule's targets
	// must each have one.
	StreamsCapturing func(ctx context.Context, subject string) ([]string, error)
	// Applied, when set, is called after a rule change is in effect on
	// this node and before the change is answered, with the bucket
	// revision holding it: in a cluster the node waits there for the
	// other nodes to apply it (WaitApplied on theirs).
	Applied func(ctx context.Context, rev uint64)
	// Check runs the ingress's pipeline as a dry run on the message of
	// $SQ.API.ROUTE.TEST, sent by the request's sender (ctx carries its
	// headers) or, with as, by that store user: what the ingress decided,
	// and its refusal. err is for a request that cannot be tried (an
	// unknown as). m is changed as the ingress changes it. Required.
	Check func(ctx context.Context, m *nats.Msg, as string) (c Checked, refused *semaq.APIError, err error)
	// Audit records each rule added or deleted (docs/security.md, Audit).
	// Nil records nothing.
	Audit api.AuditFunc
	// Node is this node's name, as JetStream names stream leaders;
	// Clustered says it is one node of several: the leader of the rule
	// bucket's stream computes the adaptive weights (shared.go).
	Node      string
	Clustered bool
	// Gate runs the health interval; Close closes it. Nil makes one of
	// the package's own.
	Gate *subsystem.Gate
}

// Checked is what the ingress decided on the message of a dry run.
type Checked struct {
	// Stream and Subject are where it is stored.
	Stream, Subject string
	// Rule is the rule that matched, Target its pick; nil when none did.
	Rule   *table.Rule
	Target *table.Target
	// RefusedBy names the step that refused it, if one did.
	RefusedBy string
}

// Router owns the rule bucket, its watcher, the current table and the
// health of adaptive splits. Its methods are safe for concurrent use.
type Router struct {
	log   *slog.Logger
	deps  Deps
	env   *expr.Env
	kv    jetstream.KeyValue
	rules *jsutil.Follower[*table.Table]

	health *health // adaptive splits (health.go)
}

// Open creates the bucket if needed, loads every rule, starts the watcher
// and the health interval of adaptive splits. It returns once the table
// holds every rule stored, so a node that opens its ingress after it
// stores no message unrouted. ctx bounds the opening only.
func Open(ctx context.Context, deps Deps) (*Router, error) {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Gate == nil {
		deps.Gate = subsystem.NewGate("routes")
	}
	if deps.Audit == nil {
		deps.Audit = api.NoAudit
	}
	ctx, cancel := context.WithTimeout(ctx, loadTimeout)
	defer cancel()
	env, err := expr.NewEnvConfig(deps.Expr)
	if err != nil {
		return nil, fmt.Errorf("route rules: %w", err)
	}
	kv, err := jsutil.Bucket(ctx, deps.JS, jetstream.KeyValueConfig{
		Bucket:      reserved.RouteBucket,
		Description: "SemaQ route rules",
		History:     1,
		MaxBytes:    bucketBytes, // a full bucket refuses new rules
		Storage:     jetstream.FileStorage,
		Replicas:    max(deps.Replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("route rules: bucket %s: %w", reserved.RouteBucket, err)
	}
	rt := &Router{log: deps.Log, deps: deps, env: env, kv: kv}
	m := newModel(env, deps.Log)
	if rt.rules, err = jsutil.Follow(ctx, kv, m.apply, m.table); err != nil {
		return nil, fmt.Errorf("route rules: %w", err)
	}
	if t := rt.rules.Load(); t.Len() > 0 {
		rt.log.Info("route rules loaded", "rules", t.Len(), "not_loaded", len(t.Broken()))
	}
	if rt.health, err = startHealth(rt); err != nil {
		_ = rt.rules.Close()
		return nil, fmt.Errorf("route health: %w", err)
	}
	return rt, nil
}

// Table returns the current rule table: the ingress calls it once per
// message.
func (rt *Router) Table() *table.Table { return rt.rules.Load() }

// Close stops the health interval and the rule watcher and waits for their
// goroutines, or until ctx is done. The last table stays readable: the
// ingress keeps routing with it. Idempotent.
func (rt *Router) Close(ctx context.Context) error {
	var errs []error
	if err := rt.health.close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("route health: %w", err))
	}
	if err := rt.deps.Gate.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("route goroutines: %w", err))
	}
	if err := rt.rules.Close(); err != nil {
		errs = append(errs, fmt.Errorf("route rules: %w", err))
	}
	return errors.Join(errs...)
}

// WaitApplied returns once this node's table includes bucket revision rev.
func (rt *Router) WaitApplied(ctx context.Context, rev uint64) error {
	_, err := rt.waitRev(ctx, rev)
	return err
}

// applied reports a change in effect here (Deps.Applied).
func (rt *Router) applied(ctx context.Context, rev uint64) {
	if rt.deps.Applied != nil {
		rt.deps.Applied(ctx, rev)
	}
}

// waitRev returns once the table includes KV revision rev.
func (rt *Router) waitRev(ctx context.Context, rev uint64) (*table.Table, error) {
	t, err := rt.rules.WaitRev(ctx, rev)
	switch {
	case errors.Is(err, jsutil.ErrStopped):
		return nil, errors.New("the route watcher has stopped")
	case err != nil:
		return nil, fmt.Errorf("waiting for the route table to load revision %d: %w", rev, err)
	}
	return t, nil
}

// model is the watcher's working copy of the rules.
type model struct {
	env    *expr.Env
	log    *slog.Logger
	rev    uint64
	rules  map[string]*table.Rule
	broken map[string]*table.Broken
	// weights are the stored weights of adaptive rules, by rule name
	// (shared.go).
	weights map[string]*weightsRecord
}

func newModel(env *expr.Env, log *slog.Logger) *model {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &model{env: env, log: log, rules: map[string]*table.Rule{}, broken: map[string]*table.Broken{}, weights: map[string]*weightsRecord{}}
}

// apply folds one KV entry into the model.
func (m *model) apply(e jetstream.KeyValueEntry) {
	env, log := m.env, m.log
	m.rev = max(m.rev, e.Revision())
	if m.applyWeightsEntry(e) {
		return
	}
	name := e.Key()
	if cur, ok := m.rules[name]; ok && cur.Rev() == e.Revision() {
		return
	}
	delete(m.rules, name)
	delete(m.broken, name)
	if e.Operation() != jetstream.KeyValuePut {
		return
	}
	var d semaq.Route
	err := json.Unmarshal(e.Value(), &d)
	if err == nil && d.Name != name {
		err = fmt.Errorf("stored under key %q but named %q", name, d.Name)
	}
	var r *table.Rule
	if err == nil {
		r, err = table.CompileRule(env, d, e.Revision(), e.Created())
	}
	if err != nil {
		if d.Name == "" {
			d.Name = name
		}
		log.Warn("route rule not loaded: it does not route on this node", "route", name, "revision", e.Revision(), "err", err)
		m.broken[name] = &table.Broken{Route: d, Rev: e.Revision(), Created: e.Created(), Err: err.Error()}
		return
	}
	m.rules[name] = r
	if rec := m.weights[name]; rec != nil {
		applyWeights(r, rec)
	}
}

// table builds the table of the rules applied so far.
func (m *model) table() *table.Table {
	return table.New(m.rev, maps.Values(m.rules), maps.Values(m.broken))
}
