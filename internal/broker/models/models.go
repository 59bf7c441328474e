// Package models is the model registry (docs/models.md): models, their
// versions and lifecycle in the replicated KV bucket SQ_MODELS (one key
// per model, changed by compare-and-set), followed on every node into an
// immutable snapshot the ingress binds requests with (Bind): a request
// for a registered model gets the version the snapshot picks, active or
// canary, stamped as AI-Model-Version with the snapshot's revision as
// AI-Model-Revision. Every change is an event on SQ_MODEL_EVENTS.
package models

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// Bounds of the registry's storage.
const (
	bucketBytes = 64 << 20 // SQ_MODELS: MaxModels records of at most recordBytes
	recordBytes = 48 << 10 // one model's record
	eventBytes  = 64 << 20 // SQ_MODEL_EVENTS, oldest dropped first
	eventMaxAge = 30 * 24 * time.Hour
)

// Deps is what the registry needs of the node.
type Deps struct {
	// Log gets what could not be done after a change (an event, a
	// dependency move). Nil logs nothing.
	Log *slog.Logger
	// JS and Conn are the internal connection: the bucket, the events,
	// the queues' status for drains.
	JS   jetstream.JetStream
	Conn *nats.Conn
	// Replicas of the bucket and the event stream (0 means 1).
	Replicas int
	// Principal names a request's sender; nil: anonymous (auth off).
	Principal func(nats.Header) api.Principal
	// Audit records changes. Nil records nothing.
	Audit api.AuditFunc
	// Applied returns once every node of the cluster has applied revision
	// rev (the cluster sync); nil on a single node.
	Applied func(ctx context.Context, rev uint64)
	// InFlight counts the requests bound to a version that the queues
	// hold, queued or leased, on every node; nil asks each queue's
	// dispatcher ($SQ.API.QUEUE.INFO).
	InFlight func(ctx context.Context, model, version string) (int, error)
	// Moved degrades the sessions that declared another version of
	// dependency name (sessions.Store.DependencyMoved); nil: none. It
	// runs on Gate, after the change has returned: it reads every
	// session.
	Moved func(ctx context.Context, name, version string) (int, error)
	// Gate runs the dependency moves; nil: a gate of the registry's own.
	Gate *subsystem.Gate
	// Metrics counts bindings and calls, and shows the states. Nil counts
	// nothing.
	Metrics Metrics
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Metrics is what the registry reports (internal/metrics implements it).
type Metrics interface {
	ModelBound(model, version string)
	ModelOp(op, result string)
	ModelStates(states map[[2]string]string) // (model, version) -> state
}

type noMetrics struct{}

func (noMetrics) ModelBound(string, string)        {}
func (noMetrics) ModelOp(string, string)           {}
func (noMetrics) ModelStates(map[[2]string]string) {}

// Registry is a node's model registry. Its methods are safe for
// concurrent use.
type Registry struct {
	deps   Deps
	log    *slog.Logger
	kv     jetstream.KeyValue
	follow *jsutil.Follower[*Snapshot]
}

// Open creates the bucket and the event stream if needed and loads the
// registry; it returns once the snapshot holds every model stored.
func Open(ctx context.Context, deps Deps) (*Registry, error) {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Audit == nil {
		deps.Audit = api.NoAudit
	}
	if deps.Metrics == nil {
		deps.Metrics = noMetrics{}
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	if deps.Gate == nil {
		deps.Gate = subsystem.NewGate("models")
	}
	r := &Registry{deps: deps, log: deps.Log}
	if r.deps.InFlight == nil {
		r.deps.InFlight = r.queuedInFlight
	}
	var err error
	r.kv, err = jsutil.Bucket(ctx, deps.JS, jetstream.KeyValueConfig{
		Bucket: reserved.ModelBucket, Description: "SemaQ model registry", History: 1,
		MaxBytes: bucketBytes, MaxValueSize: recordBytes, Storage: jetstream.FileStorage, Replicas: max(deps.Replicas, 1),
	})
	if err == nil {
		// A change reads the record it compares-and-sets from the
		// leader: a replica's direct get may lag, and a gate judged on
		// stale figures would refuse wrongly.
		r.kv, err = jsutil.LeaderReads(ctx, deps.JS, reserved.ModelBucket)
	}
	if err != nil {
		return nil, fmt.Errorf("model registry: bucket %s: %w", reserved.ModelBucket, err)
	}
	_, err = jsutil.EnsureStream(ctx, deps.JS, jetstream.StreamConfig{
		Name: semaq.ModelEventStream, Description: "SemaQ model lifecycle events",
		Subjects: []string{semaq.ModelEventPrefix + ">"}, MaxBytes: eventBytes, MaxAge: eventMaxAge,
		Discard: jetstream.DiscardOld, Storage: jetstream.FileStorage, Replicas: max(deps.Replicas, 1),
		Duplicates: 2 * time.Minute,
	})
	if err != nil {
		return nil, fmt.Errorf("model registry: stream %s: %w", semaq.ModelEventStream, err)
	}
	m := &model{byKey: map[string]*semaq.ModelInfo{}, metrics: deps.Metrics}
	if r.follow, err = jsutil.Follow(ctx, r.kv, m.apply, m.snapshot); err != nil {
		return nil, fmt.Errorf("model registry: %w", err)
	}
	return r, nil
}

// Close stops following the bucket and waits for the dependency moves in
// flight; the last snapshot stays readable, so the ingress keeps binding
// with it.
func (r *Registry) Close(ctx context.Context) error {
	return errors.Join(r.follow.Close(), r.deps.Gate.Close(ctx))
}

// Snapshot is the registry as this node has applied it.
func (r *Registry) Snapshot() *Snapshot { return r.follow.Load() }

// WaitApplied returns once this node has applied revision rev.
func (r *Registry) WaitApplied(ctx context.Context, rev uint64) error {
	_, err := r.follow.WaitRev(ctx, rev)
	if errors.Is(err, jsutil.ErrStopped) {
		return errors.New("the model registry's watcher has stopped")
	}
	return err
}

// Snapshot is an immutable view of the registry at a revision.
type Snapshot struct {
	Rev    uint64
	models map[string]*semaq.ModelInfo // by name
	list   []semaq.ModelInfo           // sorted by name
}

// Models are the registered models, sorted by name, with their revision.
func (s *Snapshot) Models() []semaq.ModelInfo { return s.list }

// model is the follower's working copy.
type model struct {
	rev     uint64
	byKey   map[string]*semaq.ModelInfo
	metrics Metrics
}

func (m *model) apply(e jetstream.KeyValueEntry) {
	m.rev = max(m.rev, e.Revision())
	delete(m.byKey, e.Key())
	if e.Operation() != jetstream.KeyValuePut {
		return
	}
	var info semaq.ModelInfo
	if err := json.Unmarshal(e.Value(), &info); err != nil || info.Name == "" {
		return
	}
	info.Revision = e.Revision()
	m.byKey[e.Key()] = &info
}

func (m *model) snapshot() *Snapshot {
	s := &Snapshot{Rev: m.rev, models: make(map[string]*semaq.ModelInfo, len(m.byKey))}
	states := map[[2]string]string{}
	for _, info := range m.byKey {
		s.models[info.Name] = info
		s.list = append(s.list, *info)
		for _, v := range info.Versions {
			states[[2]string{info.Name, v.Version}] = string(v.State)
		}
	}
	sortModels(s.list)
	m.metrics.ModelStates(states)
	return s
}
