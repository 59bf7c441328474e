package broker

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/semaq/semaq/internal/broker/audit"
	"github.com/semaq/semaq/internal/registry"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// The readers of the audit records' before and after
// (internal/broker/audit, Recorder): what each admin change is about.

// audit is the node's api.AuditFunc.
func (s *Server) audit(ctx context.Context, op, target string) func(out *any, err *error) {
	return s.audits.Audit(ctx, op, target)
}

// audited is op with its change recorded, for handlers that are plain
// functions (the schema API): target names what req changes.
func audited[Req any](s *Server, op string, target func(*Req) string, fn func(context.Context, *registry.Registry, *Req) (any, error)) func(context.Context, *registry.Registry, *Req) (any, error) {
	return func(ctx context.Context, reg *registry.Registry, req *Req) (out any, err error) {
		defer s.audit(ctx, op, target(req))(&out, &err)
		return fn(ctx, reg, req)
	}
}

// auditReaders registers how the state each operation changes is read,
// for its record's before and after; operations without one (dead
// letters) are recorded by their answer. Subsystems register their own
// when they open (streams and queues: openStreams).
func (s *Server) auditReaders(r *audit.Recorder) {
	r.Reads(s.auditSchemaSubject, semaq.AuditOpSchemaRegister, semaq.AuditOpSchemaDelete)
	r.Reads(s.auditSchemaConfig, semaq.AuditOpSchemaConfigSet)
	r.Reads(s.auditBinding, semaq.AuditOpSchemaBind, semaq.AuditOpSchemaUnbind)
	r.Reads(s.auditRoute, semaq.AuditOpRouteAdd, semaq.AuditOpRouteDelete)
	r.Reads(s.auditUser, semaq.AuditOpUserAdd, semaq.AuditOpUserRemove, semaq.AuditOpKeyRotate, semaq.AuditOpUserQuota)
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
