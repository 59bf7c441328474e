package httpapi

import (
	"bytes"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/batchjson"
	"github.com/semaq/semaq/internal/httpauth"
	"github.com/semaq/semaq/semaq"
)

// Batch publishing over HTTP (docs/batches.md): POST /api/v1/publish takes
// many messages in one body, NDJSON or a JSON array of the batchjson form,
// and sends them to the ingress as one batch (client.PublishBatch). Each
// message is checked here as the single publish checks its one (subject,
// the caller's grants, headers, the gateway's tenant) before anything is
// sent; one refused here is a result of its own, as one the ingress
// refuses is, and refuses the whole batch when it is atomic.

// ndjsonType is the Content-Type of a batch body of one message per line.
const ndjsonType = "application/x-ndjson"

// batchAnswer is the answer to a batch: a result per message, in the order
// sent. Error and Index are set when an atomic batch was refused: the
// refusal, and the message that caused it.
type batchAnswer struct {
	Stored  int           `json:"stored"`
	Refused int           `json:"refused"`
	Atomic  bool          `json:"atomic"`
	Error   *errorInfo    `json:"error,omitempty"`
	Index   *int          `json:"index,omitempty"`
	Results []batchResult `json:"results"`
}

// batchResult is what became of one message: stored (stream, seq,
// duplicate) or refused (error), with the Nats-Msg-Id it was sent with.
type batchResult struct {
	*pubAck
	Error *errorInfo `json:"error,omitempty"`
	MsgID string     `json:"msg_id,omitempty"`
}

// batchUnknown is the 504 of a batch whose answer never came: its
// messages may or may not be stored, and their ids make a retry safe.
type batchUnknown struct {
	Error   errorInfo `json:"error"`
	Outcome string    `json:"outcome"`
	MsgIDs  []string  `json:"msg_ids"`
}

func (h *Handler) publishBatch(w http.ResponseWriter, r *http.Request) {
	ndjson, ok := batchBodyType(r.Header.Get("Content-Type"))
	if !ok {
		writeError(w, http.StatusUnsupportedMediaType, semaq.ErrCodeBadRequest,
			"Content-Type "+quoteHeader(r.Header.Get("Content-Type"))+" is not a batch: send "+ndjsonType+" (one message per line) or application/json (an array of messages)")
		return
	}
	atomic := false
	if v := r.URL.Query().Get("atomic"); v != "" {
		var err error
		if atomic, err = strconv.ParseBool(v); err != nil {
			writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "atomic="+quoteHeader(v)+" is not true or false")
			return
		}
	}
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	msgs, err := parseBatchBody(ndjson, body)
	switch {
	case errors.Is(err, batchjson.ErrTooMany):
		writeError(w, http.StatusRequestEntityTooLarge, semaq.ErrCodeBatchLimit,
			"the batch has more than "+strconv.Itoa(semaq.MaxBatchMsgs)+" messages, the most one may have; split it. Nothing was stored")
		return
	case err != nil:
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadBatch, "batch body: "+err.Error()+". Nothing was stored")
		return
	case len(msgs) == 0:
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadBatch, "the batch has no messages")
		return
	}

	// The messages continue the request's trace, or the door's span.
	trace := nats.Header{}
	for _, k := range []string{semaq.HdrTraceParent, semaq.HdrTraceState, semaq.AliasTraceID} {
		if v := r.Header.Values(k); len(v) > 0 {
			trace[k] = v
		}
	}
	ctx, span := h.serverSpan(r.Context(), "POST /api/v1/publish", trace,
		attribute.Int("messaging.batch.message_count", len(msgs)))
	if span != nil {
		defer span.End()
	}

	results := make([]batchResult, len(msgs))
	send := make([]*nats.Msg, 0, len(msgs))
	at := make([]int, 0, len(msgs)) // index in msgs of each message sent
	for i, bm := range msgs {
		m := &nats.Msg{Subject: bm.Subject, Header: bm.Header, Data: bm.Data}
		if m.Header == nil {
			m.Header = nats.Header{}
		}
		// Every message carries an id, so a client that never learns the
		// outcome can send the batch again and be deduplicated.
		results[i].MsgID = headerValue(m.Header, semaq.HdrMsgID)
		if results[i].MsgID == "" {
			results[i].MsgID = "http-" + nuid.Next()
			m.Header.Set(semaq.HdrMsgID, results[i].MsgID)
		}
		if e := h.checkBatchMsg(r, m); e != nil {
			results[i].Error = e
			if atomic {
				h.refuseAtomic(w, results, i, m.Subject, *e)
				return
			}
			continue
		}
		if headerValue(m.Header, semaq.HdrTraceParent) == "" && headerValue(m.Header, semaq.AliasTraceID) == "" {
			for k, v := range trace {
				m.Header[k] = v
			}
		}
		send = append(send, m)
		at = append(at, i)
	}
	if len(send) == 0 {
		writeBatch(w, http.StatusOK, batchAnswer{Results: results})
		return
	}
	opts := []client.BatchOption{client.ViaHTTP()}
	if atomic {
		opts = append(opts, client.Atomic())
	}
	ack, err := h.client(ctx).PublishBatch(ctx, send, opts...)
	if err != nil && span != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	if ack == nil || ack.Results == nil {
		h.batchFailed(w, r, err, results)
		return
	}
	for k, res := range ack.Results {
		i := at[k]
		if res.Error != nil {
			results[i].Error = errorInfoOf(res.Error)
		} else {
			results[i].pubAck = &pubAck{Stream: res.Stream, Seq: res.Sequence, Duplicate: res.Duplicate}
		}
	}
	a := batchAnswer{Atomic: atomic, Results: results}
	status := http.StatusOK
	if ack.Error != nil {
		// An atomic batch refused: its status is the refusing message's.
		a.Error = errorInfoOf(ack.Error)
		status = a.Error.Code
		if ack.Index != nil && *ack.Index >= 0 && *ack.Index < len(at) {
			i := at[*ack.Index]
			a.Index = &i
			status = results[i].Error.Code
			setRetryAfter(w, ack.Results[*ack.Index].Error)
		}
		a.Error.Code = status
	}
	writeBatch(w, status, a)
}

// checkBatchMsg checks one message of a batch as the single publish checks
// its own, and stamps the gateway's tenant; a refusal is the message's
// result.
func (h *Handler) checkBatchMsg(r *http.Request, m *nats.Msg) *errorInfo {
	if err := checkLiteralSubject(m.Subject); err != nil {
		return &errorInfo{Code: http.StatusBadRequest, ErrCode: semaq.ErrCodeBadRequest, Message: err.Error()}
	}
	if msg := refusal(r, httpauth.Publish, m.Subject); msg != "" {
		return &errorInfo{Code: http.StatusForbidden, ErrCode: semaq.ErrCodeBadRequest, Message: msg}
	}
	if msg := h.stampTenant(r, m.Subject, m.Header); msg != "" {
		return &errorInfo{Code: http.StatusUnauthorized, ErrCode: semaq.ErrCodeBadRequest, Message: msg}
	}
	if err := semaq.CheckHeaders(m.Header); err != nil {
		return &errorInfo{Code: http.StatusBadRequest, ErrCode: semaq.ErrCodeBadEnvelope, Message: err.Error()}
	}
	size := 0
	for k, vs := range m.Header {
		for _, v := range vs {
			size += len(k) + len(v) + 4 // "name: value\r\n", as the ingress counts
		}
	}
	if size > h.opts.MaxHeaderBytes {
		return &errorInfo{Code: http.StatusBadRequest, ErrCode: semaq.ErrCodeBadEnvelope,
			Message: "headers total " + strconv.Itoa(size) + " bytes; the limit is " + strconv.Itoa(h.opts.MaxHeaderBytes)}
	}
	return nil
}

// refuseAtomic answers an atomic batch that message i refused before
// anything was sent: nothing was stored.
func (h *Handler) refuseAtomic(w http.ResponseWriter, results []batchResult, i int, subject string, e errorInfo) {
	for k := range results {
		if k != i {
			results[k].Error = &errorInfo{Code: http.StatusBadRequest, ErrCode: semaq.ErrCodeBatchRefused,
				Message: "not stored: message " + strconv.Itoa(i) + " refused the atomic batch"}
		}
	}
	writeBatch(w, e.Code, batchAnswer{Atomic: true, Index: &i, Results: results,
		Error: &errorInfo{Code: e.Code, ErrCode: semaq.ErrCodeBatchRefused,
			Message: "atomic batch: message " + strconv.Itoa(i) + " on " + subject + " refused, nothing was stored: " + e.Message}})
}

// batchFailed answers a batch that got no results: refused as a whole, or
// no answer at all.
func (h *Handler) batchFailed(w http.ResponseWriter, r *http.Request, err error, results []batchResult) {
	if err == nil {
		err = errors.New("the broker's answer has no results")
	}
	if _, ok := errors.AsType[*semaq.APIError](err); !ok {
		if r.Context().Err() != nil {
			return // the client went away; nobody to tell
		}
		if outcomeUnknown(err) {
			ids := make([]string, len(results))
			for i := range results {
				ids[i] = results[i].MsgID
			}
			h.log.Warn("publish batch outcome unknown", "messages", len(results), "err", err)
			writeJSON(w, http.StatusGatewayTimeout, batchUnknown{
				Error: errorInfo{Code: http.StatusGatewayTimeout, ErrCode: semaq.ErrCodeUnavailable,
					Message: "no answer from the broker; the messages may or may not be stored: send the batch again with the same Nats-Msg-Ids"},
				Outcome: "unknown", MsgIDs: ids,
			})
			return
		}
		h.log.Warn("publish batch", "messages", len(results), "err", err)
	}
	writeErr(w, err)
}

// writeBatch writes a batch answer, counting its results.
func writeBatch(w http.ResponseWriter, status int, a batchAnswer) {
	for _, res := range a.Results {
		if res.Error != nil {
			a.Refused++
		} else {
			a.Stored++
		}
	}
	writeJSON(w, status, a)
}

// parseBatchBody reads a batch body: NDJSON or a JSON array, at most
// semaq.MaxBatchMsgs messages (batchjson.ErrTooMany past them).
func parseBatchBody(ndjson bool, body []byte) ([]semaq.BatchMsg, error) {
	if !ndjson {
		return batchjson.ParseArray(body, semaq.MaxBatchMsgs)
	}
	var msgs []semaq.BatchMsg
	err := batchjson.ReadLines(bytes.NewReader(body), len(body)+1, func(_, _ int, m semaq.BatchMsg) error {
		if len(msgs) == semaq.MaxBatchMsgs {
			return batchjson.ErrTooMany
		}
		msgs = append(msgs, m)
		return nil
	})
	return msgs, err
}

// batchBodyType says whether ct is NDJSON or JSON, or neither (ok false).
func batchBodyType(ct string) (ndjson, ok bool) {
	if isJSON(ct) {
		return false, true
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil || mt != ndjsonType {
		return false, false
	}
	if cs, has := params["charset"]; has && !strings.EqualFold(cs, "utf-8") {
		return false, false
	}
	return true, true
}

// headerValue is the first value of header name in h, in any case.
func headerValue(h nats.Header, name string) string {
	if v := h[name]; len(v) > 0 {
		return v[0]
	}
	for k, v := range h {
		if strings.EqualFold(k, name) && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

// errorInfoOf is the HTTP form of a broker error, its code the status
// writeErr would answer it with.
func errorInfoOf(e *semaq.APIError) *errorInfo {
	return &errorInfo{Code: statusOf(e), ErrCode: e.ErrCode, Message: e.Description}
}

// setRetryAfter sets Retry-After when e asks to retry after a while.
func setRetryAfter(w http.ResponseWriter, e *semaq.APIError) {
	if e != nil && e.RetryAfterMs > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt((e.RetryAfterMs+999)/1000, 10))
	}
}
