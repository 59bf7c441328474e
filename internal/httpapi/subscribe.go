package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// keepalive is how often an idle event stream gets a comment line, so
// proxies do not close it.
const keepalive = 15 * time.Second

// subscribe streams the messages stored on a subject as Server-Sent Events:
// one "message" event per message, its id the stream sequence and its data
// the message's JSON form (client.Msg.MarshalJSON). A reconnecting
// EventSource sends Last-Event-ID and resumes after it. Query parameters:
// deliver=all|new, durable=NAME, start_seq=N, count=N (end after N
// messages), filter=EXPR (only messages matching the CEL expression cross
// the wire; docs/filtering.md).
//
// Each message is acked once its event is written and flushed to the
// connection; one the client may not have received is handed back.
func (h *Handler) subscribe(w http.ResponseWriter, r *http.Request) {
	subject := r.PathValue("subject")
	opts, err := subscribeOptions(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, err.Error())
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, semaq.ErrCodeInternal, "streaming is not supported by this connection")
		return
	}
	if r.Method == http.MethodHead {
		// Say whether a GET would stream, without making a consumer.
		if _, err := h.opts.Client.StreamBySubject(r.Context(), subject); err != nil {
			writeErr(w, err)
			return
		}
		writeEventStreamHeader(w)
		return
	}
	sub, err := h.opts.Client.Subscribe(r.Context(), subject, opts...)
	if err != nil {
		writeErr(w, err)
		return
	}
	defer sub.Close()

	writeEventStreamHeader(w)
	// The subject passed the broker's lookup, so it has no line breaks.
	fmt.Fprintf(w, ": subscribed to %s on stream %s\n\n", subject, sub.Stream())
	flusher.Flush()

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(h.closing, cancel)()
	for {
		wait, stopWait := context.WithTimeout(ctx, keepalive)
		msg, err := sub.Next(wait)
		stopWait()
		switch {
		case err == nil:
		case errors.Is(err, client.ErrSubscriptionDone), ctx.Err() != nil:
			return
		case errors.Is(err, context.DeadlineExceeded):
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return
			}
			flusher.Flush()
			continue
		default:
			fmt.Fprintf(w, "event: error\ndata: %s\n\n", jsonString(err.Error()))
			flusher.Flush()
			h.log.Warn("subscribe stream ended", "subject", subject, "err", err)
			return
		}
		if ctx.Err() != nil {
			_ = msg.Nak(0)
			return
		}
		body, err := msg.MarshalJSON()
		if err != nil {
			_ = msg.Nak(0)
			fmt.Fprintf(w, "event: error\ndata: %s\n\n", jsonString(err.Error()))
			flusher.Flush()
			return
		}
		if _, err := fmt.Fprintf(w, "id: %d\nevent: message\ndata: %s\n\n", msg.Seq, body); err != nil {
			_ = msg.Nak(0)
			return
		}
		flusher.Flush()
		// The event is out; ack it even if the stream is ending now.
		if err := msg.Ack(context.WithoutCancel(ctx)); err != nil {
			h.log.Warn("ack after event", "subject", subject, "seq", msg.Seq, "err", err)
		}
	}
}

func writeEventStreamHeader(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
}

// subscribeOptions reads the query parameters and Last-Event-ID of a
// subscribe request.
func subscribeOptions(r *http.Request) ([]client.SubscribeOption, error) {
	q := r.URL.Query()
	var opts []client.SubscribeOption
	switch d := q.Get("deliver"); d {
	case "", "all":
	case "new":
		opts = append(opts, client.WithDeliver(client.DeliverNew))
	default:
		return nil, fmt.Errorf("deliver=%q: want all or new", d)
	}
	if f := q.Get("filter"); f != "" {
		opts = append(opts, client.WithFilter(f))
	}
	if d := q.Get("durable"); d != "" {
		if err := semaq.CheckConsumerName(d); err != nil {
			return nil, fmt.Errorf("durable=%q: %w", d, err)
		}
		opts = append(opts, client.WithDurable(d))
	}
	var start uint64
	if s := q.Get("start_seq"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("start_seq=%q: want a sequence number from 1", s)
		}
		start = n
	}
	// Last-Event-ID is what an EventSource sends when it reconnects: resume
	// after it, whatever start_seq says.
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		n, err := strconv.ParseUint(id, 10, 64)
		if err != nil || n == math.MaxUint64 {
			return nil, fmt.Errorf("Last-Event-ID %q is not a sequence number", id)
		}
		start = n + 1
	}
	if start > 0 {
		opts = append(opts, client.WithStartSequence(start))
	}
	if c := q.Get("count"); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("count=%q: want a positive integer", c)
		}
		opts = append(opts, client.WithMaxMessages(n), client.WithPrefetch(min(n, 128)))
	}
	return opts, nil
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
