package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/semaq"
)

// publish stores the request body on the subject in the path. The envelope
// comes from HTTP headers of the same names as the NATS headers
// (docs/envelope.md); other HTTP headers are not forwarded, except those
// starting with Nats-Expected- (JetStream's optimistic-concurrency checks).
func (a *api) publish(w http.ResponseWriter, r *http.Request) {
	subject := r.PathValue("subject")
	if err := checkLiteralSubject(subject); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, err.Error())
		return
	}
	m := nats.NewMsg(subject)
	if err := envelopeFromHTTP(r.Header, m.Header, a.MaxHeaderBytes); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadEnvelope, err.Error())
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(a.MaxBody)))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, semaq.ErrCodeTooLarge,
				fmt.Sprintf("body is larger than the limit of %d bytes", a.MaxBody))
			return
		}
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "reading body: "+err.Error())
		return
	}
	m.Data = body
	ack, err := a.Client.PublishMsg(r.Context(), m)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ack)
}

// envelopeFromHTTP copies the envelope headers (any case, aliases included)
// and Nats-Expected-* headers from an HTTP request into a NATS header. Each
// must be given once; the broker validates the values.
func envelopeFromHTTP(in http.Header, out nats.Header, maxBytes int) error {
	total := 0
	for k, vs := range in {
		if !semaq.IsEnvelopeHeader(k) && !strings.HasPrefix(strings.ToLower(k), "nats-expected-") {
			continue
		}
		for _, v := range vs {
			total += len(k) + len(v) + 4
			if total > maxBytes {
				return fmt.Errorf("invalid header %s: envelope headers exceed the limit of %d bytes", k, maxBytes)
			}
			out.Add(k, v)
		}
	}
	return nil
}

func checkLiteralSubject(s string) error {
	if s == "" {
		return errors.New("subject is empty")
	}
	if len(s) > 1024 {
		return errors.New("subject is longer than 1024 bytes")
	}
	for _, t := range strings.Split(s, ".") {
		if t == "" {
			return fmt.Errorf("subject %q has an empty token", s)
		}
		if t == "*" || t == ">" || strings.ContainsAny(t, "*>") {
			return fmt.Errorf("subject %q has a wildcard; publish to a literal subject", s)
		}
		for i := 0; i < len(t); i++ {
			if c := t[i]; c <= ' ' || c == 0x7f {
				return fmt.Errorf("subject %q has a space or control character", s)
			}
		}
	}
	if strings.HasPrefix(s, "$") || strings.HasPrefix(s, "_") {
		return fmt.Errorf("subject %q is in a reserved namespace", s)
	}
	return nil
}
