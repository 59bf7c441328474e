// Package registry is SemaQ's schema registry: Confluent Schema Registry's
// model (subjects, versions, global schema ids, compatibility modes, soft
// and permanent deletes, references) stored in a JetStream KV bucket, with
// Confluent's REST API on top (http.go) so Confluent clients and
// serializers work unchanged. It also stores schema-on-write bindings from
// NATS subject patterns to registry subjects (binding.go).
//
// Every node keeps the whole registry in memory as an immutable snapshot
// behind an atomic pointer, kept current by a KV watcher: reads (and the
// ingress hot path: Latest, Cached, SubjectHasID, BindingFor) never lock
// and never touch the network. Writes go to the bucket with
// compare-and-set (ids from a CAS counter, versions and schema identities
// created once), so nodes sharing a bucket never hand out one id or one
// version twice; a write returns once this node's snapshot shows it.
// Reads on one node see writes made through another node as soon as the
// watcher delivers them, usually within milliseconds.
//
// docs/schema-registry.md is the user-facing contract.
package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/schema"
	"github.com/semaq/semaq/internal/schema/formats"
)

// Config configures a registry. The zero value takes every default.
type Config struct {
	// Bucket is the JetStream KV bucket; default "SQ_SCHEMAS".
	Bucket string
	// Replicas of the bucket when Open creates it; default 1.
	Replicas int
	// Formats are the schema formats accepted; default formats.Default().
	Formats *schema.Formats
	// Log receives warnings about unusable stored entries; nil discards.
	Log *slog.Logger

	// Limits bound each schema before it is compiled (size, nesting,
	// values, regular expressions, numbers; see schema.Limits). Zero
	// fields take schema.DefaultLimits. They apply to registration and to
	// stored schemas compiled when the registry loads: a stored schema
	// over them is logged and left uncompiled, never allowed to hang
	// start-up.
	Limits schema.Limits
	// MaxSubjects bounds the subjects holding versions (soft-deleted ones
	// included); default 10,000.
	MaxSubjects int
	// MaxVersions bounds the stored versions of one subject (soft-deleted
	// ones included: delete them permanently to make room); default 1,000.
	MaxVersions int
	// MaxSchemas bounds the distinct schemas (global ids); default 100,000.
	MaxSchemas int
	// MaxTotalBytes bounds the schema text stored, summed over ids;
	// default 256 MiB.
	MaxTotalBytes int
}

// Defaults of the registry's count and size bounds.
const (
	DefaultMaxSubjects   = 10_000
	DefaultMaxVersions   = 1_000
	DefaultMaxSchemas    = 100_000
	DefaultMaxTotalBytes = 256 << 20
)

// DefaultBucket is the KV bucket of a registry configured without one.
const DefaultBucket = "SQ_SCHEMAS"

var bucketRe = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

func (c *Config) defaults() {
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	if c.Replicas == 0 {
		c.Replicas = 1
	}
	if c.Formats == nil {
		c.Formats = formats.Default()
	}
	c.Limits = c.Limits.WithDefaults()
	c.Formats = c.Formats.WithLimits(c.Limits)
	for _, f := range []struct {
		v   *int
		def int
	}{{&c.MaxSubjects, DefaultMaxSubjects}, {&c.MaxVersions, DefaultMaxVersions},
		{&c.MaxSchemas, DefaultMaxSchemas}, {&c.MaxTotalBytes, DefaultMaxTotalBytes}} {
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
}

// Validate reports a configuration Open would refuse. Zero fields are
// valid: they take their defaults.
func (c Config) Validate() error {
	if c.Bucket != "" && !bucketRe.MatchString(c.Bucket) {
		return fmt.Errorf("registry: bucket %q: use letters, digits, '-' and '_'", c.Bucket)
	}
	if c.Replicas < 0 || c.Replicas > 5 {
		return fmt.Errorf("registry: replicas %d: use 1 to 5", c.Replicas)
	}
	if c.MaxSubjects < 0 || c.MaxVersions < 0 || c.MaxSchemas < 0 || c.MaxTotalBytes < 0 {
		return errors.New("registry: MaxSubjects, MaxVersions, MaxSchemas and MaxTotalBytes must not be negative (0 means the default)")
	}
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	return nil
}

// SchemaRequest is a schema as clients submit it.
type SchemaRequest struct {
	Schema string `json:"schema"`
	// SchemaType is AVRO, JSON or PROTOBUF (any case); "" means AVRO.
	SchemaType string             `json:"schemaType,omitempty"`
	References []schema.Reference `json:"references,omitempty"`
}

// Entry is a schema by global id. Entries are immutable: never modify one.
type Entry struct {
	ID int
	// SchemaType is always set: AVRO, JSON or PROTOBUF.
	SchemaType string
	// Schema is the text as first registered (or its canonical form, when
	// it was registered with normalize).
	Schema     string
	References []schema.Reference
	// Compiled validates payloads. It is nil when the schema's format is
	// not in the registry's Formats, or the stored text no longer parses or
	// is over the schema limits; Err then says why (nil while the schema
	// is not compiled yet). Schema-on-write must refuse payloads for an
	// entry without Compiled, never accept them unvalidated.
	Compiled schema.Schema
	Err      error
}

// Version is one version of a subject.
type Version struct {
	Subject    string
	Version    int
	ID         int
	SchemaType string // always set
	Schema     string
	References []schema.Reference
	// Deleted reports a soft-deleted version (only returned when asked for).
	Deleted bool
}

// SubjectVersion names one version of a subject.
type SubjectVersion struct {
	Subject string `json:"subject"`
	Version int    `json:"version"`
}

// Registry is a schema registry node. Its methods are safe for concurrent
// use. Operations take ctx for their JetStream writes; reads answer from
// memory.
type Registry struct {
	cfg     Config
	log     *slog.Logger
	formats *schema.Formats
	kv      jetstream.KeyValue

	// state follows the bucket (jsutil.Follower): its snapshot is what
	// reads answer from, replaced after each batch of KV updates.
	state *jsutil.Follower[*state]

	// wmu serialises this node's writes, so that its own writers do not
	// compete for the same compare-and-set slots. Held across a whole
	// operation, never while publishing state.
	wmu sync.Mutex

	// precompiled hands schemas parsed by Register to the watcher, which
	// would otherwise parse them again: id -> schema.Schema.
	precompiled sync.Map
}

// Open creates the bucket if it does not exist, loads the registry into
// memory, and keeps it current with a KV watcher until Close. js needs the
// rights to create the bucket and write its keys (the broker's internal
// connection). ctx bounds the opening only.
func Open(ctx context.Context, js jetstream.JetStream, cfg Config) (*Registry, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	kv, err := openBucket(ctx, js, cfg)
	if err != nil {
		return nil, err
	}
	r := &Registry{
		cfg:     cfg,
		log:     cfg.Log,
		formats: cfg.Formats,
		kv:      kv,
	}
	m := newModel()
	var added []int // schemas of the batch, compiled once it is in
	apply := func(e jetstream.KeyValueEntry) {
		if id := m.apply(e, r.log); id != 0 {
			added = append(added, id)
		}
	}
	snapshot := func() *state {
		for _, id := range added {
			var pre schema.Schema
			if v, ok := r.precompiled.LoadAndDelete(id); ok {
				pre = v.(schema.Schema)
			}
			m.compile(id, r.formats, pre, r.log)
		}
		added = added[:0]
		return m.snapshot()
	}
	if r.state, err = jsutil.Follow(ctx, kv, apply, snapshot); err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	return r, nil
}

func openBucket(ctx context.Context, js jetstream.JetStream, cfg Config) (jetstream.KeyValue, error) {
	kv, err := jsutil.Bucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      cfg.Bucket,
		Description: "SemaQ schema registry",
		Replicas:    cfg.Replicas,
		Storage:     jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("registry: bucket %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

// Close stops the watcher. Reads keep answering from the last snapshot;
// writes fail with ErrStore. Close is idempotent.
func (r *Registry) Close() error {
	if err := r.state.Close(); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	return nil
}

// waitRev returns once the snapshot includes KV revision rev.
func (r *Registry) waitRev(ctx context.Context, rev uint64) error {
	_, err := r.state.WaitRev(ctx, rev)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jsutil.ErrStopped):
		return errClosed()
	default:
		return storeErr("waiting for the registry to catch up", err)
	}
}

// CatchUp returns once the registry has applied everything its bucket
// holds now: a node of a cluster calls it so that a change made through
// another node is enforced here before that change returns.
func (r *Registry) CatchUp(ctx context.Context) error { return r.catchUp(ctx) }

// catchUp waits until the snapshot includes everything in the bucket now,
// so a write decides on current data even when another node wrote last.
func (r *Registry) catchUp(ctx context.Context) error {
	if r.state.Closed() {
		return errClosed()
	}
	status, err := r.kv.Status(ctx)
	if err != nil {
		return storeErr("reading the bucket status", err)
	}
	bs, ok := status.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return errorf(CodeStore, "unexpected bucket status type %T", status)
	}
	return r.waitRev(ctx, bs.StreamInfo().State.LastSeq)
}

func errClosed() *Error { return errorf(CodeStore, "the registry is closed") }

// conflict reports a lost compare-and-set: someone else wrote the key.
func conflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}

// maxAttempts bounds the retries of one write that keeps losing
// compare-and-set races against other nodes.
const maxAttempts = 100

// retryCAS is the registry's one compare-and-set write loop. attempt reads
// what it decides on (the caught-up snapshot, or the key itself), decides
// and writes with compare-and-set; when another writer got there first it
// returns lost(err) (casErr does for a write's error), and runs again on
// the winner's data, at most maxAttempts times in all. The error a lost
// last attempt carries is returned as the write's; any other result of an
// attempt, nil included, ends the loop as it is.
func retryCAS(attempt func() error) error {
	for n := 1; ; n++ {
		err := attempt()
		l, ok := errors.AsType[*lostError](err)
		if !ok {
			return err
		}
		if n == maxAttempts {
			return l.err
		}
	}
}

// lostError marks an attempt of retryCAS that lost a compare-and-set; err
// is what the write reports when its last attempt loses too.
type lostError struct{ err error }

func (e *lostError) Error() string { return "lost a compare-and-set: " + e.err.Error() }

func lost(err error) error { return &lostError{err} }

// casErr is a compare-and-set write's error as op: a lost race marked for
// retryCAS, anything else a store error.
func casErr(op string, err error) error {
	if conflict(err) {
		return lost(storeErr(op, err))
	}
	return storeErr(op, err)
}

// caughtUp is the snapshot once it holds everything in the bucket: what
// an attempt of a write decides on.
func (r *Registry) caughtUp(ctx context.Context) (*state, error) {
	if err := r.catchUp(ctx); err != nil {
		return nil, err
	}
	return r.state.Load(), nil
}

// marshal encodes a record. Records are plain structs of strings and
// numbers, which always encode.
func marshal(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}
