// Package client is the Go SDK for SemaQ.
//
// A Client is one connection to a SemaQ broker over the NATS protocol. It
// publishes through the semantic ingress (envelope options set the AI
// headers), subscribes with acknowledgements, and manages streams.
//
//	c, err := client.Connect(ctx, "nats://127.0.0.1:4222")
//	ack, err := c.Publish(ctx, "ai.inference.llm", body,
//		client.WithModel("llama3-70b"), client.WithPriority(semaq.PriorityHigh))
//
// Every method that talks to the broker takes a context first; a context
// without a deadline gets the client's default timeout. Errors returned by
// the broker are *semaq.APIError values and match the semaq.Err* sentinels
// with errors.Is.
package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/semaq/semaq/client/internal/denial"
	"github.com/semaq/semaq/internal/identity"
	"github.com/semaq/semaq/semaq"
	"go.opentelemetry.io/otel/trace"
)

// DefaultURL is where Connect goes when given no URL and SEMAQ_URL is unset.
const DefaultURL = "nats://127.0.0.1:4222"

// Client is a connection to a SemaQ broker. It is safe for concurrent use.
// Close releases it; subscriptions made from it stop working.
type Client struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	timeout time.Duration
	schemas schemaCache // schemas read by id; ids are immutable
	work    worker      // this client as a work-queue worker (queue.go)

	// tokens is the async publisher shared by token writers (tokens.go).
	tokens tokenPublisher
	// cancels are the cancel tokens of this client's recent publishes
	// (cancel_tokens.go).
	cancels cancelTokens
	// tracerProvider starts Msg.StartSpan spans; nil means the global one.
	tracerProvider trace.TracerProvider
	// denied fails requests the server's permissions refuse (package
	// client/internal/denial).
	denied *denial.Set
	// onLagging hears of changes some nodes had not applied (WithLagging).
	onLagging func(subject string, nodes []string)
	// startupUntil: until then, a request nothing answers is asked again
	// (WithStartupWait).
	startupUntil time.Time
	// tokenTenant is the tenant token this client reads token streams
	// under, once the broker said (tokens_read.go).
	tokenTenantMu sync.Mutex
	tokenTenant   string
}

type connectOptions struct {
	natsOpts       []nats.Option
	timeout        time.Duration
	tracerProvider trace.TracerProvider
	// keyUser is the user of WithKey, user WithUser's name, nkey whether
	// WithNkeySeed was given (credentials.go).
	keyUser, user string
	nkey          bool
	onLagging     func(subject string, nodes []string)
	startupWait   time.Duration
}

// WithStartupWait makes the client ask again, for up to d after it
// connected, a management request nothing answers yet: a broker that has
// just started listens before its API is up. After d such a request fails
// as before ("nothing answers on …: is this a SemaQ broker?"). The CLI
// uses 5 s, so a command typed right after `semaq serve &` works.
func WithStartupWait(d time.Duration) Option {
	return func(o *connectOptions) error {
		if d < 0 || d > time.Minute {
			return fmt.Errorf("client: WithStartupWait: %v is outside 0..1m", d)
		}
		o.startupWait = d
		return nil
	}
}

// Option configures Connect. Options validate their arguments and may fail.
type Option func(*connectOptions) error

// WithNATSOptions passes options through to the NATS connection (TLS,
// credentials, an in-process server, reconnect policy...). For a broker
// serving TLS: nats.RootCAs("ca.pem") trusts its CA, and
// nats.ClientCert("client.pem", "client-key.pem") presents a client
// certificate when it requires one.
func WithNATSOptions(opts ...nats.Option) Option {
	return func(o *connectOptions) error {
		o.natsOpts = append(o.natsOpts, opts...)
		return nil
	}
}

// WithKey authenticates with a key of a broker started with auth on
// (`semaq user add` prints one). The key carries the user's name; the
// client's reply inbox becomes _INBOX_<name>, the only inbox the broker
// lets that user listen on. An empty key adds nothing, so a key read from
// an unset environment variable connects as before.
func WithKey(key string) Option {
	return func(o *connectOptions) error {
		if key == "" {
			return nil
		}
		k, err := identity.ParseKey(key)
		if err != nil {
			return errors.New("client: WithKey: not a SemaQ key (sq_<name>_<id>_<secret>)")
		}
		o.natsOpts = append(o.natsOpts, nats.Token(key), nats.CustomInboxPrefix(semaq.UserInboxPrefix+k.Name))
		o.keyUser = k.Name
		return nil
	}
}

// WithLagging calls fn when the broker answers a management call (a
// stream or queue add, a schema write, a route rule, a user change) that
// some nodes of a cluster had not applied when it returned: they apply it
// late (semaq.HdrClusterLagging). The call itself succeeded. fn runs on
// the caller's goroutine, before the call returns.
func WithLagging(fn func(subject string, nodes []string)) Option {
	return func(o *connectOptions) error {
		if fn == nil {
			return errors.New("client: WithLagging: nil function")
		}
		o.onLagging = fn
		return nil
	}
}

// WithName names the connection, as the broker's monitoring shows it.
func WithName(name string) Option {
	return func(o *connectOptions) error {
		if name == "" {
			return errors.New("client: WithName: empty name")
		}
		o.natsOpts = append(o.natsOpts, nats.Name(name))
		return nil
	}
}

// WithTimeout sets the timeout applied to calls whose context has no
// deadline. The default is five seconds.
func WithTimeout(d time.Duration) Option {
	return func(o *connectOptions) error {
		if d <= 0 {
			return fmt.Errorf("client: WithTimeout: %s is not positive", d)
		}
		o.timeout = d
		return nil
	}
}

// Connect dials a broker. An empty url means $SEMAQ_URL, then DefaultURL.
// The dial is bounded by ctx.
func Connect(ctx context.Context, url string, opts ...Option) (*Client, error) {
	o := connectOptions{timeout: 5 * time.Second}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	if err := o.checkCredentials(); err != nil {
		return nil, err
	}
	if url == "" {
		url = os.Getenv("SEMAQ_URL")
	}
	if url == "" {
		url = DefaultURL
	}
	natsOpts := []nats.Option{nats.Name("semaq-client")}
	if dl, ok := ctx.Deadline(); ok {
		natsOpts = append(natsOpts, nats.Timeout(time.Until(dl)))
	}
	natsOpts = append(natsOpts, o.natsOpts...)
	denied := &denial.Set{}
	natsOpts = append(natsOpts, denied.Option()) // last: it wraps the user's error handler
	type result struct {
		nc  *nats.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		nc, err := nats.Connect(url, natsOpts...)
		done <- result{nc, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		go func() {
			if r := <-done; r.nc != nil {
				r.nc.Close()
			}
		}()
		return nil, fmt.Errorf("client: connecting to %s: %w", url, ctx.Err())
	}
	if r.err != nil {
		return nil, fmt.Errorf("client: connecting to %s: %w", url, r.err)
	}
	js, err := jetstream.New(r.nc)
	if err != nil {
		r.nc.Close()
		return nil, fmt.Errorf("client: %w", err)
	}
	c := &Client{nc: r.nc, js: js, timeout: o.timeout, tracerProvider: o.tracerProvider, denied: denied, onLagging: o.onLagging}
	if o.startupWait > 0 {
		c.startupUntil = time.Now().Add(o.startupWait)
	}
	return c, nil
}

// Conn is the underlying NATS connection, for features the SDK does not
// wrap. Closing it closes the client.
func (c *Client) Conn() *nats.Conn { return c.nc }

// Close closes the connection. Pending publishes are flushed first while
// the connection is up; a disconnected client closes at once.
func (c *Client) Close() {
	if c.nc.IsClosed() {
		return
	}
	if c.nc.IsConnected() {
		_ = c.nc.FlushTimeout(c.timeout)
	}
	c.nc.Close()
}

// withTimeout gives ctx the client's default timeout if it has no deadline.
func (c *Client) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, c.timeout)
}
