package broker

// queuedJob reports whether a work queue of this node holds a request
// whose Nats-Msg-Id is id (queued, delayed or held), and its tenant: the
// token status API asks it last (tokens.Deps.QueuedJob). Each
// dispatcher's mu is taken alone, never with queues.mu.
func (s *Server) queuedJob(id string) (tenant string, ok bool) {
	for _, d := range s.dispatchers() {
		if tenant, ok := d.Holds(id); ok {
			return tenant, true
		}
	}
	return "", false
}
