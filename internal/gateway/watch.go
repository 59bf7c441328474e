package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// watch looks after a request while it waits for its answer: when no live
// worker has served its model for LostAfter, nothing will answer it (the
// queue would hand it to a worker that does not exist), so the gateway
// ends it itself rather than send keep-alives until the client's timeout:
// it withdraws the request from its queue, ends the token stream with
// worker_lost (every reader of the stream sees the same end) and cancels
// ctx with that error as its cause. A new worker of the model that comes
// up within LostAfter picks the request up as usual. The returned stop
// ends the watch and waits for it.
func (g *Gateway) watch(ctx context.Context, end context.CancelCauseFunc, model, id string) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(g.o.WatchInterval)
		defer t.Stop()
		var gone time.Time // when the model was first seen without a worker
		for {
			select {
			case <-t.C:
			case <-done:
				return
			case <-ctx.Done():
				return
			}
			live, err := g.modelLive(ctx, model, false)
			if err != nil || live {
				gone = time.Time{} // a registry that does not answer proves nothing
				continue
			}
			if gone.IsZero() {
				gone = time.Now()
			}
			if time.Since(gone) < g.o.LostAfter {
				continue
			}
			g.orphaned(ctx, end, model, id)
			return
		}
	})
	return func() {
		close(done)
		wg.Wait()
	}
}

// orphaned ends a request no worker can answer any more.
func (g *Gateway) orphaned(ctx context.Context, end context.CancelCauseFunc, model, id string) {
	te := &semaq.TokenError{Code: semaq.TokenErrWorkerLost,
		Message: fmt.Sprintf("no worker serves the model `%s` any more (the one serving this request stopped); retry the request", model)}
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	// Withdrawn, and its token stream ended by the broker (only the lease
	// holder, gone, could end it): replaying readers see worker_lost too.
	if _, err := g.c.Cancel(bg, g.queueFor(model), id, client.CancelEndStream(te)); err != nil && !errors.Is(err, semaq.ErrRequestNotFound) {
		g.log.Warn("withdrawing a request no worker serves", "id", id, "err", err)
	}
	g.log.Info("request ended: no live worker serves its model", "id", id, "model", model)
	end(te)
}

// endCause is the error a request's context was ended with by the
// gateway (orphaned), nil when it ended otherwise or not at all.
func endCause(ctx context.Context) *semaq.TokenError {
	te, _ := errors.AsType[*semaq.TokenError](context.Cause(ctx))
	return te
}
