// Package audit keeps the record of admin changes (docs/security.md,
// Audit): the SQ_AUDIT stream, bounded by age and size, one record per
// change written by the broker alone, and $SQ.API.AUDIT.LIST, which reads
// it back for admins.
//
// The broker decides what is recorded (its handlers call
// Server.audit); this package stores and lists records. Writes are
// synchronous: a record is in the stream, or its failure is logged and
// counted, before the handler that made the change answers.
package audit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// Defaults of the stream's bounds (config keys audit_max_age,
// audit_max_bytes). Past either, the oldest records go.
const (
	DefaultMaxAge   = 90 * 24 * time.Hour
	DefaultMaxBytes = 256 << 20
)

// Bounds of one record: a before or after value over MaxValueBytes is
// replaced by its size and SHA-256; Target and Error are cut at
// MaxTextBytes.
const (
	MaxValueBytes = 16 << 10
	MaxTextBytes  = 1 << 10
)

// ErrClosed is the error of Record after Close.
var ErrClosed = errors.New("audit: closed")

// Deps is what the audit log needs.
type Deps struct {
	// JS creates and writes SQ_AUDIT and reads it for LIST: the internal
	// connection's JetStream (the only user that may write it).
	JS jetstream.JetStream
	// Conn bounds a LIST reply (its MaxPayload).
	Conn *nats.Conn
	// Log gets every record that could not be written, whole (an admin
	// change is never lost silently). Nil logs nothing.
	Log *slog.Logger
	// MaxAge and MaxBytes bound the stream; 0 keeps each default.
	MaxAge   time.Duration
	MaxBytes int64
	// Replicas of the stream when it is made or has fewer; 0 is 1. A
	// stream with more keeps them.
	Replicas int
	// Written counts a record stored, by outcome; Failed one that could
	// not be. Nil counts nothing.
	Written func(outcome string)
	Failed  func()
}

// Log is a node's audit log. Its methods are safe for concurrent use.
type Log struct {
	deps   Deps
	closed chan struct{}
}

// Open creates SQ_AUDIT, or updates its bounds to deps'.
func Open(ctx context.Context, deps Deps) (*Log, error) {
	if deps.JS == nil || deps.Conn == nil {
		return nil, errors.New("audit: JS and Conn are required")
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	if deps.MaxAge < 0 || deps.MaxBytes < 0 {
		return nil, fmt.Errorf("audit: max age %s and max bytes %d may not be negative", deps.MaxAge, deps.MaxBytes)
	}
	if deps.MaxAge == 0 {
		deps.MaxAge = DefaultMaxAge
	}
	if deps.MaxBytes == 0 {
		deps.MaxBytes = DefaultMaxBytes
	}
	if deps.Replicas == 0 {
		deps.Replicas = 1
	}
	// Every node of a cluster opens it at start, while the meta group may
	// be electing a leader: EnsureStream retries what is transient, bounds
	// each attempt (a request lost with a leader is not waited for until
	// ctx ends) and never lowers replicas raised before.
	_, err := jsutil.EnsureStream(ctx, deps.JS, jetstream.StreamConfig{
		Name:        reserved.AuditStream,
		Description: "SemaQ audit records: one per admin change (docs/security.md, Audit)",
		Subjects:    []string{reserved.AuditPrefix + ">"},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      deps.MaxAge,
		MaxBytes:    deps.MaxBytes,
		MaxMsgs:     -1,
		Replicas:    deps.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("audit: creating %s: %w", reserved.AuditStream, err)
	}
	return &Log{deps: deps, closed: make(chan struct{})}, nil
}

// Close ends the log: Record refuses after it. Records are written on the
// caller's goroutine, so there is nothing to wait for.
func (l *Log) Close(context.Context) error {
	select {
	case <-l.closed:
	default:
		close(l.closed)
	}
	return nil
}

// Value is v as a record's before or after: its JSON, or, past
// MaxValueBytes, its size and hash. nil stays nil (JSON null).
func Value(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	b, err := marshal(v)
	if err != nil {
		b, _ = marshal(map[string]string{"unencodable": err.Error()})
	}
	if string(b) == "null" {
		return nil
	}
	if len(b) > MaxValueBytes {
		sum := sha256.Sum256(b)
		b, _ = json.Marshal(struct {
			Truncated bool   `json:"truncated"`
			Bytes     int    `json:"bytes"`
			SHA256    string `json:"sha256"`
		}{true, len(b), hex.EncodeToString(sum[:])})
	}
	return b
}

// marshal is json.Marshal without HTML escapes: subjects keep their '>'
// in the stored bytes.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

func cut(s string) string {
	if len(s) > MaxTextBytes {
		return s[:MaxTextBytes] + "…"
	}
	return s
}

// Record stores rec in SQ_AUDIT, waiting for JetStream's ack. A failure is
// logged at error with the whole record and counted, and returned.
func (l *Log) Record(ctx context.Context, rec semaq.AuditRecord) error {
	rec.Seq = 0
	rec.Target, rec.Error = cut(rec.Target), cut(rec.Error)
	err := l.write(ctx, rec)
	if err != nil {
		if l.deps.Failed != nil {
			l.deps.Failed()
		}
		l.deps.Log.Error("audit: the record of an admin change could not be stored; it is here instead",
			"err", err, "op", rec.Op, "target", rec.Target, "principal", rec.Principal.Name(),
			"outcome", rec.Outcome, "error", rec.Error, "time", rec.Time,
			"before", string(rec.Before), "after", string(rec.After))
		return err
	}
	if l.deps.Written != nil {
		l.deps.Written(rec.Outcome)
	}
	return nil
}

func (l *Log) write(ctx context.Context, rec semaq.AuditRecord) error {
	select {
	case <-l.closed:
		return ErrClosed
	default:
	}
	if err := checkOp(rec.Op); err != nil {
		return err
	}
	b, err := marshal(rec)
	if err != nil {
		return err
	}
	_, err = l.deps.JS.Publish(ctx, reserved.AuditPrefix+rec.Op, b)
	return err
}

func checkOp(op string) error {
	for _, o := range semaq.AuditOps {
		if o == op {
			return nil
		}
	}
	return fmt.Errorf("audit: unknown operation %q", op)
}

// Handlers serves $SQ.API.AUDIT.LIST.
func (l *Log) Handlers() api.Handlers {
	return api.Handlers{semaq.APIAuditList: api.Op(l.deps.Log, "audit list", l.list, nil)}
}
