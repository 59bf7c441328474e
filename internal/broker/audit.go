package broker

import (
	"context"
	"encoding/json"

	"github.com/semaq/semaq/internal/broker/audit"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// The readers of the audit records' before and after
// (internal/broker/audit, Recorder): what each admin change is about.

// audit is the node's api.AuditFunc.
func (s *Server) audit(ctx context.Context, op, target string) func(out *any, err *error) {
	return s.audits.Audit(ctx, op, target)
}

// auditReaders registers how the state each operation changes is read,
// for its record's before and after; operations without one (dead
// letters) are recorded by their answer.
func (s *Server) auditReaders(r *audit.Recorder) {
	r.Reads(s.auditStream, semaq.AuditOpStreamCreate, semaq.AuditOpStreamDelete)
	r.Reads(s.auditQueue, semaq.AuditOpQueueCreate, semaq.AuditOpQueueDelete)
	r.Reads(s.auditRoute, semaq.AuditOpRouteAdd, semaq.AuditOpRouteDelete)
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
