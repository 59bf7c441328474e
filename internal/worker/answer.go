package worker

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/semaq"
)

// answerRetryPause is the pause between two tries of an answer.
const answerRetryPause = 250 * time.Millisecond

// retryAnswer gives an answer to the broker until it is taken or refused,
// or until the job's lease would have ended (until). In a cluster the
// node dispatching a queue can go; till the next one has taken over, an
// answer finds no dispatcher (unavailable) or none in time, and the lease
// it answers under survives the move (docs/queues.md): giving up would let
// the lease lapse and the job be served twice.
func retryAnswer(ctx context.Context, until time.Time, answer func(context.Context) error) error {
	for {
		err := answer(ctx)
		if err == nil || !answerRetriable(err) || !time.Now().Add(answerRetryPause).Before(until) {
			return err
		}
		t := time.NewTimer(answerRetryPause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// answerRetriable reports whether an answer may be taken if given again:
// nothing answered, or the dispatcher was starting.
func answerRetriable(err error) bool {
	return errors.Is(err, semaq.ErrUnavailable) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrNoResponders)
}
