package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/semaq/semaq/semaq"
)

// errNotConnected is the 503 of a handler whose broker connection is
// missing or down.
var errNotConnected = errors.New("the HTTP front door has no connection to the broker")

// errorInfo is the error object of every HTTP error answer. Code repeats
// the HTTP status; ErrCode is the SemaQ code (semaq.ErrCode*, or a JetStream
// code passed through) when there is one.
type errorInfo struct {
	Code    int    `json:"code"`
	ErrCode uint16 `json:"err_code,omitempty"`
	Message string `json:"message"`
}

// errorBody is the HTTP error shape: {"error":{"code":..,"err_code":..,"message":..}}.
type errorBody struct {
	Error errorInfo `json:"error"`
}

func writeError(w http.ResponseWriter, status int, errCode uint16, msg string) {
	writeJSON(w, status, errorBody{Error: errorInfo{Code: status, ErrCode: errCode, Message: msg}})
}

// jsRollupFailed is JetStream's error for a Nats-Rollup header the stream
// does not allow. JetStream files it under 500, but only the sender can fix
// it.
const jsRollupFailed = 10111

// writeErr maps an SDK or broker error onto an HTTP status: a broker error
// in the 4xx range keeps its status; every other failure (the broker did not
// answer, the connection is down, storage refused for its own reasons) is
// 503, which tells a client to retry later. The body keeps the broker's
// err_code either way.
func writeErr(w http.ResponseWriter, err error) {
	if apiErr, ok := errors.AsType[*semaq.APIError](err); ok {
		setRetryAfter(w, apiErr)
		writeError(w, statusOf(apiErr), apiErr.ErrCode, apiErr.Description)
		return
	}
	writeError(w, http.StatusServiceUnavailable, semaq.ErrCodeUnavailable, err.Error())
}

// statusOf is the HTTP status of a broker error (writeErr).
func statusOf(e *semaq.APIError) int {
	switch {
	case e.ErrCode == jsRollupFailed:
		return http.StatusBadRequest
	case e.Code < 400 || e.Code > 499:
		return http.StatusServiceUnavailable
	}
	return e.Code
}

// writeJSON writes v as the JSON answer. HTML escaping is off: subjects
// such as "ai.>" read as they are written.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only a bug can get here: every answer is a plain struct.
		status = http.StatusInternalServerError
		b.Reset()
		_ = enc.Encode(errorBody{Error: errorInfo{Code: status, ErrCode: semaq.ErrCodeInternal, Message: "encoding the answer: " + err.Error()}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}
