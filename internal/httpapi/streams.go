package httpapi

import (
	"fmt"
	"net/http"

	"github.com/semaq/semaq/semaq"
)

// streams lists every stream: {"streams":[StreamInfo...]}, sorted by name.
func (h *Handler) streams(w http.ResponseWriter, r *http.Request) {
	list, err := h.client(r.Context()).Streams(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	if list == nil {
		list = []semaq.StreamInfo{}
	}
	writeJSON(w, http.StatusOK, semaq.StreamListResponse{Streams: list})
}

// stream describes one stream.
func (h *Handler) stream(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	// The name becomes a subject token of the management API; anything a
	// stream name cannot hold would address another subject or none.
	if err := checkStreamName(name); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, err.Error())
		return
	}
	info, err := h.client(r.Context()).StreamInfo(r.Context(), name)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

// checkStreamName accepts what the broker accepts as a stream name:
// letters, digits, '-' and '_'.
func checkStreamName(name string) error {
	if len(name) > 128 {
		return fmt.Errorf("stream name %q is longer than 128 bytes", name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("stream name %q has %q at byte %d; stream names are letters, digits, '-' and '_'", name, c, i)
		}
	}
	return nil
}
