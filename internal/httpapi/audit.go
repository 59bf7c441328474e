package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/semaq/semaq/internal/httpauth"
	"github.com/semaq/semaq/semaq"
)

// audit lists audit records (GET /api/v1/audit, docs/http.md): the
// admin role's, like $SQ.API.AUDIT.LIST, which it calls. A non-admin key
// is refused here, at once, rather than by NATS after a timeout.
func (h *Handler) audit(w http.ResponseWriter, r *http.Request) {
	if c := httpauth.From(r.Context()); c != nil && c.Role != semaq.RoleAdmin {
		writeError(w, http.StatusForbidden, semaq.ErrCodeBadRequest, "the audit is for the admin role; user "+c.User+" is "+c.Role)
		return
	}
	q := r.URL.Query()
	req := semaq.AuditListRequest{User: q.Get("user"), Op: q.Get("op")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "limit: "+strconv.Quote(v)+" is not a number")
			return
		}
		req.Limit = n
	}
	if v := q.Get("since"); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			req.Since = time.Now().Add(-d)
		} else if t, err := time.Parse(time.RFC3339, v); err == nil {
			req.Since = t
		} else {
			writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "since: "+strconv.Quote(v)+" is not a positive duration (1h) or an RFC 3339 time")
			return
		}
	}
	resp, err := h.client(r.Context()).Audit(r.Context(), req)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}
