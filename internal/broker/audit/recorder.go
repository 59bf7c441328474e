package audit

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/semaq"
)

// What each admin change records (docs/security.md, Audit).
//
// Every handler that changes streams, queues, schemas, routes, users, keys
// or dead letters starts with one line,
//
//	defer deps.Audit(ctx, semaq.AuditOpStreamCreate, name)(&out, &err)
//
// which reads the principal from the request and what the change is about
// before it runs, and, when the handler returns, what it left, and writes
// one record: refused changes too, with their error. The record is
// written before the handler answers. If it cannot be written, the change
// stands (it is made by then, and most cannot be undone: a deleted
// stream's messages are gone) and the record goes to the log at error
// level and to semaq_audit_write_failures_total instead.

// writeTimeout bounds the after-read and the write of one record, whatever
// time the change itself took.
const writeTimeout = 5 * time.Second

// Reader reads the state an operation changes, for its record's before
// and after; it returns nil when there is nothing (the stream does not
// exist). No reader returns a key or a secret.
type Reader func(ctx context.Context, target string) any

// Recorder is the node's api.AuditFunc: it writes the records of l. The
// subsystem that owns an operation says how its state is read (Reads);
// an operation without a reader is recorded by its answer. Safe for
// concurrent use.
type Recorder struct {
	log       *Log // nil records nothing
	node      string
	principal func(nats.Header) api.Principal

	mu      sync.RWMutex
	readers map[string]Reader
}

// NewRecorder records into l (nil: nowhere) as node; principal names who
// asks, from a request's headers.
func NewRecorder(l *Log, node string, principal func(nats.Header) api.Principal) *Recorder {
	return &Recorder{log: l, node: node, principal: principal, readers: map[string]Reader{}}
}

// Reads makes read the reader of ops.
func (r *Recorder) Reads(read Reader, ops ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, op := range ops {
		r.readers[op] = read
	}
}

func (r *Recorder) reader(op string) Reader {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.readers[op]
}

// Audit is an api.AuditFunc: the change op on target, asked through
// $SQ.API by the principal of the request ctx serves.
func (r *Recorder) Audit(ctx context.Context, op, target string) func(out *any, err *error) {
	return r.As(ctx, r.principal(api.RequestHeader(ctx)), "", op, target)
}

// As records a change asked by p through door ("" for $SQ.API).
func (r *Recorder) As(ctx context.Context, p api.Principal, door, op, target string) func(out *any, err *error) {
	if r == nil || r.log == nil {
		return func(*any, *error) {}
	}
	read := r.reader(op)
	var before json.RawMessage
	if read != nil {
		before = Value(read(ctx, target))
	}
	return func(out *any, err *error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), writeTimeout)
		defer cancel()
		rec := semaq.AuditRecord{
			Time: time.Now().UTC(), Node: r.node, Door: door, Op: op, Target: target, Outcome: semaq.AuditOK, Before: before,
			Principal: semaq.AuditPrincipal{Who: string(p.Who), User: p.User, Tenant: p.Tenant, Role: p.Role},
		}
		if err != nil && *err != nil {
			rec.Outcome, rec.Error = semaq.AuditRefused, (*err).Error()
		}
		switch {
		case read != nil:
			// Refused changes too: what they left, which is what there
			// was unless the refusal came halfway.
			rec.After = Value(read(ctx, target))
		case rec.Outcome == semaq.AuditOK && out != nil:
			// Only for operations without a reader (dead letters): their
			// answers carry counts and sequences, never a key.
			rec.After = Value(*out)
		}
		_ = r.log.Record(ctx, rec)
	}
}
