package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// Work queues over HTTP (docs/http.md): status, fetch, answer, cancel.
// An HTTP worker fetches a batch, then answers each job on its ack subject
// with POST .../answer. It gets no cancel notices: a cancelled job's answer
// is refused with 409 (semaq.ErrLeaseLost).

func (h *Handler) queues(w http.ResponseWriter, r *http.Request) {
	qs, err := h.opts.Client.Queues(r.Context())
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, semaq.QueueListResponse{Queues: qs})
}

func (h *Handler) queue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := semaq.CheckStreamName(name); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "queue name: "+err.Error())
		return
	}
	qi, err := h.opts.Client.QueueInfo(r.Context(), name)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, qi)
}

// httpFetch is the body of POST /api/v1/queues/{name}/fetch.
type httpFetch struct {
	// Worker names the worker; empty gets a fresh name per request.
	Worker    string            `json:"worker,omitempty"`
	Max       int               `json:"max,omitempty"`
	MaxTokens int64             `json:"max_tokens,omitempty"`
	WaitMs    int64             `json:"wait_ms,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// parseHTTPFetch reads a fetch body into SDK options. An empty body is a
// fetch of one job without waiting.
func parseHTTPFetch(body []byte) ([]client.FetchOption, error) {
	var f httpFetch
	if len(bytes.TrimSpace(body)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			return nil, fmt.Errorf("fetch body is not valid JSON: %v", err)
		}
		if dec.More() {
			return nil, errors.New("fetch body has data after the JSON object")
		}
	}
	if f.Worker == "" {
		f.Worker = "http-" + nuid.Next()
	}
	if f.Max == 0 {
		f.Max = 1
	}
	if f.WaitMs < 0 {
		return nil, fmt.Errorf("wait_ms %d is negative", f.WaitMs)
	}
	req := semaq.FetchRequest{Worker: f.Worker, Max: f.Max, MaxTokens: f.MaxTokens, Wait: time.Duration(f.WaitMs) * time.Millisecond, Labels: f.Labels}
	if err := req.Check(); err != nil {
		return nil, err
	}
	opts := []client.FetchOption{client.FetchWorker(req.Worker), client.FetchMax(req.Max), client.FetchWait(req.Wait)}
	if req.MaxTokens > 0 {
		opts = append(opts, client.FetchMaxTokens(req.MaxTokens))
	}
	if len(req.Labels) > 0 {
		opts = append(opts, client.FetchLabels(req.Labels))
	}
	return opts, nil
}

func (h *Handler) queueFetch(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := semaq.CheckStreamName(name); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "queue name: "+err.Error())
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "reading the fetch body: "+err.Error())
		return
	}
	opts, err := parseHTTPFetch(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "fetch: "+err.Error())
		return
	}
	jobs, err := h.opts.Client.Fetch(r.Context(), name, opts...)
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return // the worker went away; the jobs' ack wait returns them
		}
		writeErr(w, err)
		return
	}
	for _, j := range jobs {
		j.Detach() // the HTTP worker answers them
	}
	if jobs == nil {
		jobs = []*client.Job{}
	}
	writeJSON(w, http.StatusOK, struct {
		Jobs []*client.Job `json:"jobs"`
	}{jobs})
}

// httpAnswer is the body of POST /api/v1/queues/{name}/answer.
type httpAnswer struct {
	AckSubject   string `json:"ack_subject"`
	Action       string `json:"action"` // ack, nak, in_progress, term
	OutputTokens int64  `json:"output_tokens,omitempty"`
	DelayMs      int64  `json:"delay_ms,omitempty"`
	Reason       string `json:"reason,omitempty"`
}

func (h *Handler) queueAnswer(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var a httpAnswer
	dec := json.NewDecoder(io.LimitReader(r.Body, 16<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "answer body is not valid JSON: "+err.Error())
		return
	}
	if !strings.HasPrefix(a.AckSubject, semaq.QueueAckPrefix+name+".") {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, fmt.Sprintf("ack_subject %q is not a job of queue %s", a.AckSubject, name))
		return
	}
	var body string
	switch a.Action {
	case "ack":
		if a.OutputTokens < 0 {
			writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "output_tokens is negative")
			return
		}
		body = semaq.JobAck
		if a.OutputTokens > 0 {
			body += fmt.Sprintf(` {"output_tokens":%d}`, a.OutputTokens)
		}
	case "nak":
		if a.DelayMs < 0 {
			writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "delay_ms is negative")
			return
		}
		body = semaq.JobNak
		if a.DelayMs > 0 {
			body += fmt.Sprintf(` {"delay_ms":%d}`, a.DelayMs)
		}
	case "in_progress":
		body = semaq.JobInProgress
	case "term":
		body = strings.TrimSpace(semaq.JobTerm + " " + a.Reason)
	default:
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, fmt.Sprintf("action %q is not one of ack, nak, in_progress, term", a.Action))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	m, err := h.opts.Client.Conn().RequestWithContext(ctx, a.AckSubject, []byte(body))
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, semaq.ErrCodeUnavailable, "answering the job: "+err.Error())
		return
	}
	var rep semaq.JobReply
	if err := json.Unmarshal(m.Data, &rep); err != nil {
		writeError(w, http.StatusServiceUnavailable, semaq.ErrCodeUnavailable, "the dispatcher's reply is not JSON")
		return
	}
	if !rep.OK {
		if rep.Error == nil {
			rep.Error = semaq.NewAPIError(semaq.ErrLeaseLost, "job refused")
		}
		writeErr(w, rep.Error)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

func (h *Handler) queueCancel(w http.ResponseWriter, r *http.Request) {
	res, err := h.opts.Client.Cancel(r.Context(), r.PathValue("name"), r.PathValue("id"))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}
