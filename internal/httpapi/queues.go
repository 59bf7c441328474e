package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/httpx"
	"github.com/semaq/semaq/semaq"
)

// Work queues over HTTP (docs/http.md): status, fetch, answer, cancel.
// An HTTP worker fetches a batch, then answers each job on its ack subject
// with POST .../answer. It gets no cancel notices: a cancelled job's answer
// is refused with 409 (semaq.ErrLeaseLost).

func (h *Handler) queues(w http.ResponseWriter, r *http.Request) {
	qs, err := h.client(r.Context()).Queues(r.Context())
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
	qi, err := h.client(r.Context()).QueueInfo(r.Context(), name)
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
	Max       *int              `json:"max,omitempty"` // absent: 1; present: 1..MaxFetchBatch
	MaxTokens int64             `json:"max_tokens,omitempty"`
	WaitMs    int64             `json:"wait_ms,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
}

// Body limits of the queue endpoints: a larger body is refused with 413,
// never cut short.
const (
	maxFetchBody  = 64 << 10
	maxAnswerBody = 16 << 10
)

func fetchOptions(f httpFetch) ([]client.FetchOption, error) {
	if f.Worker == "" {
		f.Worker = "http-" + nuid.Next()
	}
	max := 1
	if f.Max != nil {
		if *f.Max == 0 {
			return nil, fmt.Errorf("max 0 is outside 1..%d; leave max out for one job", semaq.MaxFetchBatch)
		}
		max = *f.Max
	}
	if f.WaitMs < 0 {
		return nil, fmt.Errorf("wait_ms %d is negative", f.WaitMs)
	}
	if f.WaitMs > semaq.MaxFetchWait.Milliseconds() {
		// Checked before the multiplication below could overflow.
		return nil, fmt.Errorf("wait_ms %d is over %d", f.WaitMs, semaq.MaxFetchWait.Milliseconds())
	}
	req := semaq.FetchRequest{Worker: f.Worker, Max: max, MaxTokens: f.MaxTokens, Wait: time.Duration(f.WaitMs) * time.Millisecond, Labels: f.Labels}
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

// decodeBody decodes a JSON body strictly (httpx.DecodeStrict) and, when it
// is refused, answers 413 or 400 naming the problem and returns false. An
// empty body is refused unless optional.
func decodeBody(w http.ResponseWriter, r *http.Request, what string, limit int64, optional bool, v any) bool {
	err := httpx.DecodeStrict(r.Body, limit, v)
	switch {
	case err == nil, optional && errors.Is(err, httpx.ErrEmpty):
		return true
	case errors.Is(err, httpx.ErrEmpty):
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, what+": the body is empty; send a JSON object")
	default:
		if _, ok := errors.AsType[*httpx.TooLargeError](err); ok {
			writeError(w, http.StatusRequestEntityTooLarge, semaq.ErrCodeTooLarge, what+": "+err.Error())
			return false
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			writeError(w, http.StatusRequestTimeout, semaq.ErrCodeBadRequest, what+": body not received in time")
			return false
		}
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, what+": "+err.Error())
	}
	return false
}

func (h *Handler) queueFetch(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := semaq.CheckStreamName(name); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "queue name: "+err.Error())
		return
	}
	var f httpFetch
	if !decodeBody(w, r, "fetch body", maxFetchBody, true, &f) {
		return
	}
	opts, err := fetchOptions(f)
	if err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "fetch: "+err.Error())
		return
	}
	// The answer comes after the wait the worker asked for.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Duration(f.WaitMs)*time.Millisecond + h.opts.WriteTimeout))
	jobs, err := h.client(r.Context()).Fetch(r.Context(), name, opts...)
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
	if err := semaq.CheckStreamName(name); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "queue name: "+err.Error())
		return
	}
	var a httpAnswer
	if !decodeBody(w, r, "answer body", maxAnswerBody, false, &a) {
		return
	}
	if err := checkSubject(a.AckSubject, false); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "ack_subject: "+err.Error())
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
	m, err := h.client(ctx).Conn().RequestWithContext(ctx, a.AckSubject, []byte(body))
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
	name, id := r.PathValue("name"), r.PathValue("id")
	if err := semaq.CheckStreamName(name); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "queue name: "+err.Error())
		return
	}
	if err := checkCancelID(id); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, err.Error())
		return
	}
	// The body is optional: {"token": "<cancel token of the publish>"};
	// a present one must be a JSON object, so a stray form post is not
	// taken as intent.
	var body struct {
		Token string `json:"token"`
	}
	if !decodeBody(w, r, "cancel body", maxAnswerBody, true, &body) {
		return
	}
	if body.Token != "" {
		if err := semaq.CheckCancelToken(body.Token); err != nil {
			writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, err.Error())
			return
		}
	}
	res, err := h.client(r.Context()).Cancel(r.Context(), name, id, client.CancelToken(body.Token))
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// checkCancelID accepts what a request id (Nats-Msg-Id) or a sequence can
// be: 1 to 256 bytes of UTF-8 without control characters.
func checkCancelID(id string) error {
	switch {
	case id == "", len(id) > 256:
		return fmt.Errorf("request id is %d bytes; want 1 to 256", len(id))
	case !utf8.ValidString(id):
		return errors.New("request id is not valid UTF-8")
	case strings.IndexFunc(id, isCTL) >= 0:
		return errors.New("request id has a control character")
	}
	return nil
}
