package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/audit"
	"github.com/semaq/semaq/internal/registry"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// Wiring of the audit log (internal/broker/audit) into the node, and what
// each admin change records (docs/security.md, Audit).
//
// Every handler that changes streams, queues, schemas, routes, users, keys
// or dead letters starts with one line,
//
//	defer s.audit(ctx, semaq.AuditOpStreamCreate, name)(&out, &err)
//
// which reads the principal from the request and what the change is about
// before it runs, and, when the handler returns, what it left, and writes
// one record: refused changes too, with their error. The record is
// written before the handler answers. If it cannot be written, the change
// stands (it is made by then, and most cannot be undone: a deleted
// stream's messages are gone) and the record goes to the log at error
// level and to semaq_audit_write_failures_total instead.

// auditWriteTimeout bounds the after-read and the write of one record,
// whatever time the change itself took.
const auditWriteTimeout = 5 * time.Second

// startAudit creates SQ_AUDIT. Before any handler is served, so no change
// goes unrecorded.
func (s *Server) startAudit(ctx context.Context) error {
	l, err := audit.Open(ctx, audit.Deps{
		JS: s.js, Conn: s.nc, Log: s.log.With("component", "audit"),
		MaxAge: s.cfg.AuditMaxAge, MaxBytes: s.cfg.AuditMaxBytes, Replicas: s.ownReplicas(),
		Written: s.metrics.AuditRecord, Failed: s.metrics.AuditWriteFailure,
	})
	if err != nil {
		return fmt.Errorf("broker: %w", err)
	}
	s.auditLog = l
	return nil
}

func (s *Server) stopAudit(ctx context.Context) error {
	if s.auditLog == nil {
		return nil
	}
	return s.auditLog.Close(ctx)
}

// auditHandlers serves $SQ.API.AUDIT.LIST.
func (s *Server) auditHandlers() api.Handlers {
	if s.auditLog == nil {
		return api.Handlers{}
	}
	return s.auditLog.Handlers()
}

// audit is the node's api.AuditFunc: see the top of this file.
func (s *Server) audit(ctx context.Context, op, target string) func(out *any, err *error) {
	return s.auditAs(ctx, s.principal(api.RequestHeader(ctx)), "", op, target)
}

// auditAs is audit for a change asked by p through door ("" for $SQ.API).
func (s *Server) auditAs(ctx context.Context, p api.Principal, door, op, target string) func(out *any, err *error) {
	if s.auditLog == nil {
		return func(*any, *error) {}
	}
	read := s.auditReader(op)
	var before json.RawMessage
	if read != nil {
		before = audit.Value(read(ctx, target))
	}
	return func(out *any, err *error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditWriteTimeout)
		defer cancel()
		rec := semaq.AuditRecord{
			Time: time.Now().UTC(), Node: s.ns.Name(), Door: door, Op: op, Target: target, Outcome: semaq.AuditOK, Before: before,
			Principal: semaq.AuditPrincipal{Who: string(p.Who), User: p.User, Tenant: p.Tenant, Role: p.Role},
		}
		if err != nil && *err != nil {
			rec.Outcome, rec.Error = semaq.AuditRefused, (*err).Error()
		}
		switch {
		case read != nil:
			// Refused changes too: what they left, which is what there
			// was unless the refusal came halfway.
			rec.After = audit.Value(read(ctx, target))
		case rec.Outcome == semaq.AuditOK && out != nil:
			// Only for operations without a reader (dead letters): their
			// answers carry counts and sequences, never a key.
			rec.After = audit.Value(*out)
		}
		_ = s.auditLog.Record(ctx, rec)
	}
}

// audited is op with its change recorded, for handlers that are plain
// functions (the schema API): target names what req changes.
func audited[Req any](s *Server, op string, target func(*Req) string, fn func(context.Context, *registry.Registry, *Req) (any, error)) func(context.Context, *registry.Registry, *Req) (any, error) {
	return func(ctx context.Context, reg *registry.Registry, req *Req) (out any, err error) {
		defer s.audit(ctx, op, target(req))(&out, &err)
		return fn(ctx, reg, req)
	}
}

// auditReader is how the state an operation changes is read, for its
// record's before and after; nil for operations recorded by their answer.
// A reader returns nil when there is nothing (the stream does not exist).
// No reader returns a key or a secret.
func (s *Server) auditReader(op string) func(ctx context.Context, target string) any {
	switch op {
	case semaq.AuditOpStreamCreate, semaq.AuditOpStreamDelete:
		return s.auditStream
	case semaq.AuditOpQueueCreate, semaq.AuditOpQueueDelete:
		return s.auditQueue
	case semaq.AuditOpSchemaRegister, semaq.AuditOpSchemaDelete:
		return s.auditSchemaSubject
	case semaq.AuditOpSchemaConfigSet:
		return s.auditSchemaConfig
	case semaq.AuditOpSchemaBind, semaq.AuditOpSchemaUnbind:
		return s.auditBinding
	case semaq.AuditOpRouteAdd, semaq.AuditOpRouteDelete:
		return s.auditRoute
	case semaq.AuditOpUserAdd, semaq.AuditOpUserRemove, semaq.AuditOpKeyRotate, semaq.AuditOpUserQuota:
		return s.auditUser
	}
	return nil
}

func (s *Server) auditStream(ctx context.Context, name string) any {
	st, err := s.js.Stream(ctx, name)
	if err != nil || !isSemaqStream(&st.CachedInfo().Config) {
		return nil
	}
	return s.streamInfo(st.CachedInfo()).Config
}

func (s *Server) auditQueue(ctx context.Context, name string) any {
	st, err := s.js.Stream(ctx, name)
	if err != nil {
		return nil
	}
	if qc, ok := queueConfigOf(&st.CachedInfo().Config); ok {
		return qc
	}
	return nil
}

// auditedSchema is a registry subject in a record: its live versions and
// the latest one.
type auditedSchema struct {
	Versions []int         `json:"versions"`
	Latest   *semaq.Schema `json:"latest,omitempty"`
}

func (s *Server) auditSchemaSubject(ctx context.Context, subject string) any {
	if s.reg == nil {
		return nil
	}
	vs, err := s.reg.Versions(ctx, subject, false)
	if err != nil || len(vs) == 0 {
		return nil
	}
	out := auditedSchema{Versions: vs}
	if e, v, ok := s.reg.Latest(subject); ok {
		out.Latest = &semaq.Schema{ID: e.ID, Type: e.SchemaType, Text: e.Schema, References: wireReferences(e.References), Subject: subject, Version: v}
	}
	return out
}

func (s *Server) auditSchemaConfig(ctx context.Context, subject string) any {
	if s.reg == nil {
		return nil
	}
	c, err := schemaConfig(ctx, s.reg, subject)
	if err != nil {
		return nil
	}
	return c
}

func (s *Server) auditBinding(_ context.Context, pattern string) any {
	if s.reg == nil {
		return nil
	}
	bs := s.reg.Bindings()
	i := slices.IndexFunc(bs, func(b registry.Binding) bool { return b.Pattern == pattern })
	if i < 0 {
		return nil
	}
	b := bs[i]
	return semaq.SchemaBinding{Pattern: b.Pattern, Subject: b.Subject}
}

func (s *Server) auditRoute(ctx context.Context, name string) any {
	kv, err := s.js.KeyValue(ctx, reserved.RouteBucket)
	if err != nil {
		return nil
	}
	e, err := kv.Get(ctx, name)
	if err != nil || !json.Valid(e.Value()) {
		return nil
	}
	return json.RawMessage(e.Value())
}

// auditUser is a user as `semaq user info` shows it: key IDs, never a
// key or its hash.
func (s *Server) auditUser(_ context.Context, name string) any {
	if s.identities == nil {
		return nil
	}
	u, err := s.identities.Get(name)
	if err != nil {
		return nil
	}
	return u.Info()
}
