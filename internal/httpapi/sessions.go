package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/semaq/semaq/internal/httpx"
	"github.com/semaq/semaq/internal/sse"
	"github.com/semaq/semaq/semaq"
)

// Sessions over HTTP (docs/http.md, docs/sessions.md): the calls of
// $SQ.API.SESSION.*, made with the caller's connection so auth acts with
// the key's rights. A session's revision travels as its ETag ("3"), and a
// write takes If-Match with it to compare-and-set.

// Body bounds of the session endpoints. A document is at most
// semaq.MaxSessionBytes; a put carries settings beside it.
const (
	maxSessionBody  = semaq.MaxSessionBytes + 16<<10
	maxSessionSmall = 4 << 10 // trim, report
	// maxDocDepth bounds the nesting of a session document (data or merge
	// patch) sent over HTTP: what the broker's request decoding takes
	// (httpx.MaxDepth) with the request object around it.
	maxDocDepth = httpx.MaxDepth - 1
)

// sessionQuery reads r's query, refusing parameters other than allowed
// (tenant is always allowed) and any given twice, so a misspelt one is an
// error rather than ignored.
func sessionQuery(r *http.Request, allowed ...string) (map[string]string, error) {
	q := r.URL.Query()
	out := make(map[string]string, len(q))
	for k, vs := range q {
		if k != "tenant" && !slices.Contains(allowed, k) {
			want := strings.Join(append(slices.Clone(allowed), "tenant"), ", ")
			return nil, fmt.Errorf("unknown query parameter %q (want %s)", k, want)
		}
		if len(vs) > 1 {
			return nil, fmt.Errorf("query parameter %s is given %d times", k, len(vs))
		}
		out[k] = vs[0]
	}
	return out, nil
}

// sessionTarget checks r's session ID and query and returns the session
// it names, or answers 400 and returns false.
func sessionTarget(w http.ResponseWriter, r *http.Request, allowed ...string) (semaq.SessionRef, map[string]string, bool) {
	id := r.PathValue("id")
	if err := semaq.CheckSessionID(id); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadSession, err.Error())
		return semaq.SessionRef{}, nil, false
	}
	q, err := sessionQuery(r, allowed...)
	if err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, err.Error())
		return semaq.SessionRef{}, nil, false
	}
	return semaq.SessionRef{ID: id, Tenant: q["tenant"]}, q, true
}

// queryInt parses an integer query parameter within [lo, hi]; absent is
// def.
func queryInt(q map[string]string, name string, def, lo, hi int) (int, error) {
	v, ok := q[name]
	if !ok {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || len(v) > 20 {
		return 0, fmt.Errorf("%s=%q is not a number", name, v)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("%s=%d is outside %d to %d", name, n, lo, hi)
	}
	return n, nil
}

// errIfMatch is If-Match that is not one revision: 412.
type errIfMatch struct{ v string }

func (e errIfMatch) Error() string {
	return "If-Match " + quoteHeader(e.v) + " is not a revision number; send the ETag of the session (\"3\", or 3)"
}

// ifMatch reads the revision a write compares-and-sets on: nil without
// If-Match. The ETag form ("3") and a bare number are both taken; a list,
// a weak tag or * is not one revision.
func ifMatch(r *http.Request) (*uint64, error) {
	vs := r.Header.Values("If-Match")
	if len(vs) == 0 {
		return nil, nil
	}
	v := strings.TrimSpace(vs[0])
	if len(vs) > 1 {
		return nil, errIfMatch{strings.Join(vs, ", ")}
	}
	n := v
	if len(n) >= 2 && n[0] == '"' && n[len(n)-1] == '"' {
		n = n[1 : len(n)-1]
	}
	if n == "" || len(n) > 20 || strings.TrimLeft(n, "0123456789") != "" {
		return nil, errIfMatch{v}
	}
	rev, err := strconv.ParseUint(n, 10, 64)
	if err != nil {
		return nil, errIfMatch{v}
	}
	return &rev, nil
}

// revision merges If-Match with a revision given in the body: either, or
// both when they agree.
func revision(w http.ResponseWriter, r *http.Request, body *uint64) (*uint64, bool) {
	rev, err := ifMatch(r)
	if err != nil {
		writeError(w, http.StatusPreconditionFailed, semaq.ErrCodeBadRequest, err.Error())
		return nil, false
	}
	switch {
	case rev == nil:
		return body, true
	case body != nil && *body != *rev:
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest,
			fmt.Sprintf("If-Match names revision %d and the body revision %d; give one", *rev, *body))
		return nil, false
	}
	return rev, true
}

// setETag makes rev the answer's ETag.
func setETag(w http.ResponseWriter, rev uint64) {
	w.Header().Set("ETag", `"`+strconv.FormatUint(rev, 10)+`"`)
}

// writeSessionInfo answers a write: the session's metadata, its revision
// as the ETag.
func writeSessionInfo(w http.ResponseWriter, status int, info *semaq.SessionInfo) {
	setETag(w, info.Revision)
	writeJSON(w, status, info)
}

// readDocBody reads a body of at most limit bytes that must be a JSON
// object (checkDocument), or answers 413/408/400 and returns false.
func readDocBody(w http.ResponseWriter, r *http.Request, what string, limit int64) ([]byte, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		writeError(w, http.StatusRequestTimeout, semaq.ErrCodeBadRequest, what+": body not received in time")
		return nil, false
	case err != nil:
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, what+": reading the body: "+err.Error())
		return nil, false
	case int64(len(body)) > limit:
		writeError(w, http.StatusRequestEntityTooLarge, semaq.ErrCodeTooLarge, what+": "+(&httpx.TooLargeError{Limit: limit}).Error())
		return nil, false
	}
	if err := checkDocument(body); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadSession, what+": "+err.Error())
		return nil, false
	}
	return body, true
}

// checkDocument accepts one JSON object such as a session's data: valid
// UTF-8, nothing after it, no key twice in one object (two parsers would
// keep different ones), nesting at most maxDocDepth. Unlike the API's own
// bodies (httpx.DecodeStrict) keys are data: "a" and "A" are two keys.
func checkDocument(b []byte) error {
	if len(bytes.TrimSpace(b)) == 0 {
		return errors.New("the body is empty; send a JSON object")
	}
	if !utf8.Valid(b) {
		return errors.New("the body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	// One frame per open object or array: an object's keys so far, and
	// whether a key has been read whose value comes next.
	type frame struct {
		keys   map[string]struct{}
		object bool
		key    bool
	}
	var stack []frame
	first := true
	for {
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("not valid JSON: %v", err)
		}
		if first {
			if d, ok := tok.(json.Delim); !ok || d != '{' {
				return fmt.Errorf("a JSON %s; want an object", tokenKind(tok))
			}
			first = false
		}
		top := len(stack) - 1
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			stack = stack[:top]
			if len(stack) == 0 {
				break
			}
			stack[len(stack)-1].key = false
			continue
		}
		if top >= 0 && stack[top].object && !stack[top].key {
			key := tok.(string) // the decoder allows only a string here
			if _, dup := stack[top].keys[key]; dup {
				return fmt.Errorf("key %q appears twice in one object", key)
			}
			stack[top].keys[key] = struct{}{}
			stack[top].key = true
			continue
		}
		if d, ok := tok.(json.Delim); ok {
			if len(stack) >= maxDocDepth {
				return fmt.Errorf("nested deeper than %d levels", maxDocDepth)
			}
			f := frame{object: d == '{'}
			if f.object {
				f.keys = make(map[string]struct{})
			}
			stack = append(stack, f)
			continue
		}
		if top >= 0 {
			stack[top].key = false
		}
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("the body has data after the JSON object")
	}
	return nil
}

func tokenKind(tok json.Token) string {
	switch tok.(type) {
	case json.Delim:
		return "array"
	case string:
		return "string"
	case bool:
		return "boolean"
	case nil:
		return "null"
	}
	return "number"
}

// parseSessionPut reads the body of PUT /api/v1/sessions/{id}:
// {"data":{...},"settings":{...}}, data required, settings optional.
func parseSessionPut(body []byte) (json.RawMessage, *semaq.SessionSettings, error) {
	if err := checkDocument(body); err != nil {
		return nil, nil, err
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, nil, fmt.Errorf("not valid: %v", err)
	}
	for k := range top {
		if k != "data" && k != "settings" {
			return nil, nil, fmt.Errorf("unknown key %q (want data and, optionally, settings)", k)
		}
	}
	data, ok := top["data"]
	if !ok {
		return nil, nil, errors.New(`no "data": send {"data":{...}}`)
	}
	if err := checkDocument(data); err != nil {
		return nil, nil, fmt.Errorf("data: %v", err)
	}
	raw, ok := top["settings"]
	if !ok || string(raw) == "null" {
		return data, nil, nil
	}
	var set semaq.SessionSettings
	if err := httpx.UnmarshalStrict(raw, &set); err != nil {
		return nil, nil, fmt.Errorf("settings: %v", err)
	}
	check := set // the broker fills the defaults itself
	if err := semaq.CheckSessionSettings(&check); err != nil {
		return nil, nil, fmt.Errorf("settings: %v", err)
	}
	return data, &set, nil
}

func (h *Handler) sessionList(w http.ResponseWriter, r *http.Request) {
	q, err := sessionQuery(r, "state", "limit", "after")
	if err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, err.Error())
		return
	}
	req := semaq.SessionListRequest{Tenant: q["tenant"], After: q["after"]}
	switch st := semaq.SessionState(q["state"]); st {
	case "", semaq.SessionActive, semaq.SessionStale, semaq.SessionDegraded:
		req.State = st
	default:
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "state="+strconv.Quote(q["state"])+": want active, stale or degraded")
		return
	}
	if req.After != "" {
		if err := semaq.CheckSessionID(req.After); err != nil {
			writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "after: "+err.Error())
			return
		}
	}
	if req.Limit, err = queryInt(q, "limit", 100, 1, semaq.SessionListMax); err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, err.Error())
		return
	}
	resp, err := h.client(r.Context()).Sessions(r.Context(), req)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

func (h *Handler) sessionGet(w http.ResponseWriter, r *http.Request) {
	ref, q, ok := sessionTarget(w, r, "rounds")
	if !ok {
		return
	}
	rounds, err := queryInt(q, "rounds", 0, -1, 1<<30)
	if err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, err.Error()+" (-1: every round)")
		return
	}
	s, err := h.client(r.Context()).GetSession(r.Context(), ref, rounds)
	if err != nil {
		writeErr(w, err)
		return
	}
	setETag(w, s.Revision)
	writeJSON(w, http.StatusOK, s)
}

func (h *Handler) sessionPut(w http.ResponseWriter, r *http.Request) {
	ref, _, ok := sessionTarget(w, r)
	if !ok {
		return
	}
	rev, ok := revision(w, r, nil)
	if !ok {
		return
	}
	body, ok := readDocBody(w, r, "session body", maxSessionBody)
	if !ok {
		return
	}
	data, set, err := parseSessionPut(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadSession, "session body: "+err.Error())
		return
	}
	info, err := h.client(r.Context()).PutSession(r.Context(), semaq.SessionPutRequest{SessionRef: ref, Data: data, Revision: rev, Settings: set})
	if err != nil {
		h.writeSessionErr(w, r, ref, err)
		return
	}
	status := http.StatusOK
	if info.Revision == 1 {
		status = http.StatusCreated
	}
	writeSessionInfo(w, status, info)
}

func (h *Handler) sessionDelete(w http.ResponseWriter, r *http.Request) {
	ref, _, ok := sessionTarget(w, r)
	if !ok {
		return
	}
	if err := h.client(r.Context()).DeleteSession(r.Context(), ref); err != nil {
		writeErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"deleted": true})
}

// mergePatchType says whether ct names a JSON merge patch: RFC 7396's
// media type, or plain JSON.
func mergePatchType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == "application/merge-patch+json" || mt == "application/json")
}

func (h *Handler) sessionPatch(w http.ResponseWriter, r *http.Request) {
	ref, q, ok := sessionTarget(w, r, "create")
	if !ok {
		return
	}
	if ct := r.Header.Get("Content-Type"); !mergePatchType(ct) {
		writeError(w, http.StatusUnsupportedMediaType, semaq.ErrCodeBadRequest,
			"Content-Type "+quoteHeader(ct)+" is not a merge patch: send application/merge-patch+json or application/json")
		return
	}
	create := false
	if v, ok := q["create"]; ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "create="+strconv.Quote(v)+": want true or false")
			return
		}
		create = b
	}
	rev, ok := revision(w, r, nil)
	if !ok {
		return
	}
	patch, ok := readDocBody(w, r, "merge patch", semaq.MaxSessionBytes)
	if !ok {
		return
	}
	info, err := h.client(r.Context()).PatchSession(r.Context(), semaq.SessionPatchRequest{SessionRef: ref, Patch: patch, Revision: rev, Create: create})
	if err != nil {
		h.writeSessionErr(w, r, ref, err)
		return
	}
	writeSessionInfo(w, http.StatusOK, info)
}

func (h *Handler) sessionRounds(w http.ResponseWriter, r *http.Request) {
	ref, q, ok := sessionTarget(w, r, "last", "round")
	if !ok {
		return
	}
	req := semaq.SessionRoundsRequest{SessionRef: ref}
	var err error
	if req.Last, err = queryInt(q, "last", 0, 0, 1<<30); err == nil {
		req.Round, err = queryInt(q, "round", 0, 1, 1<<30)
	}
	if err == nil && req.Last > 0 && req.Round > 0 {
		err = errors.New("give last or round, not both")
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, err.Error())
		return
	}
	resp, err := h.client(r.Context()).SessionRounds(r.Context(), req)
	if err != nil {
		writeErr(w, err)
		return
	}
	if resp.Rounds == nil {
		resp.Rounds = []semaq.SessionRound{}
	}
	setETag(w, resp.Revision)
	writeJSON(w, http.StatusOK, resp)
}

// httpRoundAdd is the body of POST /api/v1/sessions/{id}/rounds: a
// semaq.SessionRoundAddRequest without the session's name.
type httpRoundAdd struct {
	Round    int                    `json:"round,omitempty"`
	Messages []semaq.SessionMessage `json:"messages"`
	Tokens   int                    `json:"tokens,omitempty"`
	Revision *uint64                `json:"revision,omitempty"`
	Create   bool                   `json:"create,omitempty"`
}

func (h *Handler) sessionRoundAdd(w http.ResponseWriter, r *http.Request) {
	ref, _, ok := sessionTarget(w, r)
	if !ok {
		return
	}
	var b httpRoundAdd
	if !decodeBody(w, r, "round body", maxSessionBody, false, &b) {
		return
	}
	switch {
	case len(b.Messages) == 0:
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadSession, `round body: no messages; send {"messages":[{"role":"user","content":"..."}]}`)
		return
	case b.Round < 0, b.Tokens < 0:
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadSession, fmt.Sprintf("round body: round %d and tokens %d may not be negative", b.Round, b.Tokens))
		return
	}
	rev, ok := revision(w, r, b.Revision)
	if !ok {
		return
	}
	info, err := h.client(r.Context()).AddRound(r.Context(), semaq.SessionRoundAddRequest{
		SessionRef: ref, Round: b.Round, Messages: b.Messages, Tokens: b.Tokens, Revision: rev, Create: b.Create})
	if err != nil {
		h.writeSessionErr(w, r, ref, err)
		return
	}
	writeSessionInfo(w, http.StatusOK, info)
}

func (h *Handler) sessionTrim(w http.ResponseWriter, r *http.Request) {
	ref, _, ok := sessionTarget(w, r)
	if !ok {
		return
	}
	var b struct {
		BeforeRound int     `json:"before_round"`
		Revision    *uint64 `json:"revision,omitempty"`
	}
	if !decodeBody(w, r, "trim body", maxSessionSmall, false, &b) {
		return
	}
	if b.BeforeRound < 1 {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadSession, fmt.Sprintf("trim body: before_round %d: want a round number from 1", b.BeforeRound))
		return
	}
	rev, ok := revision(w, r, b.Revision)
	if !ok {
		return
	}
	info, err := h.client(r.Context()).TrimSession(r.Context(), semaq.SessionTrimRequest{SessionRef: ref, BeforeRound: b.BeforeRound, Revision: rev})
	if err != nil {
		h.writeSessionErr(w, r, ref, err)
		return
	}
	writeSessionInfo(w, http.StatusOK, info)
}

func (h *Handler) sessionReport(w http.ResponseWriter, r *http.Request) {
	ref, _, ok := sessionTarget(w, r)
	if !ok {
		return
	}
	var b struct {
		Confidence *float64 `json:"confidence"`
	}
	if !decodeBody(w, r, "report body", maxSessionSmall, false, &b) {
		return
	}
	if b.Confidence == nil || !(*b.Confidence >= 0 && *b.Confidence <= 1) {
		msg := `report body: no "confidence"; send {"confidence":0.8}`
		if b.Confidence != nil {
			msg = fmt.Sprintf("report body: confidence %v is outside 0 to 1", *b.Confidence)
		}
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadSession, msg)
		return
	}
	info, err := h.client(r.Context()).ReportSession(r.Context(), ref, *b.Confidence)
	if err != nil {
		writeErr(w, err)
		return
	}
	writeSessionInfo(w, http.StatusOK, info)
}

// namesRevision matches a conflict message that says where the session
// is: at a revision, or not there at all.
var namesRevision = regexp.MustCompile(`at revision \d|does not exist`)

// writeSessionErr answers a failed write. A conflict names the revision
// the session is at, when the broker's message does not, so the client
// can read and retry without guessing.
func (h *Handler) writeSessionErr(w http.ResponseWriter, r *http.Request, ref semaq.SessionRef, err error) {
	apiErr, ok := errors.AsType[*semaq.APIError](err)
	if !ok || !errors.Is(err, semaq.ErrSessionConflict) || namesRevision.MatchString(apiErr.Description) {
		writeErr(w, err)
		return
	}
	msg := apiErr.Description
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.WriteTimeout/2)
	defer cancel()
	if s, gerr := h.client(ctx).GetSession(ctx, ref, 0); gerr == nil {
		setETag(w, s.Revision)
		msg = fmt.Sprintf("%s: the session is at revision %d", msg, s.Revision)
	} else if errors.Is(gerr, semaq.ErrSessionNotFound) {
		msg += ": the session does not exist"
	}
	writeError(w, http.StatusConflict, apiErr.ErrCode, msg)
}

// sessionWatch streams a session's deltas as Server-Sent Events: one
// "delta" event per content change, its id the revision and its data the
// semaq.SessionDelta; an "end" event when the session is deleted or
// expires. from_revision=N starts at revision N (the kept deltas first);
// without it only changes made from now are sent. A reconnecting
// EventSource sends Last-Event-ID and resumes after that revision.
func (h *Handler) sessionWatch(w http.ResponseWriter, r *http.Request) {
	ref, q, ok := sessionTarget(w, r, "from_revision")
	if !ok {
		return
	}
	var from uint64
	if v, ok := q["from_revision"]; ok {
		n, err := parseSeq(v)
		if err != nil || n == 0 {
			writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest, "from_revision="+strconv.Quote(v)+": want a revision from 1")
			return
		}
		from = n
	}
	next, resume, err := sse.ResumeSeq(r.Header)
	if err != nil {
		writeError(w, http.StatusBadRequest, semaq.ErrCodeBadRequest,
			"Last-Event-ID "+quoteHeader(r.Header.Get(sse.HeaderLastEventID))+" is not a revision")
		return
	}
	if resume {
		from = next
	}
	if _, ok := w.(http.Flusher); !ok {
		writeError(w, http.StatusInternalServerError, semaq.ErrCodeInternal, "streaming is not supported by this connection")
		return
	}
	c := h.client(r.Context())
	if r.Method == http.MethodHead {
		if _, err := c.GetSession(r.Context(), ref, 0); err != nil {
			writeErr(w, err)
			return
		}
		sse.WriteHeader(w)
		return
	}
	release, ok := h.acquireStream(w)
	if !ok {
		return
	}
	defer release()
	// Before the head goes out, so a missing session is a 404 and a
	// revision no longer kept a 410, not an event.
	cur, err := c.GetSession(r.Context(), ref, 0)
	if err != nil {
		writeErr(w, err)
		return
	}
	if from == 0 {
		from = cur.Revision + 1
	}
	if from != cur.Revision+1 {
		// Deltas no longer kept (410), or a revision the session has
		// not reached (400).
		if _, err := c.SessionDeltas(r.Context(), semaq.SessionDeltasRequest{SessionRef: ref, After: from - 1, Limit: 1}); err != nil {
			writeErr(w, err)
			return
		}
	}

	ew := sse.NewStream(w, h.opts.StreamWriteTimeout)
	ew.Start()
	if ew.Write(fmt.Appendf(nil, ": watching session %s from revision %d\n\n", ref.ID, from)) != nil {
		return
	}
	ctx, stop := h.streamContext(r)
	defer stop()
	watch := c.WatchSession(ref, from)
	var (
		buf  []byte
		data bytes.Buffer
	)
	enc := json.NewEncoder(&data)
	enc.SetEscapeHTML(false)
	for {
		wait, stopWait := context.WithTimeout(ctx, sse.KeepAlive)
		d, err := watch.Next(wait)
		stopWait()
		var revoked *keyRevokedError
		switch {
		case errors.As(context.Cause(ctx), &revoked):
			failStream(ew, revoked.Error())
			return
		case ctx.Err() != nil:
			return
		case err == nil:
		case errors.Is(err, context.DeadlineExceeded):
			if ew.KeepAlive() != nil {
				h.dropSlow(ew, "session "+ref.ID)
				return
			}
			continue
		case errors.Is(err, semaq.ErrSessionNotFound):
			end := fmt.Sprintf(`{"id":%s,"revision":%d,"message":"the session was deleted or expired"}`, jsonString(ref.ID), watch.Revision())
			_ = ew.Write(sse.AppendEvent(nil, sse.Event{ID: strconv.FormatUint(watch.Revision(), 10), Type: "end", Data: end}))
			return
		default:
			failStream(ew, err.Error())
			return
		}
		data.Reset()
		if err := enc.Encode(d); err != nil {
			failStream(ew, err.Error())
			return
		}
		buf = sse.AppendEvent(buf[:0], sse.Event{ID: strconv.FormatUint(d.Revision, 10), Type: "delta",
			Data: strings.TrimSuffix(data.String(), "\n")})
		if ew.Write(buf) != nil {
			h.dropSlow(ew, "session "+ref.ID)
			return
		}
	}
}
