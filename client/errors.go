package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client/internal/denial"
	"github.com/semaq/semaq/semaq"
)

// Errors the SDK returns besides the broker's *semaq.APIError values (which
// match the semaq.Err* sentinels).
var (
	// ErrSubscriptionDone is returned by Subscription.Next after the
	// subscription's message limit was reached or it was closed.
	ErrSubscriptionDone = errors.New("client: subscription done")
)

// reply is the union of a success body and an error body.
type reply struct {
	Error *semaq.APIError `json:"error"`
}

// request sends an API request and decodes the reply into out.
func (c *Client) request(ctx context.Context, subj string, body any, out any) error {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return fmt.Errorf("client: encoding request: %w", err)
		}
	}
	return c.requestData(ctx, subj, data, out)
}

// requestData sends a request whose body is data as it is (a plugin's
// chunk) and decodes the reply into out.
func (c *Client) requestData(ctx context.Context, subj string, data []byte, out any) error {
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	ctx, done := c.denied.Watch(ctx, subj)
	defer done()
	m, err := c.nc.RequestWithContext(ctx, subj, data)
	for pause := 20 * time.Millisecond; errors.Is(err, nats.ErrNoResponders) && time.Now().Before(c.startupUntil); pause = min(2*pause, 250*time.Millisecond) {
		// A broker that has just started: its API comes up shortly.
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		if ctx.Err() != nil {
			break
		}
		m, err = c.nc.RequestWithContext(ctx, subj, data)
	}
	if err != nil {
		if d := denial.Cause(ctx); d != nil {
			return d
		}
		return transportError(err, subj)
	}
	if err := decodeReply(m.Data, out); err != nil {
		return err
	}
	if lag := m.Header.Get(semaq.HdrClusterLagging); lag != "" && c.onLagging != nil {
		c.onLagging(subj, strings.Split(lag, ","))
	}
	return nil
}

func decodeReply(data []byte, out any) error {
	// The broker's error replies are {"error":{...}} (semaq.MarshalError)
	// and no success reply starts so: a success is decoded once.
	if out != nil && !bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), errorReplyPrefix) {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("client: decoding reply: %w", err)
		}
		return nil
	}
	var r reply
	if err := json.Unmarshal(data, &r); err != nil {
		return fmt.Errorf("client: broker sent a reply that is not JSON: %w", err)
	}
	if r.Error != nil {
		return r.Error
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("client: decoding reply: %w", err)
	}
	return nil
}

// errorReplyPrefix starts every error reply of the broker's.
var errorReplyPrefix = []byte(`{"error":`)

// transportError names what failed when the broker did not answer.
func transportError(err error, subj string) error {
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return semaq.NewAPIError(semaq.ErrUnavailable, "nothing answers on %s: is this a SemaQ broker?", subj)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("client: no reply on %s in time: %w", subj, err)
	default:
		return fmt.Errorf("client: %s: %w", subj, err)
	}
}
