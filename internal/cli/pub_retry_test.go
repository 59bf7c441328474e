package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/semaq"
)

// A publish no one acknowledges (a stream electing its leader) is tried
// again with the same message until acknowledged; one refused is not; one
// never acknowledged gives up saying why.
func TestRetryPublish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	timeout := fmt.Errorf("client: publish to ai.x: %w", context.DeadlineExceeded)
	n := 0
	ack, err := retryPublish(ctx, 10*time.Second, func(context.Context) (*semaq.PubAck, error) {
		if n++; n < 3 {
			return nil, timeout
		}
		return &semaq.PubAck{Stream: "AI", Sequence: 7}, nil
	})
	if err != nil || ack.Sequence != 7 || n != 3 {
		t.Fatalf("two timeouts, then an ack: %v, %+v after %d tries", err, ack, n)
	}

	n = 0
	_, err = retryPublish(ctx, 10*time.Second, func(context.Context) (*semaq.PubAck, error) {
		n++
		return nil, semaq.NewAPIError(semaq.ErrSchema, "payload does not match")
	})
	if !errors.Is(err, semaq.ErrSchema) || n != 1 {
		t.Fatalf("a refusal: %v after %d tries, want it at once", err, n)
	}

	n = 0
	_, err = retryPublish(ctx, 300*time.Millisecond, func(context.Context) (*semaq.PubAck, error) {
		n++
		return nil, timeout
	})
	if !errors.Is(err, context.DeadlineExceeded) || n < 2 || !strings.Contains(err.Error(), "no stream leader (an election in progress? semaq cluster status)") {
		t.Fatalf("never acknowledged: %v after %d tries", err, n)
	}
}
