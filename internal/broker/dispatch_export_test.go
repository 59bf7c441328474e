package broker

import (
	"time"

	"github.com/semaq/semaq/internal/broker/dispatch/sched"
)

// DispatchIndexRetained reports how many requests queue's dispatcher
// indexes and how many bytes of strings and buffers they keep alive
// (payloads and stored headers would show here).
func DispatchIndexRetained(s *Server, queue string) (jobs, retained int) {
	d := s.streams.Dispatcher(queue)
	if d == nil {
		return 0, 0
	}
	d.Each(func(j *sched.Job) {
		jobs++
		retained += j.Retained()
	})
	return jobs, retained
}

// DispatchEgressPublish sends data to subject on an egress connection made
// as the node makes queue's dispatcher's (Deps.Egress: the connection
// client-addressed messages leave by) and waits for the server to have
// processed it.
func DispatchEgressPublish(s *Server, queue, subject string, data []byte) error {
	if s.streams.Dispatcher(queue) == nil {
		return errNoDispatcher
	}
	nc, err := dispatchDeps(s, nil).Egress()
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := nc.Publish(subject, data); err != nil {
		return err
	}
	return nc.FlushTimeout(5 * time.Second)
}

var errNoDispatcher = errorString("no dispatcher")

type errorString string

func (e errorString) Error() string { return string(e) }
