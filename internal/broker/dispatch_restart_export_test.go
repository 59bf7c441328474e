package broker

import (
	"context"
	"time"
)

// RestartDispatcher stops queue's dispatcher and starts it anew on s, as a
// change of the queue stream's leader does: nothing of the old
// dispatcher's memory survives.
func RestartDispatcher(s *Server, queue string) error {
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	d := s.dispatcherOf(queue)
	if d == nil {
		return errNoDispatcher
	}
	cfg := d.Config()
	s.unserveQueue(queue)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return s.serveQueue(ctx, cfg)
}
