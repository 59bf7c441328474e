package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/httpauth"
	"github.com/semaq/semaq/semaq"
)

// Durable subscriptions over HTTP (docs/http.md). A durable keeps a
// position on the broker, which is lasting state, so it is never made by a
// GET: POST /api/v1/durables makes one, bounded in number (MaxDurables per
// node) and in life (removed after DurableInactive without a reader). A
// GET with durable=NAME reads only a durable made this way, never one an
// SDK client made.

// metaHTTP marks, in consumer metadata, the consumers the front door made:
// "durable" for a durable of POST /api/v1/durables, "stream" for the
// consumer of one event stream.
const metaHTTP = "semaq_http"

// httpDurableBody is the body of POST /api/v1/durables.
type httpDurableBody struct {
	Name     string `json:"name"`
	Subject  string `json:"subject"`
	Deliver  string `json:"deliver,omitempty"` // all (default) or new
	StartSeq uint64 `json:"start_seq,omitempty"`
}

// httpDurableInfo is the answer about one durable.
type httpDurableInfo struct {
	Name              string `json:"name"`
	Stream            string `json:"stream"`
	Subject           string `json:"subject"`
	InactiveThreshold int64  `json:"inactive_threshold_ms"`
	Created           bool   `json:"created"`
}

const maxDurableBody = 4 << 10

func (h *Handler) durableCreate(w http.ResponseWriter, r *http.Request) {
	var b httpDurableBody
	if !decodeBody(w, r, "durable body", maxDurableBody, false, &b) {
		return
	}
	if err := semaq.CheckConsumerName(b.Name); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "name: "+err.Error())
		return
	}
	if err := checkSubject(b.Subject, true); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "subject: "+err.Error())
		return
	}
	if err := checkPublicSubject(b.Subject); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "subject: "+err.Error())
		return
	}
	if !permitted(w, r, httpauth.Read, b.Subject) {
		return
	}
	p := subscribeParams{startSeq: b.StartSeq}
	switch b.Deliver {
	case "", "all":
	case "new":
		p.deliver = client.DeliverNew
	default:
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, fmt.Sprintf("deliver %q: want all or new", b.Deliver))
		return
	}
	stream, err := h.client(r.Context()).StreamBySubject(r.Context(), b.Subject)
	if err != nil {
		writeErr(w, err)
		return
	}
	info := httpDurableInfo{Name: b.Name, Stream: stream, Subject: b.Subject, InactiveThreshold: h.opts.DurableInactive.Milliseconds()}

	h.durableMu.Lock()
	defer h.durableMu.Unlock()
	if cons, err := h.jsFor(r.Context()).Consumer(r.Context(), stream, b.Name); err == nil {
		ci := cons.CachedInfo()
		if ci.Config.Metadata[metaHTTP] != "durable" || ci.Config.FilterSubject != b.Subject {
			writeError(w, http.StatusConflict, semaq.ErrCodeBadRequest,
				fmt.Sprintf("stream %s already has a consumer %s, not a durable of this front door on %s", stream, b.Name, b.Subject))
			return
		}
		writeJSON(w, http.StatusOK, info) // made before: the same request twice is one durable
		return
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		writeErr(w, jsError(err))
		return
	}
	n, err := h.countDurables(r.Context())
	if err != nil {
		writeErr(w, jsError(err))
		return
	}
	if n >= h.opts.MaxDurables {
		writeError(w, http.StatusTooManyRequests, semaq.ErrCodeBadRequest,
			fmt.Sprintf("this node has %d durable subscriptions made over HTTP, the limit; delete one or wait for one to expire", n))
		return
	}
	cfg := jetstream.ConsumerConfig{
		Durable:           b.Name,
		FilterSubject:     b.Subject,
		AckPolicy:         jetstream.AckNonePolicy,
		InactiveThreshold: h.opts.DurableInactive,
		Metadata:          map[string]string{metaHTTP: "durable"},
	}
	setStart(&cfg, p)
	if _, err := h.jsFor(r.Context()).CreateConsumer(r.Context(), stream, cfg); err != nil {
		writeErr(w, jsError(err))
		return
	}
	info.Created = true
	writeJSON(w, http.StatusCreated, info)
}

func (h *Handler) durableDelete(w http.ResponseWriter, r *http.Request) {
	stream, name := r.PathValue("stream"), r.PathValue("name")
	if err := checkStreamName(stream); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, err.Error())
		return
	}
	if err := semaq.CheckConsumerName(name); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "name: "+err.Error())
		return
	}
	if _, err := h.httpDurableOf(r.Context(), stream, name); err != nil {
		writeErr(w, err)
		return
	}
	if err := h.jsFor(r.Context()).DeleteConsumer(r.Context(), stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
		writeErr(w, jsError(err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"deleted": true})
}

// httpDurable returns the durable name of stream that a GET may read: one
// made by POST /api/v1/durables, on subject.
func (h *Handler) httpDurable(ctx context.Context, stream, subject, name string) (jetstream.Consumer, error) {
	cons, err := h.httpDurableOf(ctx, stream, name)
	if err != nil {
		return nil, err
	}
	if f := cons.CachedInfo().Config.FilterSubject; f != subject {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "durable %s follows subject %s, not %s", name, f, subject)
	}
	return cons, nil
}

func (h *Handler) httpDurableOf(ctx context.Context, stream, name string) (jetstream.Consumer, error) {
	cons, err := h.jsFor(ctx).Consumer(ctx, stream, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) || err == nil && cons.CachedInfo().Config.Metadata[metaHTTP] != "durable" {
		// A consumer of an SDK client is not the front door's to read or
		// delete; say "not found" either way.
		return nil, &semaq.APIError{Code: http.StatusNotFound, ErrCode: semaq.ErrCodeBadRequest,
			Description: fmt.Sprintf("stream %s has no durable %s made over HTTP; create it with POST /api/v1/durables", stream, name)}
	}
	if err != nil {
		return nil, jsError(err)
	}
	return cons, nil
}

// countDurables counts the durables made over HTTP on every stream. It
// is the node's bound, not a caller's business: it lists with the front
// door's own connection, whoever asks.
func (h *Handler) countDurables(ctx context.Context) (int, error) {
	n := 0
	names := h.js.StreamNames(ctx)
	for stream := range names.Name() {
		s, err := h.js.Stream(ctx, stream)
		if err != nil {
			continue // deleted meanwhile
		}
		infos := s.ListConsumers(ctx)
		for ci := range infos.Info() {
			if ci.Config.Metadata[metaHTTP] == "durable" {
				n++
			}
		}
		if err := infos.Err(); err != nil {
			return 0, err
		}
	}
	return n, names.Err()
}
