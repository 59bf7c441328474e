package client

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client/internal/denial"
	"github.com/semaq/semaq/semaq"
)

// PublishOption sets part of a message's envelope. Options validate their
// arguments; Publish returns the first error before sending anything.
type PublishOption func(h nats.Header) error

func setToken(name, v string) PublishOption {
	return func(h nats.Header) error {
		if v == "" {
			return fmt.Errorf("client: %s: empty value", name)
		}
		h.Set(name, v)
		return nil
	}
}

// WithModel names the model the message is for (AI-Model).
func WithModel(model string) PublishOption { return setToken(semaq.HdrModel, model) }

// WithModelVersion names the model version (AI-Model-Version).
func WithModelVersion(v string) PublishOption { return setToken(semaq.HdrModelVersion, v) }

// WithAdapter names the LoRA adapter (AI-Adapter).
func WithAdapter(adapter string) PublishOption { return setToken(semaq.HdrAdapter, adapter) }

// WithTenant names the tenant the message is accounted to (AI-Tenant).
func WithTenant(tenant string) PublishOption { return setToken(semaq.HdrTenant, tenant) }

// WithIntent names what the message asks for (AI-Intent).
func WithIntent(intent string) PublishOption { return setToken(semaq.HdrIntent, intent) }

// WithSession ties the message to a session (AI-Session).
func WithSession(session string) PublishOption { return setToken(semaq.HdrSession, session) }

// WithMsgID sets the deduplication id (Nats-Msg-Id): a second publish with
// the same id within the stream's window is acknowledged as a duplicate and
// not stored again.
func WithMsgID(id string) PublishOption { return setToken(semaq.HdrMsgID, id) }

// WithPriority sets the priority (AI-Priority).
func WithPriority(p semaq.Priority) PublishOption {
	return func(h nats.Header) error {
		if p > semaq.PriorityLowest {
			return fmt.Errorf("client: WithPriority: %d is outside 0-9", p)
		}
		h.Set(semaq.HdrPriority, p.String())
		return nil
	}
}

// WithInferenceTimeout sets the time budget of the request (AI-Timeout); the
// broker turns it into an absolute AI-Deadline on arrival.
func WithInferenceTimeout(d time.Duration) PublishOption {
	return func(h nats.Header) error {
		if d <= 0 {
			return fmt.Errorf("client: WithInferenceTimeout: %s is not positive", d)
		}
		h.Set(semaq.HdrTimeout, d.String())
		return nil
	}
}

// WithDeadline sets an absolute deadline (AI-Deadline).
func WithDeadline(t time.Time) PublishOption {
	return func(h nats.Header) error {
		if t.IsZero() {
			return errors.New("client: WithDeadline: zero time")
		}
		h.Set(semaq.HdrDeadline, t.UTC().Format(time.RFC3339Nano))
		return nil
	}
}

// WithPromptTokens states the prompt's size in tokens (AI-Prompt-Tokens).
func WithPromptTokens(n int) PublishOption {
	return func(h nats.Header) error {
		if n < 0 {
			return fmt.Errorf("client: WithPromptTokens: %d is negative", n)
		}
		h.Set(semaq.HdrPromptTokens, strconv.Itoa(n))
		return nil
	}
}

// WithTTL makes the message expire from its stream after d (Nats-TTL; at
// least one second).
func WithTTL(d time.Duration) PublishOption {
	return func(h nats.Header) error {
		if d < time.Second {
			return fmt.Errorf("client: WithTTL: %s is under one second", d)
		}
		h.Set(semaq.HdrTTL, d.String())
		return nil
	}
}

// WithTraceParent sets the W3C trace context of the message.
func WithTraceParent(traceparent string) PublishOption {
	return setToken(semaq.HdrTraceParent, traceparent)
}

// WithHeader adds a header. Envelope headers set this way are validated by
// the broker like any other.
func WithHeader(name, value string) PublishOption {
	return func(h nats.Header) error {
		if name == "" {
			return errors.New("client: WithHeader: empty name")
		}
		h.Add(name, value)
		return nil
	}
}

// WithHeaders adds every header of hdr.
func WithHeaders(hdr map[string][]string) PublishOption {
	return func(h nats.Header) error {
		for k, vs := range hdr {
			for _, v := range vs {
				h.Add(k, v)
			}
		}
		return nil
	}
}

// Publish sends data to subject through the broker's ingress and waits for
// the acknowledgement: the message is stored when Publish returns nil. A
// message the ingress refuses returns a *semaq.APIError naming the problem
// (errors.Is(err, semaq.ErrEnvelope) for a bad envelope); a subject no stream
// captures returns semaq.ErrNoStream.
func (c *Client) Publish(ctx context.Context, subject string, data []byte, opts ...PublishOption) (*semaq.PubAck, error) {
	m := nats.NewMsg(subject)
	m.Data = data
	for _, opt := range opts {
		if err := opt(m.Header); err != nil {
			return nil, semaq.NewAPIError(semaq.ErrBadRequest, "%v", err)
		}
	}
	return c.PublishMsg(ctx, m)
}

// PublishMsg sends a prepared NATS message through the ingress and waits for
// the acknowledgement.
//
// A message without a cancel token (semaq.HdrCancelToken) gets a random
// one, returned in the ack's CancelToken: without auth, only it cancels a
// request (Cancel with CancelToken).
func (c *Client) PublishMsg(ctx context.Context, m *nats.Msg) (*semaq.PubAck, error) {
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	token := m.Header.Get(semaq.HdrCancelToken)
	if token == "" {
		token = newCancelToken()
		m.Header.Set(semaq.HdrCancelToken, token)
	}
	ack, err := c.publishMsg(ctx, m)
	if err != nil {
		return nil, err
	}
	ack.CancelToken = token
	c.cancels.keep(ack.Stream, ack.Sequence, m.Header.Get(semaq.HdrMsgID), token)
	return ack, nil
}

// publishMsg is PublishMsg without the cancel token: an exactly-once
// processor's output is a product, not a request anyone cancels.
func (c *Client) publishMsg(ctx context.Context, m *nats.Msg) (*semaq.PubAck, error) {
	injectIfAbsent(ctx, m.Header) // a publish inside a span continues its trace
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	ctx, done := c.denied.Watch(ctx, m.Subject)
	defer done()
	resp, err := c.nc.RequestMsgWithContext(ctx, m)
	if err != nil {
		if d := denial.Cause(ctx); d != nil {
			return nil, d
		}
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, semaq.NewAPIError(semaq.ErrNoStream, "no stream captures subject %s", m.Subject)
		}
		if errors.Is(err, nats.ErrMaxPayload) {
			return nil, semaq.NewAPIError(semaq.ErrTooLarge, "message on %s is larger than the server's limit of %d bytes", m.Subject, c.nc.MaxPayload())
		}
		return nil, fmt.Errorf("client: publish to %s: %w", m.Subject, err)
	}
	var ack struct {
		Error *semaq.APIError `json:"error"`
		semaq.PubAck
	}
	if err := json.Unmarshal(resp.Data, &ack); err != nil {
		return nil, fmt.Errorf("client: publish to %s: acknowledgement is not JSON: %w", m.Subject, err)
	}
	if ack.Error != nil {
		return nil, ack.Error
	}
	if ack.Stream == "" {
		return nil, fmt.Errorf("client: publish to %s: acknowledgement names no stream", m.Subject)
	}
	return &ack.PubAck, nil
}

// newCancelToken is 128 random bits, base64url.
func newCancelToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return base64.RawURLEncoding.EncodeToString(b[:])
}
