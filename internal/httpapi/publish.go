package httpapi

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/codes"

	"github.com/semaq/semaq/internal/httpauth"
	"github.com/semaq/semaq/semaq"
)

// pubAck is the answer to a publish. It is written from its own type rather
// than semaq.PubAck, whose duplicate field is omitted when false: HTTP
// clients get all three fields every time.
type pubAck struct {
	Stream    string `json:"stream"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
	// CancelToken cancels the request (POST /api/v1/queues/{name}/cancel/{id}
	// with {"token": ...}): the AI-Cancel-Token the request came with, or
	// one the door chose.
	CancelToken string `json:"cancel_token,omitempty"`
}

// publish stores the request body on the subject in the path. The envelope
// comes from HTTP headers of the same names as the NATS headers
// (docs/envelope.md); other headers are forwarded only as described at
// envelopeFromHTTP. The message then goes through the ingress like a NATS
// publish, which validates and normalises it.
func (h *Handler) publish(w http.ResponseWriter, r *http.Request) {
	subject := r.PathValue("subject")
	if err := checkLiteralSubject(subject); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, err.Error())
		return
	}
	if !permitted(w, r, httpauth.Publish, subject) {
		return
	}
	m := nats.NewMsg(subject)
	if err := envelopeFromHTTP(r.Header, m.Header, h.opts.MaxHeaderBytes); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadEnvelope, err.Error())
		return
	}
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	m.Data = body
	if msg := h.stampTenant(r, subject, m.Header); msg != "" {
		w.Header().Set("WWW-Authenticate", `Bearer realm="semaq"`)
		writeError(w, http.StatusUnauthorized, semaq.ErrCodeBadRequest, msg)
		return
	}
	// A publish always carries a message id, so a client that never learns
	// the outcome can retry with the id and be deduplicated.
	msgID := m.Header.Get(semaq.HdrMsgID)
	if msgID == "" {
		msgID = "http-" + nuid.Next()
		m.Header.Set(semaq.HdrMsgID, msgID)
	}
	w.Header().Set(semaq.HdrMsgID, msgID)
	ctx, span := h.publishSpan(r.Context(), m)
	if span != nil {
		defer span.End()
	}
	ack, err := h.client(ctx).PublishMsg(ctx, m)
	if err != nil {
		if span != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		if errors.Is(err, semaq.ErrCommit) {
			// Written, not made durable: the broker's own answer says the
			// outcome is not known, and a retry with the id is safe.
			writeJSON(w, http.StatusGatewayTimeout, unknownOutcome{
				Error:   errorInfo{Code: http.StatusGatewayTimeout, ErrCode: semaq.ErrCodeCommit, Message: err.Error()},
				Outcome: "unknown", MsgID: msgID,
			})
			return
		}
		if _, ok := errors.AsType[*semaq.APIError](err); !ok {
			if r.Context().Err() != nil {
				return // the client went away; nobody to tell
			}
			// No usable answer: the ingress may be slow, or something other
			// than the ingress answers on the subject. Say which.
			if _, lerr := h.client(r.Context()).StreamBySubject(r.Context(), subject); errors.Is(lerr, semaq.ErrNoStream) {
				writeError(w, http.StatusNotFound, semaq.ErrCodeNoStream, "no stream captures subject "+subject)
				return
			}
			if outcomeUnknown(err) {
				// The message went out and no answer came back: it may be
				// stored. Say so, with the id that makes a retry safe.
				h.log.Warn("publish outcome unknown", "subject", subject, "msg_id", msgID, "err", err)
				writeJSON(w, http.StatusGatewayTimeout, unknownOutcome{
					Error:   errorInfo{Code: http.StatusGatewayTimeout, ErrCode: semaq.ErrCodeUnavailable, Message: "no acknowledgement from the broker; the message may or may not be stored: retry with the same Nats-Msg-Id"},
					Outcome: "unknown", MsgID: msgID,
				})
				return
			}
			h.log.Warn("publish", "subject", subject, "err", err)
		}
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, pubAck{Stream: ack.Stream, Seq: ack.Sequence, Duplicate: ack.Duplicate, CancelToken: ack.CancelToken})
}

// readBody reads a publish body, within MaxBody and the body timeout (its
// read deadline was set with the request's, setDeadlines), or answers 413,
// 408 or 400 and returns false.
func (h *Handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.ContentLength > int64(h.opts.MaxBody) {
		writeError(w, http.StatusRequestEntityTooLarge, semaq.ErrCodeTooLarge, h.tooLarge())
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(h.opts.MaxBody)))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeError(w, http.StatusRequestEntityTooLarge, semaq.ErrCodeTooLarge, h.tooLarge())
			return nil, false
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			writeError(w, http.StatusRequestTimeout, semaq.ErrCodeBadRequest, fmt.Sprintf("body not received within %s", h.opts.BodyTimeout))
			return nil, false
		}
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "reading body: "+err.Error())
		return nil, false
	}
	return body, true
}

// stampTenant applies the tenant rules of inference requests to a publish
// on subject with header hdr. With gateway API keys configured, a publish
// to the gateway's subjects must bring one, and is stamped with its
// tenant; the message of the 401 is returned when it does not. With auth
// on, such a publish is accounted to the caller's tenant, as the gateway
// does; only an admin names another.
func (h *Handler) stampTenant(r *http.Request, subject string, hdr nats.Header) (unauthorized string) {
	if !strings.HasPrefix(subject, semaq.InferSubjectPrefix) {
		return ""
	}
	tenant := ""
	if len(h.opts.InferKeys) > 0 {
		t, ok := h.inferTenant(r)
		if !ok {
			return "publishing to " + semaq.InferSubjectPrefix + "> needs a gateway API key: Authorization: Bearer <key>"
		}
		tenant = t // the key's, whatever the request said
	} else if c := httpauth.From(r.Context()); c != nil && c.Role != semaq.RoleAdmin {
		tenant = c.Tenant
	} else {
		return ""
	}
	for k := range hdr {
		if strings.EqualFold(k, semaq.HdrTenant) {
			delete(hdr, k)
		}
	}
	if tenant != "" {
		hdr.Set(semaq.HdrTenant, tenant)
	}
	return ""
}

// unknownOutcome is the 504 answer of a publish whose acknowledgement
// never came.
type unknownOutcome struct {
	Error   errorInfo `json:"error"`
	Outcome string    `json:"outcome"`
	MsgID   string    `json:"msg_id"`
}

// outcomeUnknown says whether a publish error came after the message may
// have reached the broker: a timeout, or the connection lost on the way.
// Errors from before sending (payload too large, connection closed) are
// failures.
func outcomeUnknown(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrDisconnected) || errors.Is(err, nats.ErrConnectionReconnecting)
}

// inferTenant returns the tenant of the request's gateway API key.
func (h *Handler) inferTenant(r *http.Request) (string, bool) {
	scheme, key, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || key == "" {
		return "", false
	}
	tenant, found := "", false
	for k, t := range h.opts.InferKeys {
		// Compare with every key, in constant time each: the answer's
		// timing says nothing about which prefix matched.
		if subtle.ConstantTimeCompare([]byte(k), []byte(key)) == 1 {
			tenant, found = t, true
		}
	}
	return tenant, found
}

func (h *Handler) tooLarge() string {
	return fmt.Sprintf("body is larger than the limit of %d bytes", h.opts.MaxBody)
}

// checkLiteralSubject accepts a subject one message can be published to.
// The ingress never sees a subject this refuses: wildcards publish nowhere,
// and the reserved namespaces ($SQ, $JS, _INBOX...) would let an HTTP client
// call the management API or answer someone else's request.
func checkLiteralSubject(s string) error {
	if err := checkSubject(s, false); err != nil {
		return err
	}
	return checkPublicSubject(s)
}

// checkSubject is semaq.CheckSubject for a subject from a URL: the path is
// percent-decoded, so it can hold any byte, and must be valid UTF-8 too.
func checkSubject(s string, wildcards bool) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("subject %q is not valid UTF-8", s)
	}
	return semaq.CheckSubject(s, wildcards)
}

func checkPublicSubject(s string) error {
	if strings.HasPrefix(s, "$") || strings.HasPrefix(s, "_") {
		return fmt.Errorf("subject %q is in a reserved namespace", s)
	}
	return nil
}
