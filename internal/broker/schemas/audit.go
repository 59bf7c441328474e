package schemas

import (
	"context"
	"slices"

	"github.com/semaq/semaq/internal/registry"
	"github.com/semaq/semaq/semaq"
)

// What the registry's writes record (docs/security.md, Audit): the node
// registers these readers of the state each write changes, for its
// record's before and after.

// audited is fn with its change recorded, for handlers that are plain
// functions: target names what req changes.
func audited[Req any](s *Service, op string, target func(*Req) string, fn func(context.Context, *registry.Registry, *Req) (any, error)) func(context.Context, *registry.Registry, *Req) (any, error) {
	return func(ctx context.Context, reg *registry.Registry, req *Req) (out any, err error) {
		defer s.audit(ctx, op, target(req))(&out, &err)
		return fn(ctx, reg, req)
	}
}

// auditedSchema is a registry subject in a record: its live versions and
// the latest one.
type auditedSchema struct {
	Versions []int         `json:"versions"`
	Latest   *semaq.Schema `json:"latest,omitempty"`
}

// AuditSubject reads a registry subject, for the records of register and
// delete (semaq.AuditOpSchemaRegister, semaq.AuditOpSchemaDelete).
func (s *Service) AuditSubject(ctx context.Context, subject string) any {
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

// AuditConfig reads a subject's compatibility ("" the global one), for
// the records of config set (semaq.AuditOpSchemaConfigSet).
func (s *Service) AuditConfig(ctx context.Context, subject string) any {
	if s.reg == nil {
		return nil
	}
	c, err := schemaConfig(ctx, s.reg, subject)
	if err != nil {
		return nil
	}
	return c
}

// AuditBinding reads the binding of a pattern, for the records of bind
// and unbind (semaq.AuditOpSchemaBind, semaq.AuditOpSchemaUnbind).
func (s *Service) AuditBinding(_ context.Context, pattern string) any {
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
