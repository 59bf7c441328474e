// Package httpapi is SemaQ's HTTP front door: health, publish, subscribe as
// Server-Sent Events, and stream listing. It is a client of the broker like
// any other: publishes go through the same ingress as NATS publishes, so the
// two front doors accept and refuse exactly the same messages.
//
// Every answer that is not an event stream is JSON, errors included:
// {"error":{"code":<HTTP status>,"err_code":<SemaQ code>,"message":"..."}}.
// docs/http.md is the user-facing contract.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/internal/telemetry"
	"github.com/semaq/semaq/semaq"
)

// Options configures the handler.
type Options struct {
	// Client is the broker connection the handler uses. Required.
	Client *client.Client
	// Log receives request errors; nil discards them.
	Log *slog.Logger
	// MaxHeaderBytes bounds the forwarded headers of one publish, counted
	// as the ingress counts them; 0 means semaq.DefaultMaxHeaderBytes. Set
	// it to the broker's limit so both front doors refuse the same messages.
	MaxHeaderBytes int
	// MaxBody bounds a publish body; 0 means 1 MiB.
	MaxBody int
	// BodyTimeout bounds reading a publish body, on servers that support
	// per-request deadlines; 0 means one minute.
	BodyTimeout time.Duration
	// WriteTimeout bounds writing the answer of a request that is not an
	// event stream; 0 means DefaultWriteTimeout.
	WriteTimeout time.Duration
	// Ready reports whether the node can serve; nil means always.
	Ready func() error
	// Routes, when set, registers more endpoints on the handler's mux (the
	// schema registry's Confluent-compatible paths). They answer for
	// themselves; the front door's JSON 404/405 covers the rest.
	Routes func(*http.ServeMux)
	// Metrics, when set, is served at GET /metrics and records every
	// request by route and status (observe.go).
	Metrics *metrics.Metrics
	// Tracing, when set, traces publishes: a server span continuing the
	// request's traceparent, carried on to the ingress.
	Tracing *telemetry.Tracing

	// AllowedHosts are the Host names served besides localhost and IP
	// literals ("broker.example.com" for any port, "broker:8080" for one);
	// any other Host is refused (DNS rebinding, guard.go).
	AllowedHosts []string
	// AllowedOrigins are the browser origins ("https://app.example.com")
	// allowed to send cross-origin requests; they also get CORS headers.
	AllowedOrigins []string
	// Auth, when set, makes every request but GET /healthz authenticate
	// with a key of the identity store and act with its rights (auth.go).
	Auth *Auth
	// InferKeys, when set, are the OpenAI gateway's bearer keys (key to
	// tenant): a publish to the gateway's subjects (ai.infer.>) must bring
	// one, and is stamped with its tenant.
	InferKeys map[string]string
	// MaxStreams bounds the event streams (subscribe and tokens) open at
	// once; 0 means DefaultMaxStreams. At the cap a new one is 503.
	MaxStreams int
	// StreamBufferBytes bounds what one event stream holds in memory
	// beyond one message; 0 means DefaultStreamBufferBytes.
	StreamBufferBytes int
	// StreamWriteTimeout bounds writing one event to a client; a client
	// that reads slower than that is dropped. 0 means
	// DefaultStreamWriteTimeout.
	StreamWriteTimeout time.Duration
	// MaxDurables bounds the durable subscriptions made over HTTP that
	// exist at once on the node; 0 means DefaultMaxDurables.
	MaxDurables int
	// DurableInactive is how long a durable subscription made over HTTP
	// lives without a reader; 0 means DefaultDurableInactive.
	DurableInactive time.Duration
}

// Handler is the HTTP front door. It is safe for concurrent use.
type Handler struct {
	opts Options
	log  *slog.Logger
	mux  *http.ServeMux

	// closing is cancelled by CloseStreams; event streams end with it.
	closing      context.Context
	closeStreams context.CancelFunc

	// js is the JetStream API on the broker connection, for the consumers
	// of event streams (subscribe.go, durables.go).
	js jetstream.JetStream

	// streamSlots holds one token per open event stream (MaxStreams).
	streamSlots chan struct{}
	// durableMu serialises the creation of HTTP durables, so two requests
	// cannot both pass the MaxDurables count.
	durableMu sync.Mutex
}

// New returns the HTTP handler of the front door.
func New(o Options) *Handler {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.MaxBody <= 0 {
		o.MaxBody = 1 << 20
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = time.Minute
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = semaq.DefaultMaxHeaderBytes
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.MaxStreams <= 0 {
		o.MaxStreams = DefaultMaxStreams
	}
	if o.StreamBufferBytes <= 0 {
		o.StreamBufferBytes = DefaultStreamBufferBytes
	}
	if o.StreamWriteTimeout <= 0 {
		o.StreamWriteTimeout = DefaultStreamWriteTimeout
	}
	if o.MaxDurables <= 0 {
		o.MaxDurables = DefaultMaxDurables
	}
	if o.DurableInactive <= 0 {
		o.DurableInactive = DefaultDurableInactive
	}
	h := &Handler{opts: o, log: o.Log, mux: http.NewServeMux(), streamSlots: make(chan struct{}, o.MaxStreams)}
	if o.Client != nil {
		h.js, _ = jetstream.New(o.Client.Conn()) // fails only for a nil conn
	}
	h.closing, h.closeStreams = context.WithCancel(context.Background())
	h.mux.HandleFunc("GET /healthz", h.healthz)
	h.mux.HandleFunc("POST /api/v1/publish", h.needsClient(h.publishBatch))
	h.mux.HandleFunc("POST /api/v1/publish/{subject}", h.needsClient(h.publish))
	h.mux.HandleFunc("GET /api/v1/subscribe/{subject}", h.needsClient(h.subscribe))
	h.mux.HandleFunc("POST /api/v1/durables", h.needsClient(h.durableCreate))
	h.mux.HandleFunc("DELETE /api/v1/durables/{stream}/{name}", h.needsClient(h.durableDelete))
	h.mux.HandleFunc("GET /api/v1/streams", h.needsClient(h.streams))
	h.mux.HandleFunc("GET /api/v1/streams/{name}", h.needsClient(h.stream))
	h.mux.HandleFunc("GET /api/v1/tokens/{id}", h.needsClient(h.tokens))
	h.mux.HandleFunc("GET /api/v1/queues", h.needsClient(h.queues))
	h.mux.HandleFunc("GET /api/v1/queues/{name}", h.needsClient(h.queue))
	h.mux.HandleFunc("POST /api/v1/queues/{name}/fetch", h.needsClient(h.queueFetch))
	h.mux.HandleFunc("POST /api/v1/queues/{name}/answer", h.needsClient(h.queueAnswer))
	h.mux.HandleFunc("POST /api/v1/queues/{name}/cancel/{id}", h.needsClient(h.queueCancel))
	h.mux.HandleFunc("GET /api/v1/audit", h.needsClient(h.audit))
	h.mux.HandleFunc("GET /api/v1/sessions", h.needsClient(h.sessionList))
	h.mux.HandleFunc("GET /api/v1/sessions/{id}", h.needsClient(h.sessionGet))
	h.mux.HandleFunc("PUT /api/v1/sessions/{id}", h.needsClient(h.sessionPut))
	h.mux.HandleFunc("PATCH /api/v1/sessions/{id}", h.needsClient(h.sessionPatch))
	h.mux.HandleFunc("DELETE /api/v1/sessions/{id}", h.needsClient(h.sessionDelete))
	h.mux.HandleFunc("GET /api/v1/sessions/{id}/rounds", h.needsClient(h.sessionRounds))
	h.mux.HandleFunc("POST /api/v1/sessions/{id}/rounds", h.needsClient(h.sessionRoundAdd))
	h.mux.HandleFunc("POST /api/v1/sessions/{id}/trim", h.needsClient(h.sessionTrim))
	h.mux.HandleFunc("POST /api/v1/sessions/{id}/report", h.needsClient(h.sessionReport))
	h.mux.HandleFunc("GET /api/v1/sessions/{id}/watch", h.needsClient(h.sessionWatch))
	if o.Routes != nil {
		o.Routes(h.mux)
	}
	if o.Metrics != nil {
		h.mux.Handle("GET /metrics", o.Metrics.Handler())
	}
	// The catch-all matches every method and path the patterns above do
	// not, so ServeMux's plain-text 404 and 405 never reach a client.
	h.mux.HandleFunc("/", h.noRoute)
	return h
}

// CloseStreams ends every open event stream, as if each had reached its
// count, and makes later ones end at once. http.Server.Shutdown waits for
// active requests, and an event stream is active until its client leaves:
// register this with http.Server.RegisterOnShutdown so a shutdown does not
// wait for every subscriber to go away. Other endpoints are unaffected.
func (h *Handler) CloseStreams() { h.closeStreams() }

// ServeHTTP routes a request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Deadlines first: even a refused request's body is read (and
	// discarded) by the server before it answers.
	h.setDeadlines(w, r)
	if !h.guard(w, r) {
		return
	}
	// ServeMux answers a path with empty, "." or ".." segments with a
	// redirect to the cleaned path; for an API that is a surprise (a POST
	// turns into a request elsewhere), so refuse instead.
	if p := r.URL.EscapedPath(); r.Method != http.MethodConnect && p != cleanPath(p) {
		writeError(w, http.StatusNotFound, 0,
			"no such endpoint: "+r.Method+" "+p+" (a path must not have empty, '.' or '..' segments; percent-encode a dot subject as %2E)")
		return
	}
	h.serveObserved(w, r)
}

// needsClient answers 503 instead of calling fn when the handler was built
// without a broker connection.
func (h *Handler) needsClient(fn http.HandlerFunc) http.HandlerFunc {
	if h.opts.Client != nil {
		return fn
	}
	return func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusServiceUnavailable, semaq.ErrCodeUnavailable, errNotConnected.Error())
	}
}

// noRoute answers 405 with an Allow header when the path exists for other
// methods, 404 otherwise.
func (h *Handler) noRoute(w http.ResponseWriter, r *http.Request) {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := h.mux.Handler(probe); pattern != "/" && pattern != "" {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) > 0 {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeError(w, http.StatusMethodNotAllowed, 0,
			"method "+r.Method+" is not allowed on "+r.URL.Path+"; use "+strings.Join(allowed, " or "))
		return
	}
	writeError(w, http.StatusNotFound, 0, "no such endpoint: "+r.Method+" "+r.URL.Path)
}

// cleanPath is ServeMux's canonical form of a path: rooted, no empty, "."
// or ".." segments, the trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

func (h *Handler) healthz(w http.ResponseWriter, r *http.Request) {
	err := error(nil)
	if h.opts.Ready != nil {
		err = h.opts.Ready()
	}
	if err == nil && (h.opts.Client == nil || !h.opts.Client.Conn().IsConnected()) {
		err = errNotConnected
	}
	if err != nil {
		var b struct {
			Status string    `json:"status"`
			Error  errorInfo `json:"error"`
		}
		b.Status = "unavailable"
		b.Error = errorInfo{Code: http.StatusServiceUnavailable, ErrCode: semaq.ErrCodeUnavailable, Message: err.Error()}
		writeJSON(w, http.StatusServiceUnavailable, b)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
