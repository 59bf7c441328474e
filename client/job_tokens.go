package client

import (
	"context"
	"fmt"
	"strings"

	"github.com/semaq/semaq/semaq"
)

// Token streams of jobs: the broker binds a job's request id to the job's
// lease when it hands the job out, so the worker holding the job is the
// only writer of the request's token stream (docs/tokens.md, "Trust
// model"). A redelivered job gets a new lease, and the previous holder
// can write no more.

// tokenKey is the job's lease, the last token of its reply subject
// $SQ.QA.<queue>.<seq>.<lease>.
func (j *Job) tokenKey() (string, error) {
	i := strings.LastIndexByte(j.reply, '.')
	if !strings.HasPrefix(j.reply, semaq.QueueAckPrefix) || i < 0 {
		return "", semaq.NewAPIError(semaq.ErrBadRequest, "client: job %s has no lease (reply subject %q)", j.key(), j.reply)
	}
	key := j.reply[i+1:]
	if err := semaq.CheckTokenKey(key); err != nil {
		return "", semaq.NewAPIError(semaq.ErrBadRequest, "client: job %s: lease as writer key: %v", j.key(), err)
	}
	return key, nil
}

// OpenTokenStream starts writing the token stream of the job's request
// (its ID), keyed by the job's lease, for the job's tenant
// (WithStreamRequest of its headers). Options as for
// Client.OpenTokenStream; a WithWriterKey among them is overridden.
func (j *Job) OpenTokenStream(ctx context.Context, opts ...TokenStreamOption) (*TokenWriter, error) {
	key, err := j.tokenKey()
	if err != nil {
		return nil, err
	}
	if j.ID == "" {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: job %s has no request id (Nats-Msg-Id) to stream tokens under", j.key())
	}
	all := make([]TokenStreamOption, 0, len(opts)+2)
	all = append(append(append(all, WithStreamRequest(j.Header)), opts...), WithWriterKey(key))
	return j.c.OpenTokenStream(ctx, j.ID, all...)
}

// AbortTokenStream ends the token stream of the job's request with an
// error, as Client.AbortTokenStream, keyed by the job's lease: a
// redelivered job's worker ends what the previous holder left unfinished.
func (j *Job) AbortTokenStream(ctx context.Context, te *semaq.TokenError) error {
	key, err := j.tokenKey()
	if err != nil {
		return err
	}
	if err := j.c.AbortTokenStream(ctx, j.ID, te, WithWriterKey(key),
		WithStreamTraceParent(j.Header.Get(semaq.HdrTraceParent)), WithStreamSession(j.Header.Get(semaq.HdrSession))); err != nil {
		return fmt.Errorf("client: job %s: %w", j.key(), err)
	}
	return nil
}
