package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/semaq/semaq/semaq"
)

// modelQueue is where one model's requests wait, and the health of its
// fetches, shared by the model's fetchers so that a failure is logged
// once, not once per fetcher and retry. The queue is the one that
// captures the model's subject (ai.infer.<model>): a queue the operator
// made for several models (ai.infer.>), whose requests the fetches then
// filter by subject, or else INFER_<model>, which the worker creates.
type modelQueue struct {
	model, subject string

	mu       sync.Mutex // held while finding or recreating the queue
	name     string
	failing  bool
	failures int
}

// queue is the name of the queue the model's fetchers ask.
func (q *modelQueue) queue() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.name
}

// failed notes a failed fetch; only the first of a run is a warning.
func (q *modelQueue) failed(log *slog.Logger, err error) {
	q.mu.Lock()
	first := !q.failing
	q.failing = true
	q.failures++
	n, name := q.failures, q.name
	q.mu.Unlock()
	if first {
		log.Warn("fetch failed; retrying with backoff", "queue", name, "model", q.model, "err", err)
	} else {
		log.Debug("fetch failed again", "queue", name, "model", q.model, "failures", n, "err", err)
	}
}

// recovered notes a fetch that worked.
func (q *modelQueue) recovered(log *slog.Logger) {
	q.mu.Lock()
	was, n, name := q.failing, q.failures, q.name
	q.failing, q.failures = false, 0
	q.mu.Unlock()
	if was {
		log.Info("fetching again", "queue", name, "model", q.model, "failures", n)
	}
}

func (w *Worker) queueConfig(model string) semaq.QueueConfig {
	return semaq.QueueConfig{
		Name:        semaq.InferQueue(model),
		Description: "inference requests for model " + model,
		Subjects:    []string{semaq.InferSubject(model)},
		Storage:     w.cfg.QueueStorage,
		AckWait:     w.cfg.AckWait,
	}
}

// errNotAQueue: the model's subject, or its queue's name, is taken by a
// stream that is not a queue.
var errNotAQueue = errors.New("not a queue")

// find sets q.name to the queue that captures the model's subject,
// creating INFER_<model> when nothing does; created says it did. q.mu is
// held.
func (w *Worker) find(ctx context.Context, q *modelQueue) (created bool, err error) {
	for range 2 {
		name, err := w.c.StreamBySubject(ctx, q.subject)
		switch {
		case err == nil:
			if _, err := w.c.QueueInfo(ctx, name); err != nil {
				// A queue is a workqueue stream; one that is not served as
				// a queue for a moment (a broker restarting) is not
				// mistaken for a plain stream.
				if si, serr := w.c.StreamInfo(ctx, name); errors.Is(err, semaq.ErrQueueNotFound) && serr == nil && si.Config.Retention != "workqueue" {
					return false, fmt.Errorf("model %s: its subject %s is captured by stream %s, which is %w: "+
						"a worker takes requests from queues only; remove the stream, narrow its subjects, "+
						"or make a queue that captures %s (semaq queue add)", q.model, q.subject, name, errNotAQueue, q.subject)
				}
				return false, fmt.Errorf("model %s: queue %s: %w", q.model, name, err)
			}
			q.name = name
			return false, nil
		case !errors.Is(err, semaq.ErrNoStream):
			return false, fmt.Errorf("model %s: finding the queue of %s: %w", q.model, q.subject, err)
		}
		cfg := w.queueConfig(q.model)
		_, err = w.c.AddQueue(ctx, cfg)
		switch {
		case err == nil:
			q.name = cfg.Name
			return true, nil
		case errors.Is(err, semaq.ErrStreamExists):
			// Another worker made it meanwhile (look again), or a stream of
			// that name captures other subjects.
			if _, ierr := w.c.QueueInfo(ctx, cfg.Name); ierr != nil {
				return false, fmt.Errorf("model %s: the name %s is taken by a stream that is %w: %w", q.model, cfg.Name, errNotAQueue, err)
			}
		case errors.Is(err, semaq.ErrForbidden):
			// A worker key serves queues; making one is an admin's.
			return false, fmt.Errorf("model %s: no queue captures %s, and this worker may not make one (%w): an admin must run `semaq queue add %s --subjects %s`",
				q.model, q.subject, err, cfg.Name, q.subject)
		default:
			return false, fmt.Errorf("model %s: %w", q.model, err)
		}
	}
	return false, fmt.Errorf("model %s: queue %s exists but does not capture %s", q.model, semaq.InferQueue(q.model), q.subject)
}

// addQueue finds (or creates) the queue of q's model at start.
func (w *Worker) addQueue(ctx context.Context, q *modelQueue) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, err := w.find(ctx, q); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if q.name != semaq.InferQueue(q.model) {
		w.log.Info("using a queue shared with other models", "model", q.model, "queue", q.name, "subject", q.subject)
	}
	return nil
}

// recreate brings back q's queue after a fetch found it gone. Of the
// model's fetchers that find it gone at once, the first recreates it (or
// finds another queue that now captures the model's subject) and logs
// that; the others find it there.
func (w *Worker) recreate(ctx context.Context, q *modelQueue) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, err := w.c.QueueInfo(ctx, q.name); err == nil {
		return nil
	}
	was := q.name
	created, err := w.find(ctx, q)
	switch {
	case err != nil:
		return fmt.Errorf("worker: %w", err)
	case created:
		w.log.Warn("queue was gone (broker restarted or queue deleted); recreated it", "queue", q.name, "was", was, "storage", w.cfg.QueueStorage)
	default:
		w.log.Warn("queue was gone; using the queue that captures the model's subject", "queue", q.name, "was", was, "model", q.model)
	}
	return nil
}

// permanent says whether err, from recreating a queue, will not go away by
// retrying: the worker then stops with it. Anything else (a broker that is
// restarting answers all sorts of errors) is retried with backoff; a
// configuration the broker refuses already stopped the worker at start.
func permanent(err error) bool {
	return errors.Is(err, errNotAQueue)
}
