package broker

import (
	"context"
	"fmt"

	"github.com/semaq/semaq/internal/broker/classes"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/semaq"
)

// openClasses opens the hardware classes of work queues and their slots
// (internal/broker/classes): before the ingress serves and the
// dispatchers start, both of which read them.
func openClasses(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	c, err := classes.Open(ctx, classes.Deps{
		Log: s.log.With("component", "classes"), JS: s.js, Replicas: s.ownReplicas(), Audit: s.audit,
		Gate: s.gate.Child("classes"),
	})
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	s.classes = c
	s.audits.Reads(c.AuditRead, semaq.AuditOpClassAdd, semaq.AuditOpClassDelete)
	s.metrics.SetClassSource(func() []metrics.ClassStat {
		var out []metrics.ClassStat
		for _, ci := range c.Stats() {
			out = append(out, metrics.ClassStat{Class: ci.Name, Held: ci.Held, Max: ci.MaxConcurrency})
		}
		return out
	})
	return c, nil
}
