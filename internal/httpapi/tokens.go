package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/sse"
	"github.com/semaq/semaq/semaq"
)

// DefaultTokenFirstRecordWait bounds how long GET /api/v1/tokens/{id}
// waits for the first record of a stream the broker knows but that has
// none stored yet (a queued request, a writer that claimed it); the stream
// then ends with an error event "not_started" and the client may
// reconnect.
const DefaultTokenFirstRecordWait = 30 * time.Second

// tokenFirstRecordWait is DefaultTokenFirstRecordWait; tests shorten it.
var tokenFirstRecordWait atomic.Int64

func init() { tokenFirstRecordWait.Store(int64(DefaultTokenFirstRecordWait)) }

// tokens streams a token stream as Server-Sent Events (docs/tokens.md):
// one "token" event per chunk, its id the record's seq and its data the
// record (semaq.AppendTokenChunk), then one "final" event, or an "error"
// event whose data is {"code":...,"message":...}. Query parameters:
// from_seq=N, from_offset=N. A reconnecting EventSource sends
// Last-Event-ID and resumes after that record, whatever from_seq says.
//
// An id the broker does not know (semaq.APITokenStatus) is a 404 at once:
// a reader would otherwise wait for records nobody will write. A known
// stream with no record yet gets its headers at once and waits for the
// first record at most tokenFirstRecordWait.
func (h *Handler) tokens(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := semaq.CheckRequestID(id); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, err.Error())
		return
	}
	opts, err := tokenReadOptions(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, err.Error())
		return
	}
	if _, ok := w.(http.Flusher); !ok {
		writeError(w, http.StatusInternalServerError, semaq.ErrCodeInternal, "streaming is not supported by this connection")
		return
	}
	release, ok := h.acquireStream(w)
	if !ok {
		return
	}
	defer release()
	st, err := h.client(r.Context()).TokenStatus(r.Context(), id)
	if err != nil {
		writeErr(w, err)
		return
	}
	if !st.Known {
		writeError(w, http.StatusNotFound, semaq.ErrCodeTokenStreamNotFound,
			fmt.Sprintf("token stream %s: the broker has no record of this request id (never issued, or removed after its retention)", id))
		return
	}
	rd, err := h.client(r.Context()).ReadTokens(r.Context(), id, opts...)
	if err != nil {
		writeErr(w, err)
		return
	}
	defer rd.Close()
	ew := sse.NewStream(w, h.opts.StreamWriteTimeout)
	ew.Start()
	if ew.Write(nil) != nil {
		return
	}

	ctx, stop := h.streamContext(r)
	defer stop()
	var buf []byte
	// Until the first event, a stream with nothing stored waits at most
	// firstBy (zero: no bound).
	var firstBy time.Time
	if st.Records == 0 && !st.Ended {
		firstBy = time.Now().Add(time.Duration(tokenFirstRecordWait.Load()))
	}
	for {
		wait := sse.KeepAlive
		if !firstBy.IsZero() {
			wait = min(wait, max(time.Until(firstBy), 0))
		}
		waitCtx, stopWait := context.WithTimeout(ctx, wait)
		c, err := rd.Next(waitCtx)
		stopWait()
		if ctx.Err() != nil {
			var revoked *keyRevokedError
			if errors.As(context.Cause(ctx), &revoked) {
				failStream(ew, revoked.Error())
			}
			return
		}
		if !firstBy.IsZero() && errors.Is(err, context.DeadlineExceeded) && !time.Now().Before(firstBy) {
			// Records stored meanwhile (ones FromOffset skips) lift the
			// bound; otherwise nobody is writing.
			if now, serr := h.client(ctx).TokenStatus(ctx, id); serr == nil && (now.Records > 0 || now.Ended) {
				firstBy = time.Time{}
				continue
			}
			msg := fmt.Sprintf("token stream %s: no record within %s of the request; reconnect to wait again",
				id, time.Duration(tokenFirstRecordWait.Load()))
			buf = sse.AppendEvent(buf[:0], sse.Event{Type: "error",
				Data: fmt.Sprintf(`{"code":"not_started","message":%s}`, jsonString(msg))})
			if ew.Write(buf) != nil {
				h.dropSlow(ew, "tokens "+id)
			}
			return
		}
		if err == nil || !errors.Is(err, context.DeadlineExceeded) {
			firstBy = time.Time{} // an event: the stream has started
		}
		var ev sse.Event
		switch {
		case err == nil && c.Final != nil:
			ev = sse.Event{ID: strconv.FormatUint(c.Seq, 10), Type: "final", Data: string(semaq.AppendTokenChunk(nil, c))}
		case err == nil:
			ev = sse.Event{ID: strconv.FormatUint(c.Seq, 10), Type: "token", Data: string(semaq.AppendTokenChunk(nil, c))}
		case errors.Is(err, io.EOF):
			return
		case errors.Is(err, context.DeadlineExceeded):
			if ew.KeepAlive() != nil {
				h.dropSlow(ew, "tokens "+id)
				return
			}
			continue
		default:
			ev = sse.Event{Type: "error", Data: tokenErrorJSON(err)}
		}
		buf = sse.AppendEvent(buf[:0], ev)
		if ew.Write(buf) != nil {
			h.dropSlow(ew, "tokens "+id)
			return
		}
		if err != nil {
			return
		}
	}
}

// tokenErrorJSON is the data of an error event: the writer's code for an
// aborted stream, "gap" for a missing record, "error" otherwise.
func tokenErrorJSON(err error) string {
	code := "error"
	if te, ok := errors.AsType[*semaq.TokenError](err); ok {
		code = te.Code
	} else if errors.Is(err, client.ErrTokenGap) {
		code = "gap"
	}
	return fmt.Sprintf(`{"code":%s,"message":%s}`, jsonString(code), jsonString(err.Error()))
}

func tokenReadOptions(r *http.Request) ([]client.TokenReadOption, error) {
	q := r.URL.Query()
	var opts []client.TokenReadOption
	var from uint64
	if s := q.Get("from_seq"); s != "" {
		n, err := parseSeq(s)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("from_seq=%q: want a record number from 1", s)
		}
		from = n
	}
	next, resume, err := sse.ResumeSeq(r.Header)
	if err != nil {
		return nil, fmt.Errorf("Last-Event-ID %q is not a record number", r.Header.Get(sse.HeaderLastEventID))
	}
	if resume {
		from = next
	}
	if from > 0 {
		opts = append(opts, client.FromSeq(from))
	}
	if s := q.Get("from_offset"); s != "" {
		n, err := parseSeq(s)
		if err != nil {
			return nil, fmt.Errorf("from_offset=%q: want a token offset from 0", s)
		}
		opts = append(opts, client.FromOffset(n))
	}
	return opts, nil
}
