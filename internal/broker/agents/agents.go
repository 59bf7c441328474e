// Package agents is the agent capability registry (docs/agents.md): agents
// announce the intents they serve, with a TTL they renew by heartbeat, list
// each other and leave, on $SQ.API.AGENT.*.
//
// Announcements live in the KV bucket SQ_AGENTS, one key per agent ID,
// written only by the broker. Liveness is the broker's own clock: an
// announcement stamps AnnouncedAt and ExpiresAt = AnnouncedAt + TTL, and a
// list returns only the entries not yet expired, deleting the expired
// ones it finds. An expiry read back from the entry itself needs no timer
// and no watcher, and every node answers the same way. The bucket's
// MaxAge (MaxAgentTTL) removes entries nobody lists.
//
// Delivery by intent needs nothing here: client.ServeIntent subscribes
// with the filter intent == "<intent>" on a durable shared by every agent
// serving that intent.
package agents

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// loadTimeout bounds opening the bucket when the node starts.
const loadTimeout = 30 * time.Second

// bucketBytes bounds the agent registry on disk.
const bucketBytes = 64 << 20

// Deps is what the agent registry needs from the node.
type Deps struct {
	// JS opens (or creates) the SQ_AGENTS bucket, writes it and reads its
	// stream: the internal connection's JetStream, which may write the
	// node's own buckets. Required.
	JS jetstream.JetStream
	// Replicas of SQ_AGENTS (0 means 1); a bucket with fewer is raised to
	// them, one with more keeps its own.
	Replicas int
	// Log gets the expired announcements a list could not remove. Nil
	// logs nothing.
	Log *slog.Logger
	// Now is the registry's clock: announcements are stamped with it and
	// lists expire them by it. Nil is time.Now.
	Now func() time.Time
}

// Registry is the announcement bucket and the $SQ.API.AGENT handlers. It
// starts no goroutine: its handlers run on the goroutines of the
// subscriptions that serve them. Its methods are safe for concurrent use.
type Registry struct {
	log    *slog.Logger
	kv     jetstream.KeyValue
	stream jetstream.Stream // the bucket's stream, read by list
	now    func() time.Time
}

// Open opens (or creates) the announcement bucket; the registry is served
// by whoever subscribes Handlers. ctx bounds the opening only.
func Open(ctx context.Context, deps Deps) (*Registry, error) {
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	ctx, cancel := context.WithTimeout(ctx, loadTimeout)
	defer cancel()
	kv, err := jsutil.Bucket(ctx, deps.JS, jetstream.KeyValueConfig{
		Bucket:      reserved.AgentBucket,
		Description: "SemaQ agent announcements",
		History:     1,
		TTL:         semaq.MaxAgentTTL,
		// Announcements are small; the bound keeps a flood of names from
		// filling the disk (a full bucket refuses new ones).
		MaxBytes: bucketBytes,
		Storage:  jetstream.FileStorage,
		Replicas: deps.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("agent registry: bucket %s: %w", reserved.AgentBucket, err)
	}
	stream, err := jsutil.BucketStream(ctx, deps.JS, reserved.AgentBucket)
	if err != nil {
		return nil, fmt.Errorf("agent registry: bucket %s: %w", reserved.AgentBucket, err)
	}
	return &Registry{log: deps.Log, kv: kv, stream: stream, now: deps.Now}, nil
}

// Close has nothing to stop: the node unsubscribes the handlers before.
func (r *Registry) Close(context.Context) error { return nil }

// entry names one stored announcement: its key and the revision read.
type entry struct {
	key      string
	revision uint64
}

// list reads every announcement: the live ones by ID, and the entries of
// the expired or unreadable ones.
//
// It reads the bucket's stream directly, the subjects it holds and then
// the last message of each, instead of a KV watcher: a watcher signals the
// end of its initial values by per-message pending counts, which
// concurrent heartbeats can bring to zero early, and a list that stopped
// there would drop live agents.
func (r *Registry) list(ctx context.Context) ([]semaq.AgentInfo, []entry, error) {
	prefix := "$KV." + reserved.AgentBucket + "."
	info, err := r.stream.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, nil, err
	}
	now := r.now()
	live := []semaq.AgentInfo{}
	var expired []entry
	for subj := range info.State.Subjects {
		msg, err := r.stream.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // removed since the subjects were read
		}
		if err != nil {
			return nil, nil, err
		}
		if isKVTombstone(msg.Header) {
			continue
		}
		key := strings.TrimPrefix(subj, prefix)
		var info semaq.AgentInfo
		if err := json.Unmarshal(msg.Data, &info); err != nil || info.ID != key || !now.Before(info.ExpiresAt) {
			expired = append(expired, entry{key: key, revision: msg.Sequence})
			continue
		}
		live = append(live, info)
	}
	slices.SortFunc(live, func(a, b semaq.AgentInfo) int { return strings.Compare(a.ID, b.ID) })
	return live, expired, nil
}

// isKVTombstone reports whether a bucket message marks its key deleted or
// purged (by a client, or by JetStream's own marker on expiry).
func isKVTombstone(h nats.Header) bool {
	switch h.Get("KV-Operation") {
	case "DEL", "PURGE":
		return true
	}
	return h.Get(jetstream.MarkerReasonHeader) != ""
}
