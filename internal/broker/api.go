package broker

import (
	"bytes"
	"context"
	"errors"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/httpx"
	"github.com/semaq/semaq/semaq"
)

// apiOp adapts one management operation to a NATS handler: it decodes the
// request (an empty body is the zero request), runs op with a bounded
// context and replies with its result, or with its error mapped by mapErr.
// Every $SQ.API family (schema, dlq, route, agent) is built on it.
func apiOp[Req any](s *Server, what string, op func(ctx context.Context, req *Req) (any, error), mapErr func(error) *semaq.APIError) nats.MsgHandler {
	return func(m *nats.Msg) {
		var req Req
		if err := decodeAPI(m.Data, &req); err != nil {
			s.replyErr(m, semaq.NewAPIError(semaq.ErrBadRequest, "%s: request is not valid: %v", what, err))
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), apiTimeout)
		defer cancel()
		out, err := op(ctx, &req)
		if err != nil {
			s.replyErr(m, mapErr(err))
			return
		}
		s.replyJSON(m, out)
	}
}

// decodeAPI decodes a request body strictly: two parsers of the same body
// must not act on different values, so duplicate keys, keys that differ
// from a field's name only in case, unknown keys, overlong numbers and deep
// nesting are refused (httpx.UnmarshalStrict). An empty body is the zero
// request.
func decodeAPI(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	return httpx.UnmarshalStrict(data, v)
}

// apiError passes API errors through and describes JetStream errors with
// what was being done.
func (s *Server) apiError(what string) func(error) *semaq.APIError {
	return func(err error) *semaq.APIError {
		if ae, ok := errors.AsType[*semaq.APIError](err); ok {
			return ae
		}
		return s.jsError(err, "%s", what)
	}
}
