// Package httpapi is SemaQ's HTTP front door: health, publish, subscribe as
// Server-Sent Events, and stream listing. It is a client of the broker like
// any other: publishes go through the same ingress as NATS publishes, so the
// two front doors accept and refuse exactly the same messages.
package httpapi

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// Options configures the handler.
type Options struct {
	// Client is the broker connection the handler uses. Required.
	Client *client.Client
	// Log receives request errors; nil discards them.
	Log *slog.Logger
	// MaxHeaderBytes bounds the envelope headers of one publish.
	MaxHeaderBytes int
	// MaxBody bounds a publish body.
	MaxBody int
	// Ready reports whether the node can serve; nil means always.
	Ready func() error
}

type api struct {
	Options
}

// New returns the HTTP handler of the front door.
func New(o Options) http.Handler {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.MaxBody <= 0 {
		o.MaxBody = 1 << 20
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = semaq.DefaultMaxHeaderBytes
	}
	a := &api{o}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", a.healthz)
	mux.HandleFunc("POST /api/v1/publish/{subject}", a.publish)
	mux.HandleFunc("GET /api/v1/subscribe/{subject}", a.subscribe)
	mux.HandleFunc("GET /api/v1/streams", a.streams)
	mux.HandleFunc("GET /api/v1/streams/{name}", a.stream)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, 0, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	return mux
}

func (a *api) healthz(w http.ResponseWriter, r *http.Request) {
	if a.Ready != nil {
		if err := a.Ready(); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "unavailable", "error": err.Error()})
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (a *api) streams(w http.ResponseWriter, r *http.Request) {
	list, err := a.Client.Streams(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, semaq.StreamListResponse{Streams: list})
}

func (a *api) stream(w http.ResponseWriter, r *http.Request) {
	info, err := a.Client.StreamInfo(r.Context(), r.PathValue("name"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// errorBody is the HTTP error shape: {"error":{"code":..,"err_code":..,"message":..}}.
type errorBody struct {
	Error struct {
		Code    int    `json:"code"`
		ErrCode uint16 `json:"err_code,omitempty"`
		Message string `json:"message"`
	} `json:"error"`
}

func writeError(w http.ResponseWriter, status int, errCode uint16, msg string) {
	var b errorBody
	b.Error.Code, b.Error.ErrCode, b.Error.Message = status, errCode, msg
	writeJSON(w, status, b)
}

// writeErr maps an SDK or broker error onto an HTTP status.
func writeErr(w http.ResponseWriter, err error) {
	var apiErr *semaq.APIError
	if errors.As(err, &apiErr) {
		status := apiErr.Code
		if status < 400 || status > 599 {
			status = http.StatusBadGateway
		}
		writeError(w, status, apiErr.ErrCode, apiErr.Description)
		return
	}
	writeError(w, http.StatusServiceUnavailable, semaq.ErrCodeUnavailable, err.Error())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
