package broker

import (
	"time"

	"github.com/semaq/semaq/internal/broker/dispatch/sched"
)

// DispatchIndexRetained reports how many requests queue's dispatcher
// indexes and how many bytes of strings and buffers they keep alive
// (payloads and stored headers would show here).
func DispatchIndexRetained(s *Server, queue string) (jobs, retained int) {
	d := s.dispatcherOf(queue)
	if d == nil {
		return 0, 0
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.sched.Each(func(j *sched.Job) {
		jobs++
		retained += j.Retained()
	})
	return jobs, retained
}

// DispatchEgressPublish sends data to subject on queue's egress connection
// (the one client-addressed messages leave by) and waits for the server to
// have processed it.
func DispatchEgressPublish(s *Server, queue, subject string, data []byte) error {
	d := s.dispatcherOf(queue)
	if d == nil {
		return errNoDispatcher
	}
	if err := d.out.Publish(subject, data); err != nil {
		return err
	}
	return d.out.FlushTimeout(5 * time.Second)
}

var errNoDispatcher = errorString("no dispatcher")

type errorString string

func (e errorString) Error() string { return string(e) }
