package broker

import (
	"time"

	"github.com/semaq/semaq/internal/broker/ingress"
	"github.com/semaq/semaq/policy"
)

// Option configures a Server at New.
type Option func(*Server)

// WithOperator admits an operator: a NATS user, known by the public nkey
// pub, with every right on the node, the storage namespace and JetStream's
// whole API included. It is for the programs that embed a node and must
// reach JetStream below the semantic layer — the benchmark's raw
// JetStream baseline, tests that inspect storage. The embedder makes the
// key pair and keeps the seed; the node never sees it. `semaq serve` admits
// no operator.
func WithOperator(pub string) Option {
	return func(s *Server) { s.operators = append(s.operators, pub) }
}

// WithIngressPolicy adds policy steps to the ingress pipeline, run in
// order, before those Config.Policy enables (package policy).
func WithIngressPolicy(steps ...policy.Step) Option {
	return func(s *Server) { s.policy = append(s.policy, steps...) }
}

// WithPolicyRegistry makes Config.Policy's steps from r instead of
// policy.Default.
func WithPolicyRegistry(r *policy.Registry) Option {
	return func(s *Server) { s.policyReg = r }
}

// WithIngressShards runs the ingress on n shards (ingress/wire.go, which
// says which publish order each keeps); 0 picks by the number of cores.
// n outside 0..64 is clamped.
func WithIngressShards(n int) Option {
	return func(s *Server) { s.ingressShards = max(0, min(n, ingress.MaxShards)) }
}

// WithIngressTransport sets Config.IngressTransport (IngressPipe or
// IngressTCP); Start refuses a value Config.Validate would.
func WithIngressTransport(t string) Option {
	return func(s *Server) { s.cfg.IngressTransport = t }
}

// WithQuotaClock makes the node's quotas read the time from now instead of
// the wall clock, so a test can step time past a Retry-After.
func WithQuotaClock(now func() time.Time) Option {
	return func(s *Server) { s.quotaNow = now }
}
