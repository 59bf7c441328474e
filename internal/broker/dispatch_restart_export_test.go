package broker

import (
	"context"
	"time"
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
