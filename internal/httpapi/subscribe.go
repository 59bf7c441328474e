package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
// the message's JSON form. A reconnecting EventSource sends Last-Event-ID and
// resumes after it. Query parameters: deliver=all|new, durable=NAME,
// start_seq=N, count=N (end after N messages).
//
// Each message is acked once its event is written and flushed to the
// connection.
func (a *api) subscribe(w http.ResponseWriter, r *http.Request) {
	subject := r.PathValue("subject")
	q := r.URL.Query()
	var opts []client.SubscribeOption
	switch q.Get("deliver") {
	case "", "all":
	case "new":
		opts = append(opts, client.WithDeliver(client.DeliverNew))
	default:
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, fmt.Sprintf("deliver=%q: want all or new", q.Get("deliver")))
		return
	}
	if d := q.Get("durable"); d != "" {
		opts = append(opts, client.WithDurable(d))
	}
	start := q.Get("start_seq")
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		n, err := strconv.ParseUint(id, 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, fmt.Sprintf("Last-Event-ID %q is not a sequence number", id))
			return
		}
		start = strconv.FormatUint(n+1, 10)
	}
	if start != "" {
		n, err := strconv.ParseUint(start, 10, 64)
		if err != nil || n == 0 {
			writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, fmt.Sprintf("start_seq=%q: want a sequence number from 1", start))
			return
		}
		opts = append(opts, client.WithStartSequence(n))
	}
	if c := q.Get("count"); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 {
			writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, fmt.Sprintf("count=%q: want a positive integer", c))
			return
		}
		opts = append(opts, client.WithMaxMessages(n), client.WithPrefetch(min(n, 128)))
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, semaq.ErrCodeInternal, "streaming is not supported by this connection")
		return
	}
	sub, err := a.Client.Subscribe(r.Context(), subject, opts...)
	if err != nil {
		writeErr(w, err)
		return
	}
	defer sub.Close()

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprintf(w, ": subscribed to %s on stream %s\n\n", subject, sub.Stream())
	flusher.Flush()

	ctx := r.Context()
	for {
		wait, cancel := context.WithTimeout(ctx, keepalive)
		msg, err := sub.Next(wait)
		cancel()
		switch {
		case errors.Is(err, client.ErrSubscriptionDone):
			return
		case ctx.Err() != nil:
			return
		case errors.Is(err, context.DeadlineExceeded):
			if _, err := fmt.Fprint(w, ": keepalive\n\n"); err != nil {
				return
			}
			flusher.Flush()
			continue
		case err != nil:
			fmt.Fprintf(w, "event: error\ndata: %s\n\n", jsonString(err.Error()))
			flusher.Flush()
			a.Log.Warn("subscribe stream ended", "subject", subject, "err", err)
			return
		}
		body, err := msg.MarshalJSON()
		if err != nil {
			_ = msg.Nak(0)
			return
		}
		if _, err := fmt.Fprintf(w, "id: %d\nevent: message\ndata: %s\n\n", msg.Seq, body); err != nil {
			_ = msg.Nak(0)
			return
		}
		flusher.Flush()
		if err := msg.Ack(ctx); err != nil && ctx.Err() == nil {
			a.Log.Warn("ack after event", "subject", subject, "seq", msg.Seq, "err", err)
		}
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
