package jsutil

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Bounds of Retry: one attempt's time, the pause between attempts, and the
// whole retry when ctx has no earlier deadline.
const (
	retryAttempt  = 5 * time.Second
	retryPauseMin = 50 * time.Millisecond
	retryPauseMax = time.Second
	retryTotal    = 60 * time.Second
)

// JetStream's error codes for a cluster that cannot serve the request yet.
const (
	errNoPeers    jetstream.ErrorCode = 10005 // no suitable peers: a peer is not known online yet
	errNotAvail   jetstream.ErrorCode = 10008 // JetStream system temporarily unavailable
	errNotLeader  jetstream.ErrorCode = 10009 // the request reached a former leader
	errIncomplete jetstream.ErrorCode = 10004 // incomplete results
	errNotActive  jetstream.ErrorCode = 10006 // the cluster is not active yet
)

// Retry runs fn until it succeeds or fails with an error that is not
// transient, each attempt bounded by a few seconds. Transient are the
// answers of a JetStream cluster that is electing a leader or has not heard
// of every peer yet, and a request lost with a leader that stepped down (no
// answer in time, no responders). A single node gives none of these, so
// there Retry costs nothing. Retrying stops at ctx's end or after a minute.
func Retry(ctx context.Context, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, retryTotal)
	defer cancel()
	pause := retryPauseMin
	for {
		actx, acancel := context.WithTimeout(ctx, retryAttempt)
		err := fn(actx)
		acancel()
		if err == nil || !transient(err) || ctx.Err() != nil {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, retryPauseMax)
	}
}

// retryable marks an error its caller knows to be transient.
type retryable struct{ error }

func (r retryable) Unwrap() error { return r.error }

// transient reports whether err may pass on its own in a cluster.
func transient(err error) bool {
	if errors.As(err, new(retryable)) {
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case errNoPeers, errNotAvail, errNotLeader, errIncomplete, errNotActive:
			return true
		}
		return apiErr.Code == http.StatusServiceUnavailable
	}
	// nats.go's older JetStream API (under KV watchers) has its own type.
	var legacy *nats.APIError
	if errors.As(err, &legacy) {
		switch jetstream.ErrorCode(legacy.ErrorCode) {
		case errNoPeers, errNotAvail, errNotLeader, errIncomplete, errNotActive:
			return true
		}
		return legacy.Code == http.StatusServiceUnavailable
	}
	return false
}
