package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/clusterstatus"
	"github.com/semaq/semaq/internal/broker/clustersync"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// openStreams serves the streams on the ingress, the work queues on their
// dispatchers, and the stream and queue API; it follows JetStream's stream
// advisories, so streams changed through another node (or restored from
// disk) are served by this node's ingress too. The first sync waits for
// every stream's leader: in a cluster some may be electing one (this node
// started again right after a crash). Closing it stops the dispatchers.
func openStreams(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	if err := jsutil.Retry(ctx, s.syncStreams); err != nil {
		return nil, err
	}
	closeQueues := subsystem.Func(s.stopQueues)
	sub, err := s.nc.Subscribe("$JS.EVENT.ADVISORY.STREAM.*.*", func(m *nats.Msg) {
		ctx, cancel := context.WithTimeout(context.Background(), api.Timeout)
		defer cancel()
		if err := s.syncStreams(ctx); err != nil {
			s.log.Warn("refreshing streams after advisory", "subject", m.Subject, "err", err)
		}
	})
	if err == nil {
		err = s.nc.Flush()
	}
	if err != nil {
		_ = closeQueues.Close(ctx)
		return nil, fmt.Errorf("broker: advisories: %w", err)
	}
	handlers := api.Handlers{
		fmt.Sprintf(semaq.APIStreamCreateT, "*"): api.NamedOp(s.log, "stream create", s.apiCreate, nil),
		fmt.Sprintf(semaq.APIStreamInfoT, "*"):   api.NamedOp(s.log, "stream info", s.apiInfo, nil),
		fmt.Sprintf(semaq.APIStreamDeleteT, "*"): api.NamedOp(s.log, "stream delete", s.apiDelete, nil),
		semaq.APIStreamList:                      api.Op(s.log, "stream list", s.apiList, nil),
		semaq.APIStreamLookup:                    api.Op(s.log, "stream lookup", s.apiLookup, nil),
		semaq.APIInfo:                            api.Op(s.log, "server info", s.apiServerInfo, nil),
	}.Merge(s.queueHandlers())
	return subsystem.WithHandlers(subsystem.Func(func(ctx context.Context) error {
		_ = sub.Unsubscribe()
		return closeQueues.Close(ctx)
	}), handlers), nil
}

// syncStreams makes the ingress serve exactly the SemaQ streams JetStream has.
// It holds streamsMu, like stream create and delete: a sync that listed the
// streams just before a create must not remove the new stream's ingress
// after the create added it.
func (s *Server) syncStreams(ctx context.Context) error {
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	have := make(map[string]bool)
	queued := make(map[string]semaq.QueueConfig)
	remote := make(map[string]semaq.QueueConfig) // queues another node dispatches
	lister := s.js.ListStreams(ctx)
	for info := range lister.Info() {
		if !isSemaqStream(&info.Config) {
			continue
		}
		have[info.Config.Name] = true
		if qc, ok := queueConfigOf(&info.Config); ok && s.isQueueLeader(info) {
			queued[info.Config.Name] = qc
		} else if ok {
			remote[info.Config.Name] = qc
		}
		if err := s.serveStream(info.Config.Name, publicSubjects(&info.Config), s.durability(&info.Config)); err != nil {
			return err
		}
	}
	if err := lister.Err(); err != nil {
		return fmt.Errorf("broker: listing streams: %w", err)
	}
	unknown, err := s.unlistedStreams(ctx, have)
	if err != nil {
		return fmt.Errorf("broker: listing stream names: %w", err)
	}
	for _, name := range s.ingress.Names() {
		if !have[name] && !unknown[name] {
			s.ingress.Remove(name)
		}
	}
	return s.syncQueues(ctx, queued, remote, unknown)
}

// unlistedStreams are the streams JetStream has that a stream list left
// out (have: the listed ones). In a cluster the list gathers each stream's
// info from its leader and answers after 4 s with the streams it got; a
// stream electing a leader (its leader's node died) is named as missing,
// which nats.go drops. Such a stream is not gone: syncStreams leaves its
// ingress and its queue as they are, and runs again soon.
func (s *Server) unlistedStreams(ctx context.Context, have map[string]bool) (map[string]bool, error) {
	if !s.cfg.Clustered() {
		return nil, nil
	}
	unknown := map[string]bool{}
	names := s.js.StreamNames(ctx)
	for name := range names.Name() {
		if !have[name] {
			unknown[name] = true
		}
	}
	if err := names.Err(); err != nil {
		return nil, err
	}
	if len(unknown) > 0 {
		s.queues.mu.Lock()
		s.retryQueueSync()
		s.queues.mu.Unlock()
	}
	return unknown, nil
}

// serveStream makes the ingress serve stream name on its public subjects,
// routed from user accounts to it with auth on (tenancy.go).
func (s *Server) serveStream(name string, subjects []string, durability string) error {
	if s.tenancy != nil {
		if err := s.tenancy.addStreamSubjects(subjects); err != nil {
			return err
		}
	}
	return s.ingress.Serve(name, subjects, durability == DurabilityFsync)
}

func isSemaqStream(c *jetstream.StreamConfig) bool {
	return c.Metadata[reserved.MetadataVersion] != ""
}

// durability reads a stream's durability from its metadata; streams made
// before it was recorded take the server's default.
func (s *Server) durability(c *jetstream.StreamConfig) string {
	if c.Storage == jetstream.MemoryStorage {
		return DurabilityMemory
	}
	if d := c.Metadata[reserved.MetadataDurability]; d != "" {
		return d
	}
	return s.defaultDurability()
}

func publicSubjects(c *jetstream.StreamConfig) []string {
	out := make([]string, 0, len(c.Subjects))
	for _, s := range c.Subjects {
		out = append(out, strings.TrimPrefix(s, reserved.StoragePrefix))
	}
	return out
}

// jsConfig maps a user's stream configuration onto JetStream's. Subjects are
// moved into the reserved namespace and a transform stores them under their
// public names.
func (s *Server) jsConfig(c *semaq.StreamConfig) (jetstream.StreamConfig, error) {
	if err := semaq.CheckStreamName(c.Name); err != nil {
		return jetstream.StreamConfig{}, err
	}
	if len(c.Subjects) == 0 {
		return jetstream.StreamConfig{}, errors.New("a stream needs at least one subject")
	}
	stored := make([]string, 0, len(c.Subjects))
	for i, subj := range c.Subjects {
		if err := checkPublicSubject(subj); err != nil {
			return jetstream.StreamConfig{}, err
		}
		for _, prev := range c.Subjects[:i] {
			if subjectsOverlap(prev, subj) {
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
		Metadata:         map[string]string{reserved.MetadataVersion: "1"},
	}
	switch c.Durability {
	case "":
		if c.Storage != "memory" {
			jc.Metadata[reserved.MetadataDurability] = s.defaultDurability()
		}
	case DurabilityFsync, DurabilityInterval:
		if c.Storage == "memory" {
			return jc, fmt.Errorf("durability %s needs file storage; memory streams are not durable", c.Durability)
		}
		jc.Metadata[reserved.MetadataDurability] = c.Durability
	default:
		return jc, fmt.Errorf("durability %q is not one of fsync, interval", c.Durability)
	}
	if err := s.checkClusterDurability(c.Durability); err != nil {
		return jc, err
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
		jc.MaxBytes = s.defaultStreamMaxBytes(jc.Storage)
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
	return jc, nil
}

// Default bounds of a user stream whose create names no max_bytes
// (stream_max_bytes changes them): every stream a client can fill has a
// bound, so a publisher, or a loop of deliveries between streams, cannot
// take the disk (or, for memory streams, the RAM) of the node.
const (
	DefaultStreamMaxBytes       = 1 << 30
	DefaultStreamMaxBytesMemory = 256 << 20
)

// defaultStreamMaxBytes is the max_bytes of a stream created without one
// (-1: none).
func (s *Server) defaultStreamMaxBytes(storage jetstream.StorageType) int64 {
	switch {
	case s.cfg.StreamMaxBytes != 0:
		return s.cfg.StreamMaxBytes
	case storage == jetstream.MemoryStorage:
		return DefaultStreamMaxBytesMemory
	default:
		return DefaultStreamMaxBytes
	}
}

// streamInfo maps JetStream's stream info onto SemaQ's.
func (s *Server) streamInfo(info *jetstream.StreamInfo) semaq.StreamInfo {
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
			Durability:  s.durability(c),
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
		Cluster: clusterstatus.StreamCluster(info.Cluster),
	}
	if s.reg != nil {
		for _, b := range s.reg.Bindings() {
			if slices.Contains(out.Config.Subjects, b.Pattern) {
				out.Config.Schema = b.Subject
				break
			}
		}
	}
	switch out.Config.Durability {
	case DurabilityFsync:
		out.Sync = SyncAlways
		out.Commit = s.ingress.CommitStats(c.Name)
	case DurabilityMemory:
		out.Sync = "memory"
	default:
		out.Sync = SyncInterval
	}
	if s.cfg.Clustered() && out.Sync != "memory" {
		out.Sync = s.cfg.Sync // the node's JetStream decides (durability.go)
	}
	return out
}

func (s *Server) apiCreate(ctx context.Context, name string, req *semaq.StreamConfig) (out any, err error) {
	defer s.audit(ctx, semaq.AuditOpStreamCreate, name)(&out, &err)
	if req.Name == "" {
		req.Name = name
	}
	if req.Name != name {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "stream create: name %q in the body differs from %q in the subject", req.Name, name)
	}
	jc, err := s.jsConfig(req)
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadStream, "stream %s: %v", req.Name, err)
	}
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	if _, err := s.js.Stream(ctx, req.Name); err == nil {
		return nil, semaq.NewAPIError(semaq.ErrStreamExists, "stream %s already exists", req.Name)
	}
	if req.Schema != "" {
		if _, _, ok := s.reg.Latest(req.Schema); !ok {
			return nil, semaq.NewAPIError(semaq.ErrSchemaNotFound, "stream %s: schema registry subject %q has no live version; register a schema first", req.Name, req.Schema)
		}
	}
	// JetStream would say only "subjects overlap with an existing stream":
	// overlapping names the stream and the subject.
	if err := s.overlapping(ctx, "stream", req.Name, req.Subjects); err != nil {
		return nil, err
	}
	st, err := s.js.CreateStream(ctx, jc)
	if err != nil {
		return nil, api.JSError(err, "stream %s", req.Name)
	}
	// Bind before serving, so no message reaches the stream unchecked.
	for _, p := range req.Subjects {
		if req.Schema == "" {
			break
		}
		if err := s.reg.Bind(ctx, p, req.Schema); err != nil {
			_ = s.js.DeleteStream(ctx, req.Name)
			return nil, semaq.NewAPIError(semaq.ErrBadStream, "stream %s: binding %s to schema %s: %v", req.Name, p, req.Schema, err)
		}
	}
	if err := s.serveStream(req.Name, req.Subjects, s.durability(&jc)); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "stream %s created but not served: %v", req.Name, err)
	}
	s.log.Info("stream added", "stream", req.Name, "subjects", req.Subjects)
	// Served, with its schema, by every node before the create returns.
	s.syncer.Sync(ctx, clustersync.Request{Schemas: req.Schema != "", Streams: true, Subjects: req.Subjects})
	return s.streamInfo(st.CachedInfo()), nil
}

// anyBody is the request of the verbs that take none: whatever JSON a
// client sends is ignored, as JetStream's own API does.
type anyBody = json.RawMessage

func (s *Server) apiInfo(ctx context.Context, name string, _ *anyBody) (any, error) {
	info, err := s.semaqStream(ctx, name)
	if err != nil {
		return nil, api.JSError(err, "stream %s", name)
	}
	return s.streamInfo(info), nil
}

func (s *Server) apiDelete(ctx context.Context, name string, _ *anyBody) (out any, err error) {
	defer s.audit(ctx, semaq.AuditOpStreamDelete, name)(&out, &err)
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	info, err := s.semaqStream(ctx, name)
	if err != nil {
		return nil, api.JSError(err, "stream %s", name)
	}
	// Stop taking writes first, so nothing is acknowledged into a stream
	// that is going away.
	s.ingress.Remove(name)
	if err := s.js.DeleteStream(ctx, name); err != nil {
		return nil, api.JSError(err, "stream %s", name)
	}
	// Bindings of the stream's own patterns go with it.
	for _, b := range s.reg.Bindings() {
		if slices.Contains(publicSubjects(&info.Config), b.Pattern) {
			if err := s.reg.Unbind(ctx, b.Pattern); err != nil {
				s.log.Warn("unbinding a deleted stream's schema", "stream", name, "pattern", b.Pattern, "err", err)
			}
		}
	}
	s.log.Info("stream removed", "stream", name)
	return struct {
		Success bool `json:"success"`
	}{true}, nil
}

func (s *Server) apiList(ctx context.Context, _ *anyBody) (any, error) {
	out := semaq.StreamListResponse{Streams: []semaq.StreamInfo{}}
	lister := s.js.ListStreams(ctx)
	for info := range lister.Info() {
		if isSemaqStream(&info.Config) {
			out.Streams = append(out.Streams, s.streamInfo(info))
		}
	}
	if err := lister.Err(); err != nil {
		return nil, api.JSError(err, "listing streams")
	}
	slices.SortFunc(out.Streams, func(a, b semaq.StreamInfo) int { return strings.Compare(a.Config.Name, b.Config.Name) })
	return out, nil
}

func (s *Server) apiLookup(ctx context.Context, req *semaq.StreamLookupRequest) (any, error) {
	if err := checkSubject(req.Subject, true); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "stream lookup: %v", err)
	}
	var names []string
	lister := s.js.StreamNames(ctx, jetstream.WithStreamListSubject(reserved.StoragePrefix+req.Subject))
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

func (s *Server) apiServerInfo(ctx context.Context, _ *anyBody) (any, error) {
	info := semaq.ServerInfo{
		Version:     Version,
		Name:        s.ns.Name(),
		NATSURL:     s.ClientURL(),
		HTTPAddr:    s.HTTPAddr(),
		Sync:        s.cfg.Sync,
		JetStream:   s.ns.JetStreamEnabled(),
		TokenTenant: semaq.TokenAnyTenant,
	}
	p := s.principal(api.RequestHeader(ctx))
	if p.Who == api.User {
		info.User, info.Role, info.Tenant = p.User, p.Role, p.Tenant
	}
	if tenant, anyTenant := tokenTenantOf(p); !anyTenant {
		info.TokenTenant = semaq.TokenTenant(tenant)
	}
	return info, nil
}

// semaqStream returns the info of a SemaQ-managed stream; internal streams
// (KV buckets and the like) are reported as not found.
func (s *Server) semaqStream(ctx context.Context, name string) (*jetstream.StreamInfo, error) {
	st, err := s.js.Stream(ctx, name)
	if err != nil {
		return nil, err
	}
	info := st.CachedInfo()
	if !isSemaqStream(&info.Config) {
		return nil, jetstream.ErrStreamNotFound
	}
	return info, nil
}
