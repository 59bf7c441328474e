// Package api is how every subsystem of the broker serves its part of the
// $SQ.API management surface: one handler shape (Op), one strict request
// decoder, one mapping from JetStream and ingress errors to semaq.APIError,
// and the reply-subject check every request passes before it is acted on.
//
// A subsystem exposes its handlers as a Handlers map; the node subscribes
// them on its egress connection (docs/security.md), so whatever reply
// subject a client names, an answer cannot reach the broker's own
// namespaces.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/httpx"
	"github.com/semaq/semaq/semaq"
)

// Timeout bounds the work of one API request.
const Timeout = 10 * time.Second

// ChangeTimeout bounds a change that must reach a quorum even while the
// stream it writes elects a new leader (a node of three just stopped: the
// election, then the node's own watcher catching up, can take more than
// Timeout). It stays under the SDK's wait for such a change (30 s), so the
// caller gets the broker's answer, not its own timeout.
const ChangeTimeout = 25 * time.Second

// Handlers maps $SQ.API subjects (with wildcards) to their handlers.
type Handlers map[string]nats.MsgHandler

// Merge adds every handler of hs to h. A subject served twice is a wiring
// bug and panics.
func (h Handlers) Merge(hs ...Handlers) Handlers {
	for _, more := range hs {
		for subj, fn := range more {
			if _, dup := h[subj]; dup {
				panic("api: subject served twice: " + subj)
			}
			h[subj] = fn
		}
	}
	return h
}

// Op adapts one management operation to a NATS handler: it decodes the
// request strictly (an empty body is the zero request), runs op with a
// context bounded by Timeout and replies with its result, or with its
// error mapped by mapErr (Error(what) when nil).
func Op[Req any](log *slog.Logger, what string, op func(ctx context.Context, req *Req) (any, error), mapErr func(error) *semaq.APIError) nats.MsgHandler {
	return OpWithin(log, what, Timeout, op, mapErr)
}

// OpWithin is Op bounded by timeout instead of Timeout (ChangeTimeout for
// a change that waits for a quorum).
func OpWithin[Req any](log *slog.Logger, what string, timeout time.Duration, op func(ctx context.Context, req *Req) (any, error), mapErr func(error) *semaq.APIError) nats.MsgHandler {
	if mapErr == nil {
		mapErr = Error(what)
	}
	return func(m *nats.Msg) {
		var req Req
		if err := Decode(m.Data, &req); err != nil {
			ReplyErr(log, m, semaq.NewAPIError(semaq.ErrBadRequest, "%s: request is not valid: %v", what, err))
			return
		}
		ctx, cancel := context.WithTimeout(WithRequestHeader(context.Background(), m.Header), timeout)
		defer cancel()
		ctx, lag := withLagging(ctx)
		out, err := op(ctx, &req)
		if err != nil {
			ReplyErr(log, m, mapErr(err))
			return
		}
		replyJSON(log, m, out, lag.header())
	}
}

// lagging collects the nodes a handler's cluster sync found lagging.
type lagging struct {
	mu    sync.Mutex
	nodes []string
}

type laggingKey struct{}

func withLagging(ctx context.Context) (context.Context, *lagging) {
	l := &lagging{}
	return context.WithValue(ctx, laggingKey{}, l), l
}

// NoteLagging records, for the answer of the request ctx serves, the
// nodes that had not applied its change (semaq.HdrClusterLagging).
func NoteLagging(ctx context.Context, nodes []string) {
	l, ok := ctx.Value(laggingKey{}).(*lagging)
	if !ok || len(nodes) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, n := range nodes {
		if !slices.Contains(l.nodes, n) {
			l.nodes = append(l.nodes, n)
		}
	}
	slices.Sort(l.nodes)
}

// LaggingHeader is the semaq.HdrClusterLagging value of what was noted
// for ctx's request, "" when nothing was; ctx must come from
// WithLaggingNote.
func LaggingHeader(ctx context.Context) string {
	l, _ := ctx.Value(laggingKey{}).(*lagging)
	return l.header()
}

// WithLaggingNote prepares ctx, of a request served outside Op (the
// registry's REST API), for NoteLagging.
func WithLaggingNote(ctx context.Context) context.Context {
	ctx, _ = withLagging(ctx)
	return ctx
}

func (l *lagging) header() string {
	if l == nil {
		return ""
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.nodes, ",")
}

// AuditFunc records one admin change (docs/security.md, Audit). A handler
// calls it before acting, with the operation (semaq.AuditOp*) and the name
// of what it changes, and defers the function it returns with its named
// results: the record is written when the handler returns, with what the
// change left and the error if it was refused.
type AuditFunc func(ctx context.Context, op, target string) func(out *any, err *error)

// NoAudit records nothing: the AuditFunc of a subsystem given none.
func NoAudit(context.Context, string, string) func(*any, *error) { return func(*any, *error) {} }

// NamedOp is Op for the verbs whose subject ends in the name they act on
// ($SQ.API.STREAM.INFO.<name>): op gets that name with the request.
func NamedOp[Req any](log *slog.Logger, what string, op func(ctx context.Context, name string, req *Req) (any, error), mapErr func(error) *semaq.APIError) nats.MsgHandler {
	return func(m *nats.Msg) {
		name := LastToken(m.Subject)
		Op(log, what, func(ctx context.Context, req *Req) (any, error) { return op(ctx, name, req) }, mapErr)(m)
	}
}

// Decode decodes a request body strictly: two parsers of the same body
// must not act on different values, so duplicate keys, keys that differ
// from a field's name only in case, unknown keys, overlong numbers and
// deep nesting are refused (httpx.UnmarshalStrict). An empty body is the
// zero request.
func Decode(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	return httpx.UnmarshalStrict(data, v)
}

// Error passes semaq.APIError values through and describes any other
// error with JSError and what was being done.
func Error(what string) func(error) *semaq.APIError {
	return func(err error) *semaq.APIError {
		if ae, ok := errors.AsType[*semaq.APIError](err); ok {
			return ae
		}
		return JSError(err, "%s", what)
	}
}

// jsErrReplicasNotSupported is JetStream's answer to replicas > 1 on a
// single node. It comes as a 500, but it is the request that is wrong.
const jsErrReplicasNotSupported jetstream.ErrorCode = 10074

// JSError is the one mapping from a JetStream (or NATS) error to the
// error a SemaQ client sees: a missing stream is ErrStreamNotFound, a
// request JetStream refused is ErrBadStream with JetStream's description,
// a timeout is ErrUnavailable saying so, and anything else is
// ErrUnavailable with the error. A semaq.APIError passes through.
func JSError(err error, format string, args ...any) *semaq.APIError {
	if ae, ok := errors.AsType[*semaq.APIError](err); ok {
		return ae
	}
	what := fmt.Sprintf(format, args...)
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return semaq.NewAPIError(semaq.ErrStreamNotFound, "%s: not found", what)
	case errors.Is(err, jetstream.ErrInvalidStreamName):
		return semaq.NewAPIError(semaq.ErrBadStream, "%s: invalid name", what)
	case errors.As(err, &apiErr) && (apiErr.Code >= 400 && apiErr.Code < 500 || apiErr.ErrorCode == jsErrReplicasNotSupported):
		return &semaq.APIError{Code: 400, ErrCode: semaq.ErrCodeBadStream, Description: fmt.Sprintf("%s: %s", what, apiErr.Description)}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return semaq.NewAPIError(semaq.ErrUnavailable, "%s: JetStream did not answer in time", what)
	default:
		return semaq.NewAPIError(semaq.ErrUnavailable, "%s: %v", what, err)
	}
}

// CheckedReply refuses, before h acts, a request whose reply subject the
// broker must not publish to. It gets no answer: there is nowhere safe to
// send one.
func CheckedReply(log *slog.Logger, h nats.MsgHandler) nats.MsgHandler {
	return func(m *nats.Msg) {
		if m.Reply != "" {
			if err := semaq.CheckReplySubject(m.Reply); err != nil {
				log.Debug("api request refused", "subject", m.Subject, "err", err)
				return
			}
		}
		h(m)
	}
}

// ReplyJSON answers m with v encoded as JSON; a request without a reply
// subject gets nothing.
func ReplyJSON(log *slog.Logger, m *nats.Msg, v any) { replyJSON(log, m, v, "") }

// replyJSON is ReplyJSON with the nodes that lag, if any, in the
// reply's semaq.HdrClusterLagging.
func replyJSON(log *slog.Logger, m *nats.Msg, v any, lagging string) {
	if m.Reply == "" {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		ReplyErr(log, m, semaq.NewAPIError(semaq.ErrUnavailable, "encoding reply: %v", err))
		return
	}
	r := &nats.Msg{Data: b}
	if lagging != "" {
		r.Header = nats.Header{semaq.HdrClusterLagging: {lagging}}
	}
	if err := m.RespondMsg(r); err != nil {
		log.Warn("api reply", "subject", m.Subject, "err", err)
	}
}

// ReplyErr answers m with e.
func ReplyErr(log *slog.Logger, m *nats.Msg, e *semaq.APIError) {
	if m.Reply == "" {
		return
	}
	if err := m.Respond(semaq.MarshalError(e)); err != nil {
		log.Warn("api reply", "subject", m.Subject, "err", err)
	}
}

// LastToken is the last dot-separated token of subj: the name in
// $SQ.API.<FAMILY>.<VERB>.<name>.
func LastToken(subj string) string {
	if i := strings.LastIndexByte(subj, '.'); i >= 0 {
		return subj[i+1:]
	}
	return subj
}

// Chain is how a stream chains the messages of each session
// (docs/provenance.md): its provenance (semaq.ProvenanceSession or
// ProvenanceSigned) and its session order (semaq.SessionOrderStrict or
// StrictSeq). The zero Chain chains nothing.
type Chain struct {
	Provenance string
	Order      string
}

// On reports whether the stream chains its sessions at all.
func (c Chain) On() bool { return c.Provenance != "" || c.Order != "" }

// AnswerChain is where a job's token-stream answer is chained
// (semaq.QueueConfig.ChainAnswers): the subject of a stream with
// provenance, and the session and tenant of the request. The zero value
// chains nothing.
type AnswerChain struct {
	Subject string
	Session string
	Tenant  string // the request's AI-Tenant, "" for none
}

// On reports whether the answer is chained.
func (a AnswerChain) On() bool { return a.Subject != "" && a.Session != "" }
