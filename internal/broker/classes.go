package broker

import (
	"context"
	"errors"
	"fmt"

	"github.com/semaq/semaq/internal/broker/classes"
	"github.com/semaq/semaq/internal/broker/clustersync"
	"github.com/semaq/semaq/internal/broker/dispatch"
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
		Applied: func(ctx context.Context, rev uint64) {
			s.syncer.Sync(ctx, clustersync.Request{Classes: rev})
		},
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

// classSlots is the classes as a dispatcher uses them (dispatch.Classes).
type classSlots struct{ c *classes.Classes }

func (a classSlots) Class(name string) (semaq.QueueClass, bool) { return a.c.Class(name) }
func (a classSlots) Held(class string) int                      { return a.c.Held(class) }
func (a classSlots) Release(ref dispatch.SlotRef)               { a.c.Release(classes.SlotRef(ref)) }

func (a classSlots) Acquire(ctx context.Context, class string, max int, s dispatch.Slot) (dispatch.SlotRef, error) {
	ref, err := a.c.Acquire(ctx, class, max, classes.Slot(s))
	if errors.Is(err, classes.ErrFull) {
		err = dispatch.ErrClassFull
	}
	return dispatch.SlotRef(ref), err
}

func (a classSlots) Extend(ctx context.Context, ref dispatch.SlotRef, s dispatch.Slot) (uint64, error) {
	return a.c.Extend(ctx, classes.SlotRef(ref), classes.Slot(s))
}

func (a classSlots) Owned(queue string) map[uint64]dispatch.SlotRef {
	out := map[uint64]dispatch.SlotRef{}
	for seq, ref := range a.c.Owned(queue) {
		out[seq] = dispatch.SlotRef(ref)
	}
	return out
}
