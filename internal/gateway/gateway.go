// Package gateway is SemaQ's OpenAI-compatible front door on the HTTP
// port: POST /v1/chat/completions and GET /v1/models. A completion request
// becomes a work item on its model's queue (semaq.InferQueue); a worker
// takes it and streams the tokens into the request's token stream, which
// the gateway reads and answers from, as Server-Sent Events or one JSON
// answer. See docs/gateway.md.
package gateway

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/httpauth"
	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/internal/telemetry"
	"github.com/semaq/semaq/semaq"
)

// Options configures the gateway.
type Options struct {
	// Client is the broker connection. Required.
	Client *client.Client
	// Log receives request failures; nil discards them.
	Log *slog.Logger
	// APIKeys maps bearer keys to tenants. When set, a request must bring
	// one of these keys (401 otherwise) and X-SemaQ-Tenant is ignored.
	// When empty, any key (or none) is accepted: the tenant is
	// X-SemaQ-Tenant if given, else "key-" and 12 hex digits of the
	// key's SHA-256, else none.
	APIKeys map[string]string
	// DefaultTimeout bounds a request that sets no X-SemaQ-Timeout
	// (default 5 minutes); MaxTimeout bounds any (default 1 hour).
	DefaultTimeout time.Duration
	MaxTimeout     time.Duration
	// ModelsTTL is how long the list of live models is reused (default 1s).
	ModelsTTL time.Duration
	// WatchInterval is how often a waiting request checks that a live
	// worker still serves its model (default 1s); LostAfter is how long
	// the model may have none before the request ends with worker_lost
	// (default 2s). See watch.go.
	WatchInterval time.Duration
	LostAfter     time.Duration
	// Metrics and Tracing, when set, record every request
	// (semaq_gateway_*) and trace it with a server span (observe.go).
	Metrics *metrics.Metrics
	Tracing *telemetry.Tracing
	// SessionBudget is how many tokens of a session's history a request
	// that names a session (X-SemaQ-Session) is sent with, its own
	// messages not counted (default DefaultSessionBudget);
	// X-SemaQ-Session-Budget sets it per request, from 1 to
	// MaxSessionBudget (default DefaultMaxSessionBudget). See session.go.
	SessionBudget    int
	MaxSessionBudget int
	// DegradedPolicy is what a request does with a degraded session:
	// DegradedProceed (default), DegradedWarn or DegradedRefuse.
	DegradedPolicy string
	// ModelWait is how long a request for a model no live worker serves
	// waits for one to announce itself before the 404 (default
	// DefaultModelWait; negative: not at all): a worker started a moment
	// before the request is not refused.
	ModelWait time.Duration
}

// DefaultModelWait is Options.ModelWait's default.
const DefaultModelWait = 3 * time.Second

// Validate reports an option out of its range; zero values take the
// defaults.
func (o *Options) Validate() error {
	if o.MaxSessionBudget < 0 || o.MaxSessionBudget > DefaultMaxSessionBudget {
		return fmt.Errorf("gateway: the maximum session budget %d is outside 1..%d tokens", o.MaxSessionBudget, DefaultMaxSessionBudget)
	}
	if maxBudget := cmp.Or(o.MaxSessionBudget, DefaultMaxSessionBudget); o.SessionBudget < 0 || o.SessionBudget > maxBudget {
		return fmt.Errorf("gateway: the session budget %d is outside 1..%d tokens", o.SessionBudget, maxBudget)
	}
	switch o.DegradedPolicy {
	case "", DegradedProceed, DegradedWarn, DegradedRefuse:
	default:
		return fmt.Errorf("gateway: the degraded-session policy %q is not one of %s, %s, %s", o.DegradedPolicy, DegradedProceed, DegradedWarn, DegradedRefuse)
	}
	return nil
}

// Gateway serves the OpenAI-compatible endpoints. It is safe for
// concurrent use.
type Gateway struct {
	o   Options
	c   *client.Client
	log *slog.Logger

	closing context.Context
	close   context.CancelFunc

	// bg counts the goroutines a request leaves behind, which Close
	// waits for: withdrawals (cancelRequest; withdraw is what each runs,
	// the queue's cancel).
	bg       inflight
	withdraw func(ctx context.Context, model, id, token string) error

	mu       sync.Mutex
	models   []string          // sorted
	queueOf  map[string]string // model -> the queue capturing its subject
	modelsAt time.Time
	refresh  sync.Mutex // held while reading the registry; taken before mu
}

// New returns a gateway; o should be valid (Options.Validate): a value
// out of range is taken as its default.
func New(o Options) *Gateway {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.DefaultTimeout <= 0 {
		o.DefaultTimeout = 5 * time.Minute
	}
	if o.MaxTimeout <= 0 {
		o.MaxTimeout = time.Hour
	}
	if o.ModelsTTL <= 0 {
		o.ModelsTTL = time.Second
	}
	if o.WatchInterval <= 0 {
		o.WatchInterval = time.Second
	}
	if o.LostAfter <= 0 {
		o.LostAfter = 2 * time.Second
	}
	if o.MaxSessionBudget <= 0 || o.MaxSessionBudget > DefaultMaxSessionBudget {
		o.MaxSessionBudget = DefaultMaxSessionBudget
	}
	if o.SessionBudget <= 0 || o.SessionBudget > o.MaxSessionBudget {
		o.SessionBudget = min(DefaultSessionBudget, o.MaxSessionBudget)
	}
	if o.DegradedPolicy != DegradedWarn && o.DegradedPolicy != DegradedRefuse {
		o.DegradedPolicy = DegradedProceed
	}
	g := &Gateway{o: o, c: o.Client, log: o.Log}
	g.closing, g.close = context.WithCancel(context.Background())
	g.withdraw = func(ctx context.Context, model, id, token string) error {
		_, err := g.c.Cancel(ctx, g.queueFor(model), id, client.CancelToken(token))
		return err
	}
	return g
}

// Register mounts the endpoints on mux.
func (g *Gateway) Register(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/chat/completions", g.observed("/v1/chat/completions", "chat", g.chat))
	mux.HandleFunc("GET /v1/models", g.observed("/v1/models", "models", g.listModels))
	mux.HandleFunc("GET /v1/models/{id...}", g.observed("/v1/models/{id}", "model", g.getModel))
	// Everything else under /v1/ answers as OpenAI does, so an OpenAI
	// client reports it as such (/v1/completions, /v1/embeddings, ...).
	mux.HandleFunc("/v1/", g.unknownURL)
}

// unknownURL answers a path under /v1/ the gateway does not serve, in
// OpenAI's shape.
func (g *Gateway) unknownURL(w http.ResponseWriter, r *http.Request) {
	e := &openai.Error{Message: fmt.Sprintf("Invalid URL (%s %s): SemaQ serves POST /v1/chat/completions, GET /v1/models and GET /v1/models/{model}.",
		r.Method, r.URL.Path), Type: openai.TypeInvalidRequest, Code: openai.Str("unknown_url")}
	writeJSON(w, http.StatusNotFound, openai.ErrorBody{Error: e})
}

// CloseStreams ends every open response stream, as a shutdown must: an
// event stream is otherwise active until its client leaves. Register it
// with http.Server.RegisterOnShutdown; it does not wait.
func (g *Gateway) CloseStreams() { g.close() }

// Close ends every open response stream (CloseStreams) and waits, bounded
// by ctx, until every request withdrawal and session round the gateway
// started has ended, those that responses ending meanwhile start
// included. Call it after the HTTP server's Shutdown and before the
// broker connections close: the withdrawals and rounds use them.
func (g *Gateway) Close(ctx context.Context) error {
	g.close()
	if err := g.bg.wait(ctx); err != nil {
		return fmt.Errorf("gateway: waiting for request withdrawals and session rounds: %w", err)
	}
	return nil
}

// writeError writes OpenAI's error shape.
func writeError(w http.ResponseWriter, status int, typ, code, msg string) {
	e := &openai.Error{Message: msg, Type: typ}
	if code != "" {
		e.Code = openai.Str(code)
	}
	writeJSON(w, status, openai.ErrorBody{Error: e})
}

// badParam answers 400 for a client mistake in param (a field or a
// header).
func badParam(w http.ResponseWriter, param, code, msg string) {
	e := &openai.Error{Message: msg, Type: openai.TypeInvalidRequest, Param: openai.Str(param)}
	if code != "" {
		e.Code = openai.Str(code)
	}
	writeJSON(w, http.StatusBadRequest, openai.ErrorBody{Error: e})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"encoding the answer failed","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// keyTenants says whether the request's tenant comes from its key
// (Options.APIKeys, or auth on) rather than from its AI-Tenant header.
func (g *Gateway) keyTenants(r *http.Request) bool {
	return len(g.o.APIKeys) > 0 || httpauth.From(r.Context()) != nil
}

// tenant is the tenant a request is accounted to (Options.APIKeys, or
// the key's user with auth on).
func (g *Gateway) tenant(r *http.Request) (string, error) {
	if c := httpauth.From(r.Context()); c != nil {
		// Auth on: the front door authenticated the key; the tenant is
		// its user's, whatever the request says.
		return c.Tenant, nil
	}
	key := ""
	if a := r.Header.Get("Authorization"); a != "" {
		k, ok := strings.CutPrefix(a, "Bearer ")
		if !ok {
			return "", errors.New("the Authorization header must be \"Bearer <key>\"")
		}
		key = strings.TrimSpace(k)
	}
	if len(g.o.APIKeys) > 0 {
		t, ok := g.o.APIKeys[key]
		if !ok || key == "" {
			//lint:ignore ST1005 not a Go error string: chat sends it verbatim as the 401's message, in OpenAI's wording
			return "", errors.New("Incorrect API key provided.")
		}
		return t, nil
	}
	if t := r.Header.Get(semaq.HdrHTTPTenant); t != "" {
		return t, nil
	}
	if key == "" {
		return "", nil
	}
	sum := sha256.Sum256([]byte(key))
	return "key-" + hex.EncodeToString(sum[:6]), nil
}

// requestTimeout reads X-SemaQ-Timeout: a Go duration or seconds.
func (g *Gateway) requestTimeout(r *http.Request) (time.Duration, error) {
	v := r.Header.Get(semaq.HdrHTTPTimeout)
	if v == "" {
		return g.o.DefaultTimeout, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		secs, serr := strconv.ParseFloat(v, 64)
		if serr != nil {
			return 0, fmt.Errorf("%s %q is not a duration (30s, 2m) or a number of seconds", semaq.HdrHTTPTimeout, v)
		}
		d = time.Duration(secs * float64(time.Second))
	}
	if d <= 0 || d > g.o.MaxTimeout {
		return 0, fmt.Errorf("%s %s is outside 0..%s", semaq.HdrHTTPTimeout, d, g.o.MaxTimeout)
	}
	return d, nil
}

// newTraceParent starts a trace for a request that brings none.
func newTraceParent() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return "00-" + hex.EncodeToString(b[:16]) + "-" + hex.EncodeToString(b[16:]) + "-01"
}

func (g *Gateway) chat(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, openai.MaxRequestBytes))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeError(w, http.StatusRequestEntityTooLarge, openai.TypeInvalidRequest, "request_too_large",
				fmt.Sprintf("The request body is larger than %d bytes.", openai.MaxRequestBytes))
			return
		}
		writeError(w, http.StatusBadRequest, openai.TypeInvalidRequest, "", "reading the request body: "+err.Error())
		return
	}
	req, err := openai.ParseChatRequest(body)
	if err != nil {
		oe, _ := errors.AsType[*openai.Error](err)
		writeJSON(w, http.StatusBadRequest, openai.ErrorBody{Error: oe})
		return
	}
	if err := semaq.CheckModel(req.Model); err != nil {
		badParam(w, "model", "invalid_model", err.Error())
		return
	}
	noteModel(r.Context(), req.Model)
	for _, h := range []string{"Authorization", semaq.HdrHTTPTenant, semaq.HdrHTTPPriority, semaq.HdrHTTPTimeout,
		semaq.HdrHTTPAdapter, semaq.HdrHTTPSession, semaq.HdrHTTPSessionBudget, "traceparent"} {
		if len(r.Header.Values(h)) > 1 {
			// Proxies disagree on which of two values counts.
			badParam(w, h, "", fmt.Sprintf("The header %s is given %d times; give it once.", h, len(r.Header.Values(h))))
			return
		}
	}
	tenant, err := g.tenant(r)
	if err != nil {
		writeError(w, http.StatusUnauthorized, openai.TypeAuthentication, "invalid_api_key", err.Error())
		return
	}
	opts := []client.PublishOption{client.WithModel(req.Model)}
	if tenant != "" {
		opts = append(opts, client.WithTenant(tenant))
	}
	if v := r.Header.Get(semaq.HdrHTTPPriority); v != "" {
		p, err := semaq.ParsePriority(v)
		if err != nil {
			badParam(w, semaq.HdrHTTPPriority, "invalid_priority", semaq.HdrHTTPPriority+": "+err.Error())
			return
		}
		opts = append(opts, client.WithPriority(p))
	}
	timeout, err := g.requestTimeout(r)
	if err != nil {
		badParam(w, semaq.HdrHTTPTimeout, "invalid_timeout", err.Error())
		return
	}
	// The client's envelope values are checked as the ingress will check
	// them: a bad one is the client's mistake, a 400 naming its header,
	// not a publish the broker refuses.
	envelope, param := map[string][]string{}, map[string]string{}
	for _, h := range []struct {
		name, hdr string
		opt       func(string) client.PublishOption
	}{
		{semaq.HdrHTTPTenant, semaq.HdrTenant, nil},
		{semaq.HdrHTTPAdapter, semaq.HdrAdapter, client.WithAdapter},
		{semaq.HdrHTTPSession, semaq.HdrSession, client.WithSession},
		{"traceparent", semaq.HdrTraceParent, nil},
	} {
		if v := r.Header.Get(h.name); v != "" && (h.opt != nil || h.hdr == semaq.HdrTraceParent || !g.keyTenants(r)) {
			envelope[h.hdr], param[h.hdr] = []string{v}, h.name
			if h.opt != nil {
				opts = append(opts, h.opt(v))
			}
		}
	}
	if _, err := semaq.Parse(envelope, time.Now()); err != nil {
		if ee, ok := errors.AsType[*semaq.EnvelopeError](err); ok {
			p := param[ee.Header]
			badParam(w, p, "invalid_header", fmt.Sprintf("Invalid value for the header %s: %s.", p, ee.Reason))
			return
		}
		badParam(w, "", "invalid_header", err.Error())
		return
	}
	session := r.Header.Get(semaq.HdrHTTPSession)
	if session != "" {
		if err := semaq.CheckSessionID(session); err != nil {
			badParam(w, semaq.HdrHTTPSession, "invalid_header", fmt.Sprintf("Invalid value for the header %s: %v.", semaq.HdrHTTPSession, err))
			return
		}
	}
	budget, err := g.sessionBudget(r)
	if err != nil {
		badParam(w, semaq.HdrHTTPSessionBudget, "invalid_header", err.Error())
		return
	}
	tp := r.Header.Get("traceparent")
	if tp == "" {
		tp = newTraceParent()
	}

	ok, err := g.modelLive(r.Context(), req.Model, true)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, openai.TypeServer, "unavailable", "looking up the model's workers: "+err.Error())
		return
	}
	if !ok {
		writeError(w, http.StatusNotFound, openai.TypeInvalidRequest, "model_not_found",
			fmt.Sprintf("The model `%s` does not exist or no worker serves it.", req.Model))
		return
	}

	id := "chatcmpl-" + nuid.Next()
	w.Header().Set(semaq.HdrHTTPRequestID, id)
	deadline := time.Now().Add(timeout)
	ctx, cancel := context.WithDeadline(r.Context(), deadline)
	defer cancel()
	ctx, stopClosing := withClosing(ctx, g.closing)
	defer stopClosing()
	opts = append(opts, client.WithMsgID(id), client.WithDeadline(deadline), client.WithTraceParent(tp))

	// The live reader subscribes before the request is queued, on the
	// same connection, so the broker has the subscription before any
	// worker can write a token; no JetStream consumer is needed.
	// With auth on, the request acts with its key's rights: it reads the
	// tokens and publishes on its caller's connection.
	c := httpauth.ClientOr(r.Context(), g.c)
	if caller := httpauth.From(r.Context()); caller != nil && !caller.May(httpauth.Publish, semaq.InferSubject(req.Model)) {
		writeError(w, http.StatusForbidden, openai.TypeInvalidRequest, "permission_denied", caller.Refusal(httpauth.Publish, semaq.InferSubject(req.Model)))
		return
	}
	// A session's history goes before the request's own messages; the
	// answer, once it ended well, becomes its next round (session.go).
	var t *turn
	history := 0
	if session != "" {
		var ok bool
		if t, body, history, ok = g.openTurn(ctx, w, c, semaq.SessionRef{ID: session, Tenant: tenant}, req, body, budget); !ok {
			return
		}
	}
	opts = append(opts, client.WithPromptTokens(estimateTokens(req)+history))
	rd, err := c.ReadTokens(ctx, id, client.WithLiveStart())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, openai.TypeServer, "unavailable", "reading the token stream: "+err.Error())
		return
	}
	defer rd.Close()
	ack, err := c.Publish(ctx, semaq.InferSubject(req.Model), body, opts...)
	if err != nil {
		if history > 0 && errors.Is(err, semaq.ErrTooLarge) {
			err = fmt.Errorf("%w: the request with %d tokens of its session's history; a smaller %s sends less", err, history, semaq.HdrHTTPSessionBudget)
		}
		g.publishError(ctx, w, req.Model, err)
		return
	}
	finished := false
	defer func() {
		if !finished {
			g.cancelRequest(req.Model, id, ack.CancelToken)
		}
	}()
	ctx, end := context.WithCancelCause(ctx)
	defer end(nil)
	stopWatch := g.watch(ctx, end, req.Model, id)
	defer stopWatch()
	rs := newRestorer(c, id, session, tenant)
	if req.Stream {
		finished = g.stream(ctx, w, req, id, rd, t, rs)
		return
	}
	finished = g.complete(ctx, w, req, id, rd, t, rs)
}

// withClosing ends ctx when the gateway closes too.
func withClosing(ctx, closing context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(closing, cancel)
	return ctx, func() { stop(); cancel() }
}

// cancelRequest withdraws a request whose client left or whose time ran
// out: the queue drops it, or the worker holding it is told to stop.
// It runs on its own goroutine, so the handler returns at once; Close
// waits for it.
func (g *Gateway) cancelRequest(model, id, token string) {
	g.bg.goFunc(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := g.withdraw(ctx, model, id, token); err != nil && !errors.Is(err, semaq.ErrRequestNotFound) {
			g.log.Warn("cancelling a request", "id", id, "err", err)
		}
	})
}

// inflight counts goroutines that may start at any time, even while
// someone waits for them: a sync.WaitGroup may not grow from zero during
// a Wait, and a response that ends during Close starts a withdrawal.
type inflight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed when n drops to zero; nil when nobody waits
}

// goFunc runs fn on a goroutine counted until fn returns.
func (f *inflight) goFunc(fn func()) {
	f.mu.Lock()
	f.n++
	f.mu.Unlock()
	go func() {
		defer f.done()
		fn()
	}()
}

func (f *inflight) done() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n == 0 && f.idle != nil {
		close(f.idle)
		f.idle = nil
	}
}

// wait returns when no counted goroutine runs, or with ctx's error.
func (f *inflight) wait(ctx context.Context) error {
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return nil
	}
	if f.idle == nil {
		f.idle = make(chan struct{})
	}
	idle := f.idle
	f.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *Gateway) publishError(ctx context.Context, w http.ResponseWriter, model string, err error) {
	switch {
	case errors.Is(err, semaq.ErrOverloaded):
		w.Header().Set("Retry-After", retryAfter(err))
		if e, _ := errors.AsType[*semaq.APIError](err); e != nil && e.Quota != "" {
			// A tenant's or key's quota (docs/quotas.md), in OpenAI's words.
			writeError(w, http.StatusTooManyRequests, openai.TypeRateLimit, "rate_limit_exceeded", "Rate limit reached: "+err.Error())
			return
		}
		writeError(w, http.StatusTooManyRequests, openai.TypeRateLimit, "overloaded", "The model `"+model+"` is overloaded: "+err.Error())
	case errors.Is(err, semaq.ErrTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, openai.TypeInvalidRequest, "request_too_large", err.Error())
	case errors.Is(err, semaq.ErrEnvelope), errors.Is(err, semaq.ErrBadRequest):
		// The checks above should have caught it; still the client's.
		writeError(w, http.StatusBadRequest, openai.TypeInvalidRequest, "invalid_header", err.Error())
	case errors.Is(err, semaq.ErrNoStream):
		writeError(w, http.StatusNotFound, openai.TypeInvalidRequest, "model_not_found", "The model `"+model+"` has no queue: no worker ever served it.")
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		writeError(w, http.StatusGatewayTimeout, openai.TypeTimeout, "timeout", "The request timed out before it was queued.")
	case ctx.Err() != nil:
		// The client left; nobody reads the answer.
	default:
		writeError(w, http.StatusServiceUnavailable, openai.TypeServer, "unavailable", "queueing the request: "+err.Error())
	}
}

// retryAfter is the Retry-After of an overloaded refusal, whole seconds
// rounded up from the broker's retry_after_ms (1 when it gives none).
func retryAfter(err error) string {
	if e, _ := errors.AsType[*semaq.APIError](err); e != nil && e.RetryAfterMs > 0 {
		return strconv.FormatInt((e.RetryAfterMs+999)/1000, 10)
	}
	return "1"
}

// estimateTokens guesses the prompt's tokens for the queue's fair share
// before the model counts them: about four bytes a token.
func estimateTokens(req *openai.ChatRequest) int {
	n := 0
	for i := range req.Messages {
		n += len(req.Messages[i].Content) + len(req.Messages[i].Role) + 4
	}
	return n/semaq.CharsPerToken + 1
}

// failure maps the end of a token stream that is not a final record to
// an HTTP status and OpenAI error.
func failure(ctx context.Context, err error) (int, *openai.Error) {
	if te := endCause(ctx); te != nil {
		err = te
	}
	if te, ok := errors.AsType[*semaq.TokenError](err); ok {
		e := &openai.Error{Message: te.Message, Code: openai.Str(te.Code)}
		switch te.Code {
		case semaq.TokenErrDeadline:
			e.Type = openai.TypeTimeout
			return http.StatusGatewayTimeout, e
		case "bad_request":
			e.Type = openai.TypeInvalidRequest
			return http.StatusBadRequest, e
		case semaq.TokenErrCancelled:
			e.Type = openai.TypeServer
			return http.StatusServiceUnavailable, e
		default: // upstream_error, worker_lost
			e.Type = openai.TypeServer
			return http.StatusBadGateway, e
		}
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return http.StatusGatewayTimeout, &openai.Error{Message: "The request timed out.", Type: openai.TypeTimeout, Code: openai.Str("timeout")}
	}
	if errors.Is(err, client.ErrTokenGap) {
		return http.StatusBadGateway, &openai.Error{Message: err.Error(), Type: openai.TypeServer, Code: openai.Str("token_gap")}
	}
	return http.StatusServiceUnavailable, &openai.Error{Message: err.Error(), Type: openai.TypeServer, Code: openai.Str("unavailable")}
}

// clientLeft reports whether ctx ended because the client went away (or
// the gateway closed): nobody reads an answer.
func clientLeft(ctx context.Context) bool {
	return ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) && endCause(ctx) == nil
}

// complete answers a request with stream false; it reports whether the
// request ran to its end. An answer sent whole is kept in t's session.
func (g *Gateway) complete(ctx context.Context, w http.ResponseWriter, req *openai.ChatRequest, id string, rd *client.TokenReader, t *turn, rs *restorer) bool {
	res, err := rd.Collect(ctx)
	if err != nil {
		if clientLeft(ctx) {
			return false
		}
		status, oe := failure(ctx, err)
		writeJSON(w, status, openai.ErrorBody{Error: oe})
		_, terminal := errors.AsType[*semaq.TokenError](err)
		return terminal || endCause(ctx) != nil
	}
	msg := openai.ResponseMessage{Role: "assistant"}
	if res.Text != "" || len(res.Calls) == 0 {
		msg.Content = openai.Str(rs.all(ctx, res.Text))
	}
	for _, c := range res.Calls {
		msg.ToolCalls = append(msg.ToolCalls, openai.ToolCall{ID: c.ID, Type: "function", Function: openai.FunctionCall{Name: c.Name, Arguments: c.Arguments}})
	}
	out := openai.ChatCompletion{ID: id, Object: "chat.completion", Created: time.Now().Unix(), Model: req.Model,
		Choices: []openai.Choice{{Index: 0, Message: msg, FinishReason: res.Final.FinishReason}}}
	if u := res.Final.Usage; u != nil {
		out.Usage = &openai.Usage{PromptTokens: u.Prompt, CompletionTokens: u.Completion, TotalTokens: u.Total}
	} else {
		out.Usage = &openai.Usage{CompletionTokens: int(res.Tokens), TotalTokens: int(res.Tokens)}
	}
	t.add(res.Text, int(res.Tokens))
	t.answered(ctx, res.Final)
	writeJSON(w, http.StatusOK, out)
	return true
}
