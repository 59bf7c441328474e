package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/codes"

	"github.com/semaq/semaq/semaq"
)

// pubAck is the answer to a publish. It is written from its own type rather
// than semaq.PubAck, whose duplicate field is omitted when false: HTTP
// clients get all three fields every time.
type pubAck struct {
	Stream    string `json:"stream"`
	Seq       uint64 `json:"seq"`
	Duplicate bool   `json:"duplicate"`
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
	m := nats.NewMsg(subject)
	if err := envelopeFromHTTP(r.Header, m.Header, h.opts.MaxHeaderBytes); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadEnvelope, err.Error())
		return
	}
	if r.ContentLength > int64(h.opts.MaxBody) {
		writeError(w, http.StatusRequestEntityTooLarge, semaq.ErrCodeTooLarge, h.tooLarge())
		return
	}
	// The server has no overall read timeout (event streams run for
	// hours), so a body that trickles in is bounded here.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(h.opts.BodyTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(h.opts.MaxBody)))
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeError(w, http.StatusRequestEntityTooLarge, semaq.ErrCodeTooLarge, h.tooLarge())
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			writeError(w, http.StatusRequestTimeout, semaq.ErrCodeBadRequest, fmt.Sprintf("body not received within %s", h.opts.BodyTimeout))
			return
		}
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "reading body: "+err.Error())
		return
	}
	m.Data = body
	ctx, span := h.publishSpan(r.Context(), m)
	if span != nil {
		defer span.End()
	}
	ack, err := h.opts.Client.PublishMsg(ctx, m)
	if err != nil {
		if span != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		if _, ok := errors.AsType[*semaq.APIError](err); !ok {
			// No usable answer: the ingress may be slow, or something other
			// than the ingress answers on the subject. Say which.
			if _, lerr := h.opts.Client.StreamBySubject(r.Context(), subject); errors.Is(lerr, semaq.ErrNoStream) {
				writeError(w, http.StatusNotFound, semaq.ErrCodeNoStream, "no stream captures subject "+subject)
				return
			}
			h.log.Warn("publish", "subject", subject, "err", err)
		}
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, pubAck{Stream: ack.Stream, Seq: ack.Sequence, Duplicate: ack.Duplicate})
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
