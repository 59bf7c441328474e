package broker

import "context"

// audit is the node's api.AuditFunc: the audit recorder
// (internal/broker/audit) with the principal of the request ctx serves.
// Each subsystem registers how the state of its operations is read when
// it opens (wiring.go).
func (s *Server) audit(ctx context.Context, op, target string) func(out *any, err *error) {
	return s.audits.Audit(ctx, op, target)
}
