package httpapi

import (
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"

	"github.com/semaq/semaq/semaq"
)

// The guard stands in front of every route on the handler's mux, the
// schema registry's and the gateway's included. It exists because a web
// page can make a browser send requests here: a form POST or a no-cors
// fetch carries the user's network position, and DNS rebinding points a
// page's own name at this server. The rules (docs/http.md "Limits and
// safety"):
//
//  1. Host must be a loopback name (localhost), an IP address literal, or
//     in Options.AllowedHosts. Rebinding needs a DNS name the attacker
//     controls, and a browser sends that name as Host; an IP literal Host
//     only comes from a page served by this address itself.
//  2. A request whose Origin is in Options.AllowedOrigins passes (and gets
//     CORS headers). Otherwise a request the browser marks cross-site or
//     same-site (Sec-Fetch-Site) is refused, whatever its method: same-site
//     is refused too because every port of localhost is the same site, so
//     any local dev server would otherwise count as trusted. A
//     state-changing request (POST, PUT, PATCH, DELETE) without
//     Sec-Fetch-Site whose Origin is not this server's is refused, and so is
//     "Origin: null" (sandboxed frames, file: pages).
//  3. A state-changing request to a JSON endpoint under /api/v1/ (every one
//     but publish, whose body is any payload, and the batch publish, which
//     checks its own: JSON or NDJSON) must say Content-Type
//     application/json: a page cannot send that without a CORS preflight,
//     which is never granted to an origin not allowed. The schema registry
//     checks its own Content-Type (internal/registry).
//
// A refusal is 403 (415 for the Content-Type) with the usual JSON error
// naming the rule.

// guard checks r and, when it refuses it, writes the answer and returns
// false.
func (h *Handler) guard(w http.ResponseWriter, r *http.Request) bool {
	if !h.hostAllowed(r.Host) {
		writeError(w, http.StatusForbidden, semaq.ErrCodeBadRequest,
			"host "+quoteHeader(r.Host)+" is not served here (DNS rebinding protection): use localhost, an IP address, or add the name to allowed_hosts")
		return false
	}
	origin := r.Header.Get("Origin")
	allowed := origin != "" && h.originAllowed(origin)
	if allowed {
		w.Header().Add("Vary", "Origin")
		w.Header().Set("Access-Control-Allow-Origin", origin)
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			w.Header().Set("Access-Control-Allow-Methods", "GET, HEAD, POST, PUT, PATCH, DELETE")
			if hs := r.Header.Get("Access-Control-Request-Headers"); hs != "" {
				w.Header().Set("Access-Control-Allow-Headers", hs)
			}
			w.Header().Set("Access-Control-Max-Age", "600")
			w.WriteHeader(http.StatusNoContent)
			return false
		}
	}
	if !allowed {
		switch site := r.Header.Get("Sec-Fetch-Site"); site {
		case "cross-site", "same-site":
			writeError(w, http.StatusForbidden, semaq.ErrCodeBadRequest,
				"cross-origin request refused (Sec-Fetch-Site: "+site+"; origin "+quoteHeader(origin)+" is not in allowed_origins)")
			return false
		case "":
			if stateChanging(r.Method) && origin != "" && !sameOrigin(origin, r.Host) {
				writeError(w, http.StatusForbidden, semaq.ErrCodeBadRequest,
					"cross-origin request refused (Origin "+quoteHeader(origin)+" is not this server and not in allowed_origins)")
				return false
			}
		}
	}
	if stateChanging(r.Method) && needsJSON(r.URL.Path) && !isJSON(r.Header.Get("Content-Type")) && h.routed(r) {
		writeError(w, http.StatusUnsupportedMediaType, semaq.ErrCodeBadRequest,
			"Content-Type "+quoteHeader(r.Header.Get("Content-Type"))+" is not application/json; this endpoint takes JSON (send the header even with an empty body)")
		return false
	}
	return true
}

// routed says whether r matches a route of its own, not the catch-all
// that answers 404 and 405.
func (h *Handler) routed(r *http.Request) bool {
	_, pattern := h.mux.Handler(r)
	return pattern != "/" && pattern != ""
}

func stateChanging(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return false
	}
	return true
}

// needsJSON says whether a state-changing request to path must carry a
// JSON Content-Type: every /api/v1/ endpoint except publish, and the batch
// publish, which takes NDJSON too (batchBodyType; neither is a type a page
// can send without a preflight).
func needsJSON(path string) bool {
	return strings.HasPrefix(path, "/api/v1/") && !strings.HasPrefix(path, "/api/v1/publish/") && path != "/api/v1/publish"
}

// isJSON accepts application/json and any application/*+json.
func isJSON(ct string) bool {
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return false
	}
	return mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")
}

// hostAllowed implements rule 1. An empty Host (HTTP/1.0) is no browser's.
func (h *Handler) hostAllowed(host string) bool {
	if host == "" {
		return true
	}
	name := hostName(host)
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return true // RFC 6761: always loopback, never resolved by DNS
	}
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	lh := strings.ToLower(host)
	for _, a := range h.opts.AllowedHosts {
		a = strings.ToLower(a)
		if a == name || a == lh {
			return true
		}
	}
	return false
}

// hostName is host without its port and brackets, lower case, without a
// trailing dot.
func hostName(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.TrimSuffix(strings.ToLower(host), ".")
}

func (h *Handler) originAllowed(origin string) bool {
	o := strings.TrimSuffix(strings.ToLower(origin), "/")
	for _, a := range h.opts.AllowedOrigins {
		if strings.TrimSuffix(strings.ToLower(a), "/") == o {
			return true
		}
	}
	return false
}

// sameOrigin says whether origin names the host the request was sent to.
// The scheme is not compared: a TLS-terminating proxy in front changes it.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return false // "null" and anything not scheme://host[:port]
	}
	return strings.EqualFold(stripDefaultPort(u.Host, u.Scheme), stripDefaultPort(host, u.Scheme))
}

func stripDefaultPort(host, scheme string) string {
	if h, p, err := net.SplitHostPort(host); err == nil && (p == "80" && scheme == "http" || p == "443" && scheme == "https") {
		if strings.Contains(h, ":") {
			return "[" + h + "]"
		}
		return h
	}
	return host
}

// quoteHeader quotes a header value for an error message, cut short.
func quoteHeader(v string) string {
	if len(v) > 200 {
		v = v[:200] + "…"
	}
	return jsonString(v)
}
