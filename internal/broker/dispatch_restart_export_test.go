package broker

import (
	"context"
	"time"

	"github.com/semaq/semaq/internal/broker/dispatch"
	"github.com/semaq/semaq/semaq"
)

// RestartDispatcher stops queue's dispatcher and starts it anew on s, as a
// change of the queue stream's leader does: nothing of the old
// dispatcher's memory survives.
func RestartDispatcher(s *Server, queue string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ok, err := s.streams.RestartDispatcher(ctx, queue)
	if !ok {
		return errNoDispatcher
	}
	return err
}

// RivalDispatcher is a second dispatcher of a queue beside the one its
// node runs.
type RivalDispatcher struct{ d *dispatch.Dispatcher }

// StartRivalDispatcher starts a second dispatcher of the queue qc on s,
// beside the one the node runs: what a cluster has for a while when a
// partition or a pause cuts off the node dispatching a queue, whose
// dispatcher serves on until it hears that its node no longer leads the
// queue's stream, while the new leader's has started.
func StartRivalDispatcher(s *Server, qc semaq.QueueConfig) (*RivalDispatcher, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The node's dispatcher makes its consumer anew once the rival's start
	// deleted it, and the two may collide on it: tried again, as the node
	// does a dispatcher that failed to start.
	var err error
	for range 5 {
		var d *dispatch.Dispatcher
		if d, err = dispatch.Start(ctx, qc, dispatchDeps(s, nil)); err == nil {
			return &RivalDispatcher{d}, nil
		}
	}
	return nil, err
}

// Status is the rival's view of its queue.
func (r *RivalDispatcher) Status() semaq.QueueStatus { return r.d.Status(time.Now()) }

// Close stops the rival.
func (r *RivalDispatcher) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.d.Close(ctx)
}
