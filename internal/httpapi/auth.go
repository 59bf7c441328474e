package httpapi

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/httpauth"
	"github.com/semaq/semaq/internal/identity"
	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/semaq"
)

// Authentication of the front door with auth on (docs/security.md, "HTTP
// door"). Every request but GET /healthz brings Authorization: Bearer
// <key>, a key of the identity store. Then:
//
//   - /api/v1/ and /v1/ (the gateway) go through NATS: the request
//     carries a broker connection authenticated with the key
//     (httpauth.Pool), so the NATS server grants it exactly the key's
//     rights. Publish and subscribe are also checked against the key's
//     grants here first, so a refusal is a prompt 403, not a timeout.
//   - /metrics is the admin's.
//   - The schema registry's reads are any user's; its writes the admin's.
//
// The key is never logged nor echoed.

// Identity authenticates keys: *identity.Store.
type Identity interface {
	Authenticate(key string) (identity.Principal, error)
	// Changed is closed at the next change of the store (a user or key
	// added, rotated or removed).
	Changed() <-chan struct{}
}

// FailureLimiter slows down repeated failures from one IP: the NATS door's
// *auth.Limiter.
type FailureLimiter interface {
	Delay(ip string) time.Duration
	Fail(ip string)
	Succeed(ip string)
}

// Auth turns on authentication; Options.Auth nil serves everyone as the
// front door's own connection, as without auth.
type Auth struct {
	// Identity authenticates keys. Required.
	Identity Identity
	// Pool holds the connections acting with each key's rights. Required.
	Pool *httpauth.Pool
	// Limiter, when set, delays requests from an IP after repeated
	// failures.
	Limiter FailureLimiter
	// Failed counts one refused request, reason "no_key", "bad_key" or
	// "unknown_key" (semaq_auth_failures_total).
	Failed func(reason string)
}

// route kinds, for authorize.
const (
	routeOpen     = iota // /healthz
	routeNATS            // /api/v1/
	routeGateway         // /v1/
	routeAdmin           // /metrics
	routeRegistry        // the schema registry, and unknown paths
)

func (h *Handler) routeKind(r *http.Request) int {
	_, pattern := h.mux.Handler(r)
	_, p, _ := strings.Cut(pattern, " ")
	if p == "" {
		p = pattern
	}
	switch {
	case p == "/healthz":
		return routeOpen
	case p == "/metrics":
		return routeAdmin
	case strings.HasPrefix(p, "/api/v1/"):
		return routeNATS
	case strings.HasPrefix(p, "/v1/") || strings.HasPrefix(r.URL.Path, "/v1/"):
		return routeGateway
	}
	return routeRegistry
}

// registryRead says whether a registry request only reads: GET and HEAD,
// and the two POSTs of Confluent's API that look up or test a schema
// without storing it.
func registryRead(r *http.Request) bool {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		return true
	case http.MethodPost:
		p := r.URL.Path
		return strings.HasPrefix(p, "/compatibility/") ||
			strings.HasPrefix(p, "/subjects/") && strings.Count(strings.Trim(p, "/"), "/") == 1
	}
	return false
}

// authorize authenticates r and, for the routes that reach NATS, gets its
// connection. It returns the request to serve and a release func, or
// ok=false after answering.
func (h *Handler) authorize(w http.ResponseWriter, r *http.Request) (_ *http.Request, release func(), ok bool) {
	a := h.opts.Auth
	kind := h.routeKind(r)
	if kind == routeOpen {
		return r, func() {}, true
	}
	oa := kind == routeGateway
	ip := remoteIP(r.RemoteAddr)
	if a.Limiter != nil {
		if d := a.Limiter.Delay(ip); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return nil, nil, false
			}
		}
	}
	key, reason := bearer(r.Header.Get("Authorization"))
	var p identity.Principal
	if reason == "" {
		var err error
		p, err = a.Identity.Authenticate(key)
		switch {
		case errors.Is(err, identity.ErrBadKey):
			reason = "bad_key"
		case errors.Is(err, identity.ErrExpiredKey):
			reason = "expired_key"
		case err != nil:
			reason = "unknown_key"
		}
	}
	if reason != "" {
		if a.Limiter != nil {
			a.Limiter.Fail(ip)
		}
		if a.Failed != nil {
			a.Failed(reason)
		}
		h.log.Debug("http request refused", "remote", ip, "reason", reason)
		msg := "this broker runs with auth: send Authorization: Bearer <key> with a key of its identity store (semaq user add)"
		if reason != "no_key" {
			msg = "the key is not valid: unknown, revoked or malformed"
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="semaq"`)
		if oa {
			writeOpenAIError(w, http.StatusUnauthorized, openai.TypeAuthentication, "invalid_api_key", msg)
		} else {
			writeError(w, http.StatusUnauthorized, semaq.ErrCodeBadRequest, msg)
		}
		return nil, nil, false
	}
	if a.Limiter != nil {
		a.Limiter.Succeed(ip)
	}
	caller := &httpauth.Caller{Principal: p,
		// A long answer (an event stream) ends when its key stops being
		// valid: revoked, rotated away, its user removed or expired.
		Changed: a.Identity.Changed,
		Recheck: func() error { _, err := a.Identity.Authenticate(key); return err },
	}
	switch kind {
	case routeAdmin:
		if p.Role != semaq.RoleAdmin {
			writeError(w, http.StatusForbidden, semaq.ErrCodeBadRequest, r.URL.Path+" is for the admin role; user "+p.User+" is "+p.Role)
			return nil, nil, false
		}
	case routeRegistry:
		if !registryRead(r) && p.Role != semaq.RoleAdmin {
			writeError(w, http.StatusForbidden, semaq.ErrCodeBadRequest,
				"changing the schema registry is for the admin role; user "+p.User+" is "+p.Role+" (reads are allowed)")
			return nil, nil, false
		}
	case routeNATS, routeGateway:
		k, _ := identity.ParseKey(key) // Authenticate parsed it
		c, rel, err := a.Pool.Get(r.Context(), k.ID, key)
		if err != nil {
			msg := "no broker connection for this key: " + err.Error()
			if oa {
				writeOpenAIError(w, http.StatusServiceUnavailable, openai.TypeServer, "", msg)
			} else {
				writeError(w, http.StatusServiceUnavailable, semaq.ErrCodeUnavailable, msg)
			}
			return nil, nil, false
		}
		caller.Client = c
		return r.WithContext(httpauth.WithCaller(r.Context(), caller)), rel, true
	}
	return r.WithContext(httpauth.WithCaller(r.Context(), caller)), func() {}, true
}

// bearer extracts the key of an Authorization header, or the failure
// reason.
func bearer(v string) (key, reason string) {
	if v == "" {
		return "", "no_key"
	}
	scheme, k, ok := strings.Cut(v, " ")
	k = strings.TrimSpace(k)
	if !ok || !strings.EqualFold(scheme, "Bearer") || k == "" {
		return "", "bad_key"
	}
	return k, ""
}

func remoteIP(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

func writeOpenAIError(w http.ResponseWriter, status int, typ, code, msg string) {
	e := &openai.Error{Message: msg, Type: typ}
	if code != "" {
		e.Code = openai.Str(code)
	}
	writeJSON(w, status, openai.ErrorBody{Error: e})
}

// jsFor is the JetStream API on the connection a request acts with.
func (h *Handler) jsFor(ctx context.Context) jetstream.JetStream {
	return h.jsOf(h.client(ctx))
}

func (h *Handler) jsOf(c *client.Client) jetstream.JetStream {
	if c == h.opts.Client {
		return h.js
	}
	js, _ := jetstream.New(c.Conn()) // fails only for a nil conn
	return js
}

// client is the broker connection a request acts with: the caller's with
// auth on, the front door's otherwise.
func (h *Handler) client(ctx context.Context) *client.Client {
	return httpauth.ClientOr(ctx, h.opts.Client)
}

// permitted answers 403 and returns false when the caller may not act on
// subject (httpauth.Caller.May). With auth off it always permits.
func permitted(w http.ResponseWriter, r *http.Request, act httpauth.Action, subject string) bool {
	if msg := refusal(r, act, subject); msg != "" {
		writeError(w, http.StatusForbidden, semaq.ErrCodeBadRequest, msg)
		return false
	}
	return true
}

// refusal is why the caller may not act on subject, or "" when it may.
func refusal(r *http.Request, act httpauth.Action, subject string) string {
	c := httpauth.From(r.Context())
	if c == nil || c.May(act, subject) {
		return ""
	}
	return c.Refusal(act, subject)
}
