package broker

// queuedJob reports whether a work queue of this node holds a request
// whose Nats-Msg-Id is id (queued, delayed or held): the token status API
// asks it last (tokens.Deps.QueuedJob). Each dispatcher's mu is taken
// alone, never with queues.mu.
func (s *Server) queuedJob(id string) bool {
	s.queues.mu.Lock()
	ds := make([]*dispatcher, 0, len(s.queues.all))
	for _, d := range s.queues.all {
		ds = append(ds, d)
	}
	s.queues.mu.Unlock()
	for _, d := range ds {
		d.mu.Lock()
		found := d.sched != nil && d.sched.ByID(id) != nil
		d.mu.Unlock()
		if found {
			return true
		}
	}
	return false
}
