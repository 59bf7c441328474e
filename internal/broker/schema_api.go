package broker

import (
	"context"
	"errors"
	"math"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/clustersync"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/registry"
	"github.com/semaq/semaq/internal/schema"
	"github.com/semaq/semaq/semaq"
)

// schemaHandlers serves the schema registry on $SQ.API.SCHEMA.*, for the
// CLI and the SDK (Confluent's REST API is served over HTTP). Handlers read
// s.reg when a request arrives; without a registry they answer 503.
func openSchemaAPI(_ context.Context, s *Server) (subsystem.Subsystem, error) {
	return subsystem.WithHandlers(subsystem.None, s.schemaHandlers()), nil
}

func (s *Server) schemaHandlers() map[string]nats.MsgHandler {
	return map[string]nats.MsgHandler{
		semaq.APISchemaRegister:  schemaOp(s, "register", audited(s, semaq.AuditOpSchemaRegister, func(r *semaq.SchemaRegisterRequest) string { return r.Subject }, apiSchemaRegister)),
		semaq.APISchemaGet:       schemaOp(s, "get", apiSchemaGet),
		semaq.APISchemaSubjects:  schemaOp(s, "subjects", apiSchemaSubjects),
		semaq.APISchemaVersions:  schemaOp(s, "versions", apiSchemaVersions),
		semaq.APISchemaCheck:     schemaOp(s, "check", apiSchemaCheck),
		semaq.APISchemaConfigGet: schemaOp(s, "config get", apiSchemaConfigGet),
		semaq.APISchemaConfigSet: schemaOp(s, "config set", audited(s, semaq.AuditOpSchemaConfigSet, func(r *semaq.SchemaConfig) string { return r.Subject }, apiSchemaConfigSet)),
		semaq.APISchemaDelete:    schemaOp(s, "delete", audited(s, semaq.AuditOpSchemaDelete, func(r *semaq.SchemaDeleteRequest) string { return r.Subject }, apiSchemaDelete)),
		semaq.APISchemaBind:      schemaOp(s, "bind", audited(s, semaq.AuditOpSchemaBind, bindingPattern, apiSchemaBind)),
		semaq.APISchemaUnbind:    schemaOp(s, "unbind", audited(s, semaq.AuditOpSchemaUnbind, bindingPattern, apiSchemaUnbind)),
		semaq.APISchemaBindings:  schemaOp(s, "bindings", apiSchemaBindings),
		semaq.APISchemaLookup:    schemaOp(s, "lookup", apiSchemaLookup),
	}
}

// bindingPattern is what a bind or unbind changes, for its audit record.
func bindingPattern(b *semaq.SchemaBinding) string { return b.Pattern }

// schemaOp adapts one registry operation to a NATS handler: it decodes the
// request (an empty body is the zero request), runs op with a bounded
// context and replies with its result or its error.
func schemaOp[Req any](s *Server, name string, op func(ctx context.Context, reg *registry.Registry, req *Req) (any, error)) nats.MsgHandler {
	return api.Op(s.log, "schema "+name, func(ctx context.Context, req *Req) (any, error) {
		if s.reg == nil {
			return nil, semaq.NewAPIError(semaq.ErrUnavailable, "schema registry not running")
		}
		out, err := op(ctx, s.reg, req)
		if err == nil && schemaWrites[name] {
			// Enforced by every node's ingress before the change returns.
			s.sync.Sync(ctx, clustersync.Request{Schemas: true})
		}
		return out, err
	}, schemaAPIError)
}

// schemaWrites are the schema operations that change what the ingress
// enforces.
var schemaWrites = map[string]bool{"register": true, "config set": true, "delete": true, "bind": true, "unbind": true}

// schemaAPIError maps a registry error onto the API's error: its Confluent
// code as err_code and that code's HTTP status as code.
func schemaAPIError(err error) *semaq.APIError {
	if re, ok := errors.AsType[*registry.Error](err); ok {
		code := uint16(0)
		if re.Code > 0 && re.Code <= math.MaxUint16 {
			code = uint16(re.Code)
		}
		return &semaq.APIError{Code: re.Status(), ErrCode: code, Description: re.Message}
	}
	if ae, ok := errors.AsType[*semaq.APIError](err); ok {
		return ae
	}
	return semaq.NewAPIError(semaq.ErrUnavailable, "schema registry: %v", err)
}

func badSchemaRequest(format string, args ...any) *semaq.APIError {
	return semaq.NewAPIError(semaq.ErrBadRequest, format, args...)
}

// schemaRequest turns the wire form of a schema into the registry's. The
// SemaQ API defaults to JSON Schema; an unknown type is left for the
// registry to refuse (42201), so both APIs word it alike.
func schemaRequest(text, typ string, refs []semaq.SchemaReference) registry.SchemaRequest {
	if typ == "" {
		typ = semaq.SchemaTypeJSON
	}
	out := registry.SchemaRequest{Schema: text, SchemaType: typ}
	for _, r := range refs {
		out.References = append(out.References, schema.Reference{Name: r.Name, Subject: r.Subject, Version: r.Version})
	}
	return out
}

func wireReferences(refs []schema.Reference) []semaq.SchemaReference {
	if len(refs) == 0 {
		return nil
	}
	out := make([]semaq.SchemaReference, len(refs))
	for i, r := range refs {
		out[i] = semaq.SchemaReference{Name: r.Name, Subject: r.Subject, Version: r.Version}
	}
	return out
}

func apiSchemaRegister(ctx context.Context, reg *registry.Registry, req *semaq.SchemaRegisterRequest) (any, error) {
	sr := schemaRequest(req.Schema, req.SchemaType, req.References)
	id, err := reg.Register(ctx, req.Subject, sr, req.Normalize)
	if err != nil {
		return nil, err
	}
	// Register answers with the id only; the version holding it is the
	// newest one with this schema, which Register has just made visible.
	v, err := reg.Lookup(ctx, req.Subject, sr, false)
	if err != nil {
		return nil, err
	}
	return semaq.SchemaRegisterResponse{ID: id, Version: v.Version}, nil
}

func apiSchemaGet(ctx context.Context, reg *registry.Registry, req *semaq.SchemaGetRequest) (any, error) {
	switch {
	case req.ID != 0 && (req.Subject != "" || req.Version != ""):
		return nil, badSchemaRequest("schema get: give an id, or a subject and version, not both")
	case req.ID != 0:
		e, err := reg.SchemaByID(ctx, req.ID)
		if err != nil {
			return nil, err
		}
		return semaq.Schema{ID: e.ID, Type: e.SchemaType, Text: e.Schema, References: wireReferences(e.References)}, nil
	case req.Subject == "":
		return nil, badSchemaRequest("schema get: give an id, or a subject and version")
	}
	ver := req.Version
	if ver == "" {
		ver = "latest"
	}
	v, err := reg.Version(ctx, req.Subject, ver, req.Deleted)
	if err != nil {
		return nil, err
	}
	return semaq.Schema{
		ID: v.ID, Type: v.SchemaType, Text: v.Schema, References: wireReferences(v.References),
		Subject: v.Subject, Version: v.Version, Deleted: v.Deleted,
	}, nil
}

func apiSchemaSubjects(ctx context.Context, reg *registry.Registry, req *semaq.SchemaSubjectsRequest) (any, error) {
	return semaq.SchemaSubjectsResponse{Subjects: reg.Subjects(ctx, "", req.Deleted)}, nil
}

func apiSchemaVersions(ctx context.Context, reg *registry.Registry, req *semaq.SchemaVersionsRequest) (any, error) {
	vs, err := reg.Versions(ctx, req.Subject, req.Deleted)
	if err != nil {
		return nil, err
	}
	return semaq.SchemaVersionsResponse{Subject: req.Subject, Versions: vs}, nil
}

func apiSchemaCheck(ctx context.Context, reg *registry.Registry, req *semaq.SchemaCheckRequest) (any, error) {
	if req.Subject == "" {
		return nil, badSchemaRequest("schema check: no subject")
	}
	ok, reasons, err := reg.Check(ctx, req.Subject, req.Version, schemaRequest(req.Schema, req.SchemaType, req.References))
	if err != nil {
		return nil, err
	}
	out := semaq.SchemaCheckResponse{Compatible: ok, Reasons: make([]semaq.SchemaIncompatibility, len(reasons))}
	for i, r := range reasons {
		out.Reasons[i] = semaq.SchemaIncompatibility{Path: r.Path, Rule: r.Rule, Message: r.Message}
	}
	return out, nil
}

func apiSchemaConfigGet(ctx context.Context, reg *registry.Registry, req *semaq.SchemaConfigRequest) (any, error) {
	return schemaConfig(ctx, reg, req.Subject)
}

func schemaConfig(ctx context.Context, reg *registry.Registry, subject string) (semaq.SchemaConfig, error) {
	mode, err := reg.Compatibility(ctx, subject)
	if err != nil {
		return semaq.SchemaConfig{}, err
	}
	out := semaq.SchemaConfig{Subject: subject, Compatibility: string(mode)}
	if subject != "" {
		_, err := reg.SubjectCompatibility(ctx, subject)
		switch {
		case errors.Is(err, registry.ErrSubjectCompatNotConfigured):
			out.Inherited = true
		case err != nil:
			return semaq.SchemaConfig{}, err
		}
	}
	return out, nil
}

func apiSchemaConfigSet(ctx context.Context, reg *registry.Registry, req *semaq.SchemaConfig) (any, error) {
	mode, err := registry.ParseCompatibility(req.Compatibility)
	if err != nil {
		return nil, err
	}
	if err := reg.SetCompatibility(ctx, req.Subject, mode); err != nil {
		return nil, err
	}
	return schemaConfig(ctx, reg, req.Subject)
}

func apiSchemaDelete(ctx context.Context, reg *registry.Registry, req *semaq.SchemaDeleteRequest) (any, error) {
	if req.Subject == "" {
		return nil, badSchemaRequest("schema delete: no subject")
	}
	if req.Version == "" {
		vs, err := reg.DeleteSubject(ctx, req.Subject, req.Permanent)
		if err != nil {
			return nil, err
		}
		return semaq.SchemaDeleteResponse{Subject: req.Subject, Versions: vs}, nil
	}
	v, err := reg.DeleteVersion(ctx, req.Subject, req.Version, req.Permanent)
	if err != nil {
		return nil, err
	}
	return semaq.SchemaDeleteResponse{Subject: req.Subject, Versions: []int{v}}, nil
}

func apiSchemaBind(ctx context.Context, reg *registry.Registry, req *semaq.SchemaBinding) (any, error) {
	if req.Subject == "" {
		return nil, badSchemaRequest("schema bind: no registry subject")
	}
	if err := reg.Bind(ctx, req.Pattern, req.Subject); err != nil {
		return nil, err
	}
	return semaq.SchemaBinding{Pattern: req.Pattern, Subject: req.Subject}, nil
}

func apiSchemaUnbind(ctx context.Context, reg *registry.Registry, req *semaq.SchemaBinding) (any, error) {
	if req.Pattern == "" {
		return nil, badSchemaRequest("schema unbind: no pattern")
	}
	if err := reg.Unbind(ctx, req.Pattern); err != nil {
		return nil, err
	}
	return struct {
		Success bool `json:"success"`
	}{true}, nil
}

func apiSchemaBindings(ctx context.Context, reg *registry.Registry, _ *struct{}) (any, error) {
	bs := reg.Bindings()
	out := semaq.SchemaBindingsResponse{Bindings: make([]semaq.SchemaBinding, len(bs))}
	for i, b := range bs {
		out.Bindings[i] = semaq.SchemaBinding{Pattern: b.Pattern, Subject: b.Subject}
	}
	return out, nil
}

func apiSchemaLookup(ctx context.Context, reg *registry.Registry, req *semaq.SchemaLookupRequest) (any, error) {
	if err := checkSubject(req.Subject, false); err != nil {
		return nil, badSchemaRequest("schema lookup: %v", err)
	}
	b, ok := reg.BindingFor(req.Subject)
	if !ok {
		return nil, semaq.NewAPIError(semaq.ErrSchemaBindingNotFound, "no schema binding matches subject %s", req.Subject)
	}
	e, v, ok := reg.Latest(b.Subject)
	if !ok {
		return nil, semaq.NewAPIError(semaq.ErrSchemaSubjectNotFound,
			"subject %s is bound by %s to registry subject '%s', which has no live version", req.Subject, b.Pattern, b.Subject)
	}
	return semaq.SchemaLookup{
		Binding:    semaq.SchemaBinding{Pattern: b.Pattern, Subject: b.Subject},
		ID:         e.ID,
		Version:    v,
		SchemaType: e.SchemaType,
	}, nil
}
