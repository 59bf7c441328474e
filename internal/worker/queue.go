package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/semaq/semaq/semaq"
)

// modelQueue is the queue of one model and the health of its fetches,
// shared by the model's fetchers so that a failure is logged once, not
// once per fetcher and retry.
type modelQueue struct {
	model, name string

	mu       sync.Mutex // held while recreating the queue
	failing  bool
	failures int
}

// failed notes a failed fetch; only the first of a run is a warning.
func (q *modelQueue) failed(log *slog.Logger, err error) {
	q.mu.Lock()
	first := !q.failing
	q.failing = true
	q.failures++
	n := q.failures
	q.mu.Unlock()
	if first {
		log.Warn("fetch failed; retrying with backoff", "queue", q.name, "err", err)
	} else {
		log.Debug("fetch failed again", "queue", q.name, "failures", n, "err", err)
	}
}

// recovered notes a fetch that worked.
func (q *modelQueue) recovered(log *slog.Logger) {
	q.mu.Lock()
	was, n := q.failing, q.failures
	q.failing, q.failures = false, 0
	q.mu.Unlock()
	if was {
		log.Info("fetching again", "queue", q.name, "failures", n)
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

// addQueue creates the queue of model, keeping one that exists as it is.
func (w *Worker) addQueue(ctx context.Context, model string) error {
	_, err := w.c.AddQueue(ctx, w.queueConfig(model))
	if err != nil && !errors.Is(err, semaq.ErrStreamExists) {
		return fmt.Errorf("worker: queue for model %s: %w", model, err)
	}
	return nil
}

// recreate brings back q after a fetch found it gone. Of the model's
// fetchers that find it gone at once, the first recreates it and logs
// that; the others find it there.
func (w *Worker) recreate(ctx context.Context, q *modelQueue) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, err := w.c.QueueInfo(ctx, q.name); err == nil {
		return nil
	}
	_, err := w.c.AddQueue(ctx, w.queueConfig(q.model))
	switch {
	case err == nil:
		w.log.Warn("queue was gone (broker restarted or queue deleted); recreated it", "queue", q.name, "storage", w.cfg.QueueStorage)
		return nil
	case errors.Is(err, semaq.ErrStreamExists):
		// Something else created it meanwhile, or a stream that is not a
		// queue holds the name: the worker cannot fetch from that.
		if _, ierr := w.c.QueueInfo(ctx, q.name); ierr != nil {
			return fmt.Errorf("worker: %s exists but is not a queue the worker can fetch from (%w): %w", q.name, errNotAQueue, ierr)
		}
		return nil
	}
	return fmt.Errorf("worker: recreating queue %s: %w", q.name, err)
}

// errNotAQueue: the queue's name is taken by a stream that is not a queue.
var errNotAQueue = errors.New("the name is taken by a stream that is not a queue")

// permanent says whether err, from recreating a queue, will not go away by
// retrying: the worker then stops with it. Anything else (a broker that is
// restarting answers all sorts of errors) is retried with backoff; a
// configuration the broker refuses already stopped the worker at start.
func permanent(err error) bool {
	return errors.Is(err, errNotAQueue)
}
