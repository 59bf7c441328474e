// Package httpx holds HTTP helpers shared by SemaQ's HTTP handlers.
package httpx

import "net/http"

// StatusWriter remembers the status a handler wrote, for request metrics.
// It passes Flush on (event streams) and unwraps for
// http.ResponseController.
type StatusWriter struct {
	http.ResponseWriter
	code int
}

// Status is the status written: 200 when the handler wrote a body without
// one, or nothing at all.
func (w *StatusWriter) Status() int {
	if w.code == 0 {
		return http.StatusOK
	}
	return w.code
}

func (w *StatusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *StatusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *StatusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		if w.code == 0 {
			w.code = http.StatusOK
		}
		f.Flush()
	}
}

func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
