package broker

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/registry"
	"github.com/semaq/semaq/semaq"
)

// The schema registry's REST API runs in process, not through $SQ.API:
// its writes are recorded here (docs/security.md, Audit), with the
// principal the HTTP door authenticated and door "http".

// registryWrites are the REST API's writes and what each records.
var registryWrites = []struct{ pattern, op string }{
	{"POST /subjects/{subject}/versions", semaq.AuditOpSchemaRegister},
	{"DELETE /subjects/{subject}", semaq.AuditOpSchemaDelete},
	{"DELETE /subjects/{subject}/versions/{version}", semaq.AuditOpSchemaDelete},
	{"PUT /config", semaq.AuditOpSchemaConfigSet},
	{"DELETE /config", semaq.AuditOpSchemaConfigSet},
	{"PUT /config/{subject}", semaq.AuditOpSchemaConfigSet},
	{"DELETE /config/{subject}", semaq.AuditOpSchemaConfigSet},
}

// registryRoutes serves the registry's REST API on mux (the front door's
// FrontDoorDeps.Routes) with its writes recorded. The registry serves from
// a mux of its own, which sets the request's Pattern as it would have on
// mux, so the front door's metrics name the same routes.
func (s *Server) registryRoutes(mux *http.ServeMux) {
	inner := http.NewServeMux()
	s.reg.Routes(inner)
	for _, p := range registry.Paths {
		mux.Handle(p, inner)
	}
	for _, w := range registryWrites {
		mux.Handle(w.pattern, s.auditedHTTP(w.op, s.sync.HTTP(inner)))
	}
}

// auditedHTTP records the change h makes: the target is the request's
// {subject} ("" for the global configuration), the outcome its status.
func (s *Server) auditedHTTP(op string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := api.HTTPPrincipal(r.Context())
		if !ok {
			p = api.Principal{Who: api.Anonymous} // auth off: HTTP requests carry no identity
		}
		done := s.audits.As(r.Context(), p, "http", op, r.PathValue("subject"))
		rec := &statusRecorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		var out any
		var err error
		if rec.status >= 400 {
			err = rec.err()
		}
		done(&out, &err)
	})
}

// statusRecorder keeps the status of a response and, for an error, the
// start of its body (the registry's {"error_code":…,"message":…}).
type statusRecorder struct {
	http.ResponseWriter
	status int
	body   []byte
}

const maxErrorBody = 1 << 10

func (r *statusRecorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if r.status >= 400 && len(r.body) < maxErrorBody {
		r.body = append(r.body, b[:min(len(b), maxErrorBody-len(r.body))]...)
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// err is the refusal the response carried: the registry's message, or
// the status.
func (r *statusRecorder) err() error {
	var e struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(r.body, &e) == nil && e.Message != "" {
		return errors.New(e.Message)
	}
	return errors.New("HTTP " + strconv.Itoa(r.status) + " " + http.StatusText(r.status))
}
