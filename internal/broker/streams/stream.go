package streams

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/subjects"
	"github.com/semaq/semaq/internal/registry"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// Durability modes of a stream (docs/durability.md).
const (
	DurabilityFsync    = "fsync"
	DurabilityInterval = "interval"
	DurabilityMemory   = "memory"
)

// The sync a stream's info reports: fsync before the ack, periodic fsync,
// or none (memory). On a cluster it is the nodes' --sync, whose words
// these are.
const (
	syncAlways   = "always"
	syncInterval = "interval"
	syncMemory   = "memory"
)

// Default bounds of a user stream whose create names no max_bytes
// (stream_max_bytes changes them): every stream a client can fill has a
// bound, so a publisher, or a loop of deliveries between streams, cannot
// take the disk (or, for memory streams, the RAM) of the node.
const (
	DefaultStreamMaxBytes       = 1 << 30
	DefaultStreamMaxBytesMemory = 256 << 20
)

// IsSemaqStream reports whether a stream is one SemaQ manages: a user's
// stream or work queue, not the node's own streams and buckets.
func IsSemaqStream(c *jetstream.StreamConfig) bool {
	return c.Metadata[reserved.MetadataVersion] != ""
}

// durability reads a stream's durability from its metadata; streams made
// before it was recorded take the node's default.
func (m *Manager) durability(c *jetstream.StreamConfig) string {
	if c.Storage == jetstream.MemoryStorage {
		return DurabilityMemory
	}
	if d := c.Metadata[reserved.MetadataDurability]; d != "" {
		return d
	}
	return m.deps.DefaultDurability
}

// publicSubjects are the subjects a stream captures as clients name them:
// its head records' are the broker's (chainOf).
func publicSubjects(c *jetstream.StreamConfig) []string {
	out := make([]string, 0, len(c.Subjects))
	for _, s := range c.Subjects {
		if s == chainHeads(c.Name) {
			continue
		}
		out = append(out, strings.TrimPrefix(s, reserved.StoragePrefix))
	}
	return out
}

// chainOf is how a stream chains its sessions, from its metadata.
func chainOf(c *jetstream.StreamConfig) api.Chain {
	return api.Chain{Provenance: c.Metadata[reserved.MetadataProvenance], Order: c.Metadata[reserved.MetadataSessionOrder]}
}

// chainHeads is the subject a chained stream captures its sessions' head
// records under (semaq.ChainHeadSubject), in the storage namespace.
func chainHeads(stream string) string {
	return reserved.StoragePrefix + semaq.ChainHeadSubject(stream, "*")
}

// setChain records a stream's session chain in its configuration: the
// metadata, the head records' subject and the rollups that keep one head
// per session. A chain needs limits retention: a work queue or interest
// stream would hand its head records to consumers, or drop them.
func setChain(jc *jetstream.StreamConfig, c *semaq.StreamConfig) error {
	if err := semaq.CheckProvenance(c.Provenance); err != nil {
		return err
	}
	if err := semaq.CheckSessionOrder(c.SessionOrder); err != nil {
		return err
	}
	if c.Provenance == "" && c.SessionOrder == "" {
		return nil
	}
	if jc.Retention != jetstream.LimitsPolicy {
		return fmt.Errorf("provenance and session order need limits retention; a %s stream cannot keep its sessions' head records", c.Retention)
	}
	if c.Provenance != "" {
		jc.Metadata[reserved.MetadataProvenance] = c.Provenance
	}
	if c.SessionOrder != "" {
		jc.Metadata[reserved.MetadataSessionOrder] = c.SessionOrder
	}
	jc.Subjects = append(jc.Subjects, chainHeads(c.Name))
	jc.AllowRollup = true
	return nil
}

// jsConfig maps a user's stream configuration onto JetStream's. Subjects are
// moved into the reserved namespace and a transform stores them under their
// public names.
func (m *Manager) jsConfig(c *semaq.StreamConfig) (jetstream.StreamConfig, error) {
	if err := semaq.CheckStreamName(c.Name); err != nil {
		return jetstream.StreamConfig{}, err
	}
	if len(c.Subjects) == 0 {
		return jetstream.StreamConfig{}, errors.New("a stream needs at least one subject")
	}
	stored := make([]string, 0, len(c.Subjects))
	for i, subj := range c.Subjects {
		if err := subjects.CheckPublic(subj); err != nil {
			return jetstream.StreamConfig{}, err
		}
		for _, prev := range c.Subjects[:i] {
			if subjects.Overlap(prev, subj) {
				return jetstream.StreamConfig{}, fmt.Errorf("subjects %q and %q overlap", prev, subj)
			}
		}
		stored = append(stored, reserved.StoragePrefix+subj)
	}
	jc := jetstream.StreamConfig{
		Name:             c.Name,
		Description:      c.Description,
		Subjects:         stored,
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: reserved.StoragePrefix + ">", Destination: ">"},
		MaxAge:           c.MaxAge,
		MaxBytes:         c.MaxBytes,
		MaxMsgs:          c.MaxMsgs,
		Replicas:         c.Replicas,
		Duplicates:       c.Duplicates,
		AllowMsgTTL:      true,
		AllowDirect:      true,
		// Batch frames and stock clients' batches are stored as JetStream
		// atomic batches (docs/batches.md).
		AllowAtomicPublish: true,
		Metadata:           map[string]string{reserved.MetadataVersion: "1"},
	}
	switch c.Durability {
	case "":
		if c.Storage != "memory" {
			jc.Metadata[reserved.MetadataDurability] = m.deps.DefaultDurability
		}
	case DurabilityFsync, DurabilityInterval:
		if c.Storage == "memory" {
			return jc, fmt.Errorf("durability %s needs file storage; memory streams are not durable", c.Durability)
		}
		jc.Metadata[reserved.MetadataDurability] = c.Durability
	default:
		return jc, fmt.Errorf("durability %q is not one of fsync, interval", c.Durability)
	}
	if m.deps.CheckDurability != nil {
		if err := m.deps.CheckDurability(c.Durability); err != nil {
			return jc, err
		}
	}
	switch c.Retention {
	case "", "limits":
		jc.Retention = jetstream.LimitsPolicy
	case "workqueue":
		jc.Retention = jetstream.WorkQueuePolicy
	case "interest":
		jc.Retention = jetstream.InterestPolicy
	default:
		return jc, fmt.Errorf("retention %q is not one of limits, workqueue, interest", c.Retention)
	}
	switch c.Storage {
	case "", "file":
		jc.Storage = jetstream.FileStorage
	case "memory":
		jc.Storage = jetstream.MemoryStorage
	default:
		return jc, fmt.Errorf("storage %q is not one of file, memory", c.Storage)
	}
	if c.MaxAge < 0 {
		return jc, fmt.Errorf("max age %s is negative", c.MaxAge)
	}
	if c.MaxAge > 0 && c.MaxAge < time.Second {
		return jc, fmt.Errorf("max age %s is under one second", c.MaxAge)
	}
	if c.MaxBytes == 0 {
		jc.MaxBytes = m.defaultStreamMaxBytes(jc.Storage)
	} else if c.MaxBytes < 0 {
		return jc, fmt.Errorf("max bytes %d is negative", c.MaxBytes)
	}
	if c.MaxMsgs == 0 {
		jc.MaxMsgs = -1
	} else if c.MaxMsgs < 0 {
		return jc, fmt.Errorf("max msgs %d is negative", c.MaxMsgs)
	}
	if c.Replicas == 0 {
		jc.Replicas = 1
	} else if c.Replicas < 0 || c.Replicas > 5 {
		return jc, fmt.Errorf("replicas %d is outside 1..5", c.Replicas)
	}
	if c.Duplicates < 0 {
		return jc, fmt.Errorf("duplicate window %s is negative", c.Duplicates)
	}
	if err := setChain(&jc, c); err != nil {
		return jc, err
	}
	return jc, nil
}

// defaultStreamMaxBytes is the max_bytes of a stream created without one
// (-1: none).
func (m *Manager) defaultStreamMaxBytes(storage jetstream.StorageType) int64 {
	switch {
	case m.deps.DefaultMaxBytes != 0:
		return m.deps.DefaultMaxBytes
	case storage == jetstream.MemoryStorage:
		return DefaultStreamMaxBytesMemory
	default:
		return DefaultStreamMaxBytes
	}
}

// streamInfo maps JetStream's stream info onto SemaQ's.
func (m *Manager) streamInfo(info *jetstream.StreamInfo) semaq.StreamInfo {
	c := &info.Config
	out := semaq.StreamInfo{
		Config: semaq.StreamConfig{
			Name:        c.Name,
			Description: c.Description,
			Subjects:    publicSubjects(c),
			Retention:   strings.TrimSuffix(strings.ToLower(c.Retention.String()), "policy"),
			Storage:     strings.ToLower(c.Storage.String()),
			MaxAge:      c.MaxAge,
			MaxBytes:    max(c.MaxBytes, 0), // JetStream's -1 is SemaQ's 0: no limit
			MaxMsgs:     max(c.MaxMsgs, 0),
			Replicas:    c.Replicas,
			Duplicates:  c.Duplicates,
			Durability:  m.durability(c),
		},
		State: semaq.StreamState{
			Messages:      info.State.Msgs,
			Bytes:         info.State.Bytes,
			FirstSeq:      info.State.FirstSeq,
			FirstTime:     info.State.FirstTime,
			LastSeq:       info.State.LastSeq,
			LastTime:      info.State.LastTime,
			ConsumerCount: info.State.Consumers,
		},
		Created: info.Created,
		Cluster: Cluster(info.Cluster),
	}
	ch := chainOf(c)
	out.Config.Provenance, out.Config.SessionOrder = ch.Provenance, ch.Order
	if m.deps.Registry != nil {
		for _, b := range m.deps.Registry.Bindings() {
			if slices.Contains(out.Config.Subjects, b.Pattern) {
				out.Config.Schema = b.Subject
				break
			}
		}
	}
	switch out.Config.Durability {
	case DurabilityFsync:
		out.Sync = syncAlways
		out.Commit = m.deps.Ingress.CommitStats(c.Name)
	case DurabilityMemory:
		out.Sync = syncMemory
	default:
		out.Sync = syncInterval
	}
	if m.deps.Clustered && out.Sync != syncMemory {
		out.Sync = m.deps.Sync // the node's JetStream decides (docs/durability.md)
	}
	return out
}

// Cluster is where a stream's replicas are, from JetStream's stream info;
// nil outside a cluster.
func Cluster(ci *jetstream.ClusterInfo) *semaq.StreamCluster {
	if ci == nil || ci.Name == "" {
		return nil
	}
	c := &semaq.StreamCluster{Leader: ci.Leader}
	for _, p := range ci.Replicas {
		c.Followers = append(c.Followers, semaq.PeerStatus{Name: p.Name, Current: p.Current, Offline: p.Offline, Active: p.Active, Lag: p.Lag})
	}
	return c
}

func (m *Manager) apiCreate(ctx context.Context, name string, req *semaq.StreamConfig) (out any, err error) {
	defer m.deps.Audit(ctx, semaq.AuditOpStreamCreate, name)(&out, &err)
	if req.Name == "" {
		req.Name = name
	}
	if req.Name != name {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "stream create: name %q in the body differs from %q in the subject", req.Name, name)
	}
	jc, err := m.jsConfig(req)
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadStream, "stream %s: %v", req.Name, err)
	}
	m.streamsMu.Lock()
	defer m.streamsMu.Unlock()
	if _, err := m.deps.JS.Stream(ctx, req.Name); err == nil {
		return nil, semaq.NewAPIError(semaq.ErrStreamExists, "stream %s already exists", req.Name)
	}
	reg := m.deps.Registry
	if req.Schema != "" && !hasLatest(reg, req.Schema) {
		return nil, semaq.NewAPIError(semaq.ErrSchemaNotFound, "stream %s: schema registry subject %q has no live version; register a schema first", req.Name, req.Schema)
	}
	// JetStream would say only "subjects overlap with an existing stream":
	// overlapping names the stream and the subject.
	if err := m.overlapping(ctx, "stream", req.Name, req.Subjects); err != nil {
		return nil, err
	}
	st, err := m.deps.JS.CreateStream(ctx, jc)
	if err != nil {
		return nil, api.JSError(err, "stream %s", req.Name)
	}
	// Bind before serving, so no message reaches the stream unchecked.
	for _, p := range req.Subjects {
		if req.Schema == "" {
			break
		}
		if err := reg.Bind(ctx, p, req.Schema); err != nil {
			_ = m.deps.JS.DeleteStream(ctx, req.Name)
			return nil, semaq.NewAPIError(semaq.ErrBadStream, "stream %s: binding %s to schema %s: %v", req.Name, p, req.Schema, err)
		}
	}
	if err := m.serveStream(req.Name, req.Subjects, m.durability(&jc), chainOf(&jc)); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "stream %s created but not served: %v", req.Name, err)
	}
	m.log.Info("stream added", "stream", req.Name, "subjects", req.Subjects)
	// Served, with its schema, by every node before the create returns.
	m.synced(ctx, req.Schema != "", req.Subjects)
	return m.streamInfo(st.CachedInfo()), nil
}

// hasLatest reports whether registry subject has a live version.
func hasLatest(reg *registry.Registry, subject string) bool {
	if reg == nil {
		return false
	}
	_, _, ok := reg.Latest(subject)
	return ok
}

// synced waits for the other nodes to serve a stream just made here
// (Deps.Synced).
func (m *Manager) synced(ctx context.Context, schemas bool, subjects []string) {
	if m.deps.Synced != nil {
		m.deps.Synced(ctx, schemas, subjects)
	}
}

// anyBody is the request of the verbs that take none: whatever JSON a
// client sends is ignored, as JetStream's own API does.
type anyBody = json.RawMessage

func (m *Manager) apiInfo(ctx context.Context, name string, _ *anyBody) (any, error) {
	info, err := m.semaqStream(ctx, name)
	if err != nil {
		return nil, api.JSError(err, "stream %s", name)
	}
	return m.streamInfo(info), nil
}

func (m *Manager) apiDelete(ctx context.Context, name string, _ *anyBody) (out any, err error) {
	defer m.deps.Audit(ctx, semaq.AuditOpStreamDelete, name)(&out, &err)
	m.streamsMu.Lock()
	defer m.streamsMu.Unlock()
	info, err := m.semaqStream(ctx, name)
	if err != nil {
		return nil, api.JSError(err, "stream %s", name)
	}
	// Stop taking writes first, so nothing is acknowledged into a stream
	// that is going away.
	m.deps.Ingress.Remove(name)
	if err := m.deps.JS.DeleteStream(ctx, name); err != nil {
		return nil, api.JSError(err, "stream %s", name)
	}
	// Bindings of the stream's own patterns go with it.
	if reg := m.deps.Registry; reg != nil {
		for _, b := range reg.Bindings() {
			if slices.Contains(publicSubjects(&info.Config), b.Pattern) {
				if err := reg.Unbind(ctx, b.Pattern); err != nil {
					m.log.Warn("unbinding a deleted stream's schema", "stream", name, "pattern", b.Pattern, "err", err)
				}
			}
		}
	}
	m.log.Info("stream removed", "stream", name)
	return struct {
		Success bool `json:"success"`
	}{true}, nil
}

func (m *Manager) apiList(ctx context.Context, _ *anyBody) (any, error) {
	out := semaq.StreamListResponse{Streams: []semaq.StreamInfo{}}
	lister := m.deps.JS.ListStreams(ctx)
	for info := range lister.Info() {
		if IsSemaqStream(&info.Config) {
			out.Streams = append(out.Streams, m.streamInfo(info))
		}
	}
	if err := lister.Err(); err != nil {
		return nil, api.JSError(err, "listing streams")
	}
	slices.SortFunc(out.Streams, func(a, b semaq.StreamInfo) int { return strings.Compare(a.Config.Name, b.Config.Name) })
	return out, nil
}

func (m *Manager) apiLookup(ctx context.Context, req *semaq.StreamLookupRequest) (any, error) {
	if err := semaq.CheckSubject(req.Subject, true); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "stream lookup: %v", err)
	}
	var names []string
	lister := m.deps.JS.StreamNames(ctx, jetstream.WithStreamListSubject(reserved.StoragePrefix+req.Subject))
	for n := range lister.Name() {
		names = append(names, n)
	}
	if err := lister.Err(); err != nil {
		return nil, api.JSError(err, "stream lookup")
	}
	switch len(names) {
	case 0:
		return nil, semaq.NewAPIError(semaq.ErrNoStream, "no stream captures subject %s", req.Subject)
	case 1:
		return semaq.StreamLookupResponse{Stream: names[0]}, nil
	default:
		slices.Sort(names)
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "subject %s spans streams %s; use a narrower subject", req.Subject, strings.Join(names, ", "))
	}
}

// apiServerInfo answers INFO: the node (Deps.Self), and who asked.
func (m *Manager) apiServerInfo(ctx context.Context, _ *anyBody) (any, error) {
	info := m.deps.Self()
	info.TokenTenant = semaq.TokenAnyTenant
	p := m.deps.Principal(api.RequestHeader(ctx))
	if p.Who == api.User {
		info.User, info.Role, info.Tenant = p.User, p.Role, p.Tenant
	}
	if tenant, anyTenant := p.TokenTenant(); !anyTenant {
		info.TokenTenant = semaq.TokenTenant(tenant)
	}
	return info, nil
}

// semaqStream returns the info of a SemaQ-managed stream; internal streams
// (KV buckets and the like) are reported as not found.
func (m *Manager) semaqStream(ctx context.Context, name string) (*jetstream.StreamInfo, error) {
	st, err := m.deps.JS.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	info := st.CachedInfo()
	if !IsSemaqStream(&info.Config) {
		return nil, jetstream.ErrStreamNotFound
	}
	return info, nil
}
