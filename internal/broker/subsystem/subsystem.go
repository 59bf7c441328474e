// Package subsystem is the contract between a SemaQ node and its parts.
//
// A node is a list of subsystems (internal/broker/subsystems.go): each is
// opened in order, given what it needs in its own Deps, and closed in the
// reverse order, so a part never outlives what it uses. A subsystem is a
// package of its own that imports neither the broker nor a sibling; what
// it needs of the node comes in its Deps as values and functions.
//
// This package holds what every subsystem shares: the Subsystem contract,
// the node's one goroutine gate (Gate), and the node's resources a
// subsystem declares (internal/reserved) reach the node through its entry
// in the list.
package subsystem

import (
	"context"

	"github.com/semaq/semaq/internal/broker/api"
)

// Subsystem is an open part of a node. Close stops it: it stops taking
// work, waits for every goroutine it started and releases what it opened;
// ctx bounds the wait. Close is called once, after every subsystem opened
// later has closed. Implementations are safe for concurrent use.
type Subsystem interface {
	Close(ctx context.Context) error
}

// API is a Subsystem that serves part of the $SQ.API management surface.
// Handlers is called once, after every subsystem has opened; the node
// subscribes them on its egress connection (docs/security.md).
type API interface {
	Handlers() api.Handlers
}

// Func is a Subsystem whose Close is a function: a part that is only a
// step of the node's start (a bucket made, a mapping added) and a step of
// its stop.
type Func func(ctx context.Context) error

// Close runs f; a nil Func closes nothing.
func (f Func) Close(ctx context.Context) error {
	if f == nil {
		return nil
	}
	return f(ctx)
}

// None is a Subsystem with nothing to close.
var None Subsystem = Func(nil)

// WithHandlers is a Subsystem that also serves h.
func WithHandlers(s Subsystem, h api.Handlers) Subsystem {
	return handlers{Subsystem: s, h: h}
}

type handlers struct {
	Subsystem
	h api.Handlers
}

func (h handlers) Handlers() api.Handlers { return h.h }
