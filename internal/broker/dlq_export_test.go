package broker

import "github.com/nats-io/nats.go"

// HandleDLQAdvisory runs the dead-letter advisory handler on m, as if the
// NATS server had sent it, and returns when it is done.
func HandleDLQAdvisory(s *Server, m *nats.Msg) { s.dlq.HandleAdvisory(m) }
