// Package policies is the node's stored policy: PII redaction and content
// rules, and WASM plugins (docs/policy.md, docs/plugins.md).
//
// Rules and plugins live in the KV bucket SQ_POLICY, one key each
// ("rule.<name>", "plugin.<name>"); a plugin's module is an object of the
// object store SQ_PLUGINS, named by its SHA-256. Every node follows the
// bucket (jsutil.Follower) into an immutable Table the ingress, the token
// relay and the API read with one atomic load. The node that stores a
// change answers once its own table has it and the other nodes say they
// applied it too (Deps.Applied): a rule added is in force on the next
// publish anywhere, and every node runs the same revision.
//
// Where rules act:
//
//	ingress   Step, a policy.Step the ingress runs before the schema: the
//	          payload's string values (or its text) redacted, blocked
//	          entities refused, content rules applied, then the ingress
//	          plugins, in name order
//	tokens    TokenFilter, which the token relay runs on each record a
//	          worker writes (streamfilter holds back only the text that
//	          could still start a match)
//	restore   the vault (vault.go): tokenized values, sealed with the
//	          node's vault key, kept per tenant and scope for a TTL
package policies

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/internal/plugin"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// loadTimeout bounds loading the rules and plugins when the node starts.
const loadTimeout = 2 * time.Minute

// bucketBytes bounds the rules and plugin records on disk.
const bucketBytes = 64 << 20

// Keys of the bucket.
const (
	rulePrefix   = "rule."
	pluginPrefix = "plugin."
)

// Deps is what the policy store needs from the node.
type Deps struct {
	// Log gets rule changes and what this node cannot run. Nil logs
	// nothing.
	Log *slog.Logger
	// JS opens SQ_POLICY, SQ_PII_VAULT and SQ_PLUGINS (created when
	// missing): the internal connection's JetStream.
	JS jetstream.JetStream
	// Conn publishes policy events: the internal connection.
	Conn *nats.Conn
	// Replicas of the buckets (0 means 1).
	Replicas int
	// Node names this node in events; Clustered says it is one of
	// several (the vault then reads from its stream's leader).
	Node      string
	Clustered bool
	// Principal is who sent a request (api.RequestHeader of its ctx).
	Principal func(h nats.Header) api.Principal
	// Audit records rule and plugin changes. Nil records nothing.
	Audit api.AuditFunc
	// Metrics counts findings, actions, vault and plugin calls.
	Metrics *metrics.Metrics
	// Applied is called after a change is in effect here and before it is
	// answered, with the bucket revision holding it: in a cluster the node
	// waits there for the others (WaitApplied on theirs).
	Applied func(ctx context.Context, rev uint64)
	// VaultKey seals tokenized values (32 bytes). Nil refuses rules that
	// tokenize.
	VaultKey []byte
	// VaultTTL is how long tokenized values are kept after their scope's
	// last write (0: DefaultVaultTTL).
	VaultTTL time.Duration
	// PluginKeys are the ed25519 public keys a plugin's signature must
	// verify with; none accepts unsigned plugins.
	PluginKeys [][]byte
	// PluginCacheDir keeps compiled plugins across restarts ("" keeps
	// them in memory).
	PluginCacheDir string
	// Gate runs the store's goroutines; Close closes it.
	Gate *subsystem.Gate
}

// DefaultVaultTTL is how long tokenized values are kept by default.
const DefaultVaultTTL = 24 * time.Hour

// Store owns the bucket, its follower, the vault and the plugin runtime.
// Its methods are safe for concurrent use.
type Store struct {
	log     *slog.Logger
	deps    Deps
	kv      jetstream.KeyValue
	objects jetstream.ObjectStore
	vault   *vault
	runtime *plugin.Runtime
	uploads *uploads
	follow  *jsutil.Follower[*Table]
	model   *model
}

// Open creates the buckets if needed, loads every rule and plugin and
// starts following them. It returns once the table holds what is stored,
// so an ingress opened after it lets no message by unjudged.
func Open(ctx context.Context, deps Deps) (*Store, error) {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Audit == nil {
		deps.Audit = api.NoAudit
	}
	if deps.Gate == nil {
		deps.Gate = subsystem.NewGate("policies")
	}
	if deps.VaultTTL <= 0 {
		deps.VaultTTL = DefaultVaultTTL
	}
	ctx, cancel := context.WithTimeout(ctx, loadTimeout)
	defer cancel()
	replicas := max(deps.Replicas, 1)
	kv, err := jsutil.Bucket(ctx, deps.JS, jetstream.KeyValueConfig{
		Bucket:      reserved.PolicyBucket,
		Description: "SemaQ policy rules and plugins",
		History:     1,
		MaxBytes:    bucketBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("policy: bucket %s: %w", reserved.PolicyBucket, err)
	}
	objects, err := pluginObjects(ctx, deps.JS, replicas)
	if err != nil {
		return nil, err
	}
	v, err := openVault(ctx, deps.JS, replicas, deps.Clustered, deps.VaultKey, deps.VaultTTL)
	if err != nil {
		return nil, err
	}
	rcfg := plugin.RuntimeConfig{CacheDir: deps.PluginCacheDir, RequireSignature: len(deps.PluginKeys) > 0}
	for _, k := range deps.PluginKeys {
		rcfg.TrustedKeys = append(rcfg.TrustedKeys, ed25519.PublicKey(k))
	}
	rt, err := plugin.NewRuntime(context.WithoutCancel(ctx), rcfg)
	if err != nil {
		return nil, fmt.Errorf("policy: plugin runtime: %w", err)
	}
	s := &Store{log: deps.Log, deps: deps, kv: kv, objects: objects, vault: v, runtime: rt, uploads: newUploads()}
	s.model = newModel(s)
	if s.follow, err = jsutil.Follow(ctx, kv, s.model.apply, s.model.table); err != nil {
		_ = rt.Close(context.Background())
		return nil, fmt.Errorf("policy: %w", err)
	}
	if t := s.follow.Load(); len(t.rules)+len(t.plugins) > 0 {
		s.log.Info("policy loaded", "rules", len(t.rules), "plugins", len(t.plugins))
	}
	return s, nil
}

// Table returns the current table.
func (s *Store) Table() *Table { return s.follow.Load() }

// WaitApplied returns once this node's table includes bucket revision rev.
func (s *Store) WaitApplied(ctx context.Context, rev uint64) error {
	_, err := s.waitRev(ctx, rev)
	return err
}

func (s *Store) waitRev(ctx context.Context, rev uint64) (*Table, error) {
	t, err := s.follow.WaitRev(ctx, rev)
	switch {
	case errors.Is(err, jsutil.ErrStopped):
		return nil, errors.New("the policy watcher has stopped")
	case err != nil:
		return nil, fmt.Errorf("waiting for the policy table to load revision %d: %w", rev, err)
	}
	return t, nil
}

// applied waits for the cluster to apply rev (Deps.Applied).
func (s *Store) applied(ctx context.Context, rev uint64) {
	if s.deps.Applied != nil {
		s.deps.Applied(ctx, rev)
	}
}

// Close stops following the bucket, drains every plugin and waits for the
// store's goroutines, or until ctx is done. The last table stays readable.
func (s *Store) Close(ctx context.Context) error {
	var errs []error
	if err := s.follow.Close(); err != nil {
		errs = append(errs, fmt.Errorf("policy watcher: %w", err))
	}
	s.uploads.closeAll()
	if err := s.deps.Gate.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("policy goroutines: %w", err))
	}
	if err := s.model.closePlugins(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := s.runtime.Close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("plugin runtime: %w", err))
	}
	return errors.Join(errs...)
}

// lastRevision is the bucket's last revision, after a delete (which does
// not return its own).
func (s *Store) lastRevision(ctx context.Context) (uint64, error) {
	status, err := s.kv.Status(ctx)
	if err != nil {
		return 0, err
	}
	bs, ok := status.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return 0, fmt.Errorf("unexpected bucket status %T", status)
	}
	return bs.StreamInfo().State.LastSeq, nil
}

// event publishes a policy event; a failure is logged, never returned:
// events are best effort, the metrics and audit are the record.
func (s *Store) event(e semaq.PolicyEvent) {
	if s.deps.Conn == nil {
		return
	}
	e.Node, e.Time = s.deps.Node, time.Now().UTC()
	name := e.Policy
	if name == "" {
		name = e.Plugin
	}
	data, err := jsonMarshal(e)
	if err == nil {
		err = s.deps.Conn.Publish(semaq.PolicyEventSubject(e.Tenant, name), data)
	}
	if err != nil {
		s.log.Warn("policy event not sent", "kind", e.Kind, "policy", e.Policy, "plugin", e.Plugin, "err", err)
	}
}
