// Package node is SemaQ's composition root: it makes a broker
// (internal/broker) and wires the HTTP front door beside it — the REST and
// SSE API (internal/httpapi), the schema registry's REST API and the
// OpenAI-compatible gateway (internal/gateway), all on one connection of
// the SDK (client) as the front user. The broker imports none of them.
package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/gateway"
	"github.com/semaq/semaq/internal/httpapi"
	"github.com/semaq/semaq/internal/httpauth"
)

// New makes a node: a broker that, once started, serves HTTP on the
// configured address (none when it is empty). opts add to the broker's
// options (an operator for a benchmark, policy steps).
func New(cfg broker.Config, log *slog.Logger, opts ...broker.Option) (*broker.Server, error) {
	return broker.New(cfg, log, append([]broker.Option{broker.WithFrontDoor(StartFrontDoor)}, opts...)...)
}

// frontDoor is the running HTTP side of a node.
type frontDoor struct {
	ln  net.Listener
	srv *http.Server
	gw  *gateway.Gateway
	c   *client.Client
	// pool holds the connections of HTTP callers' keys, auth on only.
	pool *httpauth.Pool
}

func (f *frontDoor) Addr() string { return f.ln.Addr().String() }

func (f *frontDoor) Shutdown(ctx context.Context) error {
	err := f.srv.Shutdown(ctx)
	// Responses that ended withdraw their requests over f.c: let them
	// finish before it closes.
	err = errors.Join(err, f.gw.Close(ctx))
	if f.pool != nil {
		f.pool.Close()
	}
	f.c.Close()
	return err
}

// StartFrontDoor listens on d.Config.HTTP and serves the front door, over
// HTTPS when d.TLS is set. It is the broker.FrontDoorFunc of New.
func StartFrontDoor(ctx context.Context, d broker.FrontDoorDeps) (broker.FrontDoor, error) {
	c, err := client.Connect(ctx, "", client.WithNATSOptions(d.Connect...))
	if err != nil {
		return nil, fmt.Errorf("broker: http front door connection: %w", err)
	}
	ln, err := net.Listen("tcp", d.Config.HTTP)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("broker: http: %w", err)
	}
	cfg := d.Config
	var authn *httpapi.Auth
	var pool *httpauth.Pool
	if d.Config.Auth {
		if d.Identity == nil {
			c.Close()
			ln.Close()
			return nil, errors.New("broker: http: auth is on but the front door was given no identity store")
		}
		base := d.KeyConnect
		pool = httpauth.NewPool(func(ctx context.Context, key string) (*client.Client, error) {
			return client.Connect(ctx, "", client.WithNATSOptions(base...), client.WithKey(key))
		}, httpauth.DefaultMaxConns, httpauth.DefaultIdleTimeout)
		authn = &httpapi.Auth{Identity: d.Identity, Pool: pool, Failed: d.AuthFailed}
		if d.AuthLimiter != nil {
			authn.Limiter = d.AuthLimiter
		}
	}
	gwOpts := gateway.Options{Client: c, Log: d.Log.With("component", "gateway"), APIKeys: cfg.GatewayAPIKeys,
		Metrics: d.Metrics, Tracing: d.Tracing,
		SessionBudget: cfg.GatewaySessionBudget, DegradedPolicy: cfg.GatewayDegradedPolicy, ModelWait: cfg.GatewayModelWait}
	if err := gwOpts.Validate(); err != nil {
		c.Close()
		ln.Close()
		return nil, err
	}
	gw := gateway.New(gwOpts)
	h := httpapi.New(httpapi.Options{
		Client:         c,
		Log:            d.Log.With("component", "http"),
		MaxHeaderBytes: cfg.MaxHeaderBytes,
		MaxBody:        cfg.MaxPayload,
		Ready:          d.Ready,
		Routes: func(mux *http.ServeMux) {
			d.Routes(mux) // the schema registry's REST API
			gw.Register(mux)
		},
		Metrics:        d.Metrics,
		Tracing:        d.Tracing,
		AllowedHosts:   cfg.HTTPAllowedHosts,
		AllowedOrigins: cfg.HTTPAllowedOrigins,
		InferKeys:      cfg.GatewayAPIKeys,
		Auth:           authn,
	})
	srv := httpapi.NewServer(h, httpapi.ServerConfig{MaxHeaderBytes: max(64<<10, 2*cfg.MaxHeaderBytes)})
	// The server's own complaints (failed TLS handshakes, accept errors)
	// go to the node's log, not the standard logger.
	srv.ErrorLog = slog.NewLogLogger(d.Log.With("component", "http").Handler(), slog.LevelWarn)
	// Event streams never finish on their own; end them when shutting down.
	srv.RegisterOnShutdown(h.CloseStreams)
	srv.RegisterOnShutdown(gw.CloseStreams)
	log := d.Log
	l := httpapi.LimitListener(ln, cfg.HTTPConnLimit())
	if d.TLS != nil {
		// Handshakes happen in the server's connection goroutines, bounded
		// by its header timeout; the cap counts them.
		l = tls.NewListener(l, d.TLS)
	}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", "err", err)
		}
	}()
	return &frontDoor{ln: ln, srv: srv, gw: gw, c: c, pool: pool}, nil
}
