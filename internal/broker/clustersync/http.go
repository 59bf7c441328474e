package clustersync

import (
	"bytes"
	"net/http"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/semaq"
)

// HTTP makes a write of the registry's REST API return as its NATS twin
// does (internal/broker/schemas): once every node this one reaches
// enforces it, naming those that had not in semaq.HdrClusterLagging. The
// answer is held until then: a registry write's answer is small (an ID, a
// compatibility level, the versions of one subject). Outside a cluster (a
// nil Syncer) it is h.
func (sy *Syncer) HTTP(h http.Handler) http.Handler {
	if sy == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		held := &heldResponse{header: http.Header{}}
		ctx := api.WithLaggingNote(r.Context())
		h.ServeHTTP(held, r.WithContext(ctx))
		if held.status == 0 {
			held.status = http.StatusOK
		}
		if held.status < 400 {
			sy.Sync(ctx, Request{Schemas: true})
		}
		for k, v := range held.header {
			w.Header()[k] = v
		}
		if l := api.LaggingHeader(ctx); l != "" {
			w.Header().Set(semaq.HdrClusterLagging, l)
		}
		w.WriteHeader(held.status)
		_, _ = w.Write(held.body.Bytes())
	})
}

// heldResponse keeps a response until HTTP sends it.
type heldResponse struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (h *heldResponse) Header() http.Header { return h.header }

func (h *heldResponse) WriteHeader(code int) {
	if h.status == 0 {
		h.status = code
	}
}

func (h *heldResponse) Write(b []byte) (int, error) {
	if h.status == 0 {
		h.status = http.StatusOK
	}
	return h.body.Write(b)
}
