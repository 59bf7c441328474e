package pump

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/semaq"
)

const (
	// DefaultAckWait and DefaultMaxAckPending apply when a request names
	// none.
	DefaultAckWait       = 30 * time.Second
	DefaultMaxAckPending = 1000
	// ephemeralInactive is a safety net for an ephemeral consumer: its
	// pump deletes it when it stops; a crashed broker cannot.
	ephemeralInactive = 5 * time.Minute
)

// BadFunc makes a request error in its subsystem's words.
type BadFunc func(format string, args ...any) error

// Spec is the consumer a pump pulls through, as a client asked for it.
type Spec struct {
	Durable       string // "" for an ephemeral consumer
	Subject       string // the public subject it follows
	AckWait       time.Duration
	MaxAckPending int
	StartSeq      uint64 // > 0: deliver from this stream sequence
	Deliver       string // "new", or anything else for all
	// MetaKey and Expr: the consumer's metadata stores the expression it
	// was made with, so a resume by name can check it (Resume).
	MetaKey, Expr string
}

// Config is the JetStream configuration for s: explicit acks, the
// defaults where s names none, and the deliver policy.
func (s Spec) Config() jetstream.ConsumerConfig {
	cfg := jetstream.ConsumerConfig{
		Durable:       s.Durable,
		FilterSubject: s.Subject,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       s.AckWait,
		MaxAckPending: s.MaxAckPending,
		Metadata:      map[string]string{s.MetaKey: s.Expr},
	}
	if cfg.AckWait == 0 {
		cfg.AckWait = DefaultAckWait
	}
	if cfg.MaxAckPending == 0 {
		cfg.MaxAckPending = DefaultMaxAckPending
	}
	if s.Durable == "" {
		cfg.InactiveThreshold = ephemeralInactive
	}
	switch {
	case s.StartSeq > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, s.StartSeq
	case s.Deliver == "new":
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy
	default:
		cfg.DeliverPolicy = jetstream.DeliverAllPolicy
	}
	return cfg
}

// Words is how a subsystem refuses a request: Bad makes a request error;
// the rest are formats. Overloaded describes ErrOverloaded when the node
// already runs Deps.Max, and takes that count. The others say why an
// existing durable is not the one a request names: NotOurs takes the
// durable's name; OtherExpr and OtherSubject take the name, what the
// durable has and what the request wants.
type Words struct {
	Bad          BadFunc
	Overloaded   string
	NotOurs      string // no expression in its metadata: made by someone else
	OtherExpr    string // made with another expression
	OtherSubject string // follows another subject
}

// Resume looks up the durable s names on stream. It returns nil and
// s.Expr when there is none yet; otherwise the consumer and its stored
// expression, or a request error worded by w when the durable was made for
// something else (s.Expr "" takes whatever is stored).
func Resume(ctx context.Context, js jetstream.JetStream, stream string, s Spec, w Words) (jetstream.Consumer, string, error) {
	cons, err := js.Consumer(ctx, stream, s.Durable)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		return nil, s.Expr, nil
	case err != nil:
		return nil, "", err
	}
	cfg := cons.CachedInfo().Config
	have := cfg.Metadata[s.MetaKey]
	switch {
	case have == "":
		return nil, "", w.Bad(w.NotOurs, s.Durable)
	case s.Expr != "" && s.Expr != have:
		return nil, "", w.Bad(w.OtherExpr, s.Durable, have, s.Expr)
	case cfg.FilterSubject != s.Subject:
		return nil, "", w.Bad(w.OtherSubject, s.Durable, cfg.FilterSubject, s.Subject)
	}
	return cons, have, nil
}

// CheckDeliver refuses a deliver subject that is not a plain subject or
// lies in a namespace the broker must not publish to.
func CheckDeliver(deliver string, bad BadFunc) error {
	if err := semaq.CheckSubject(deliver, false); err != nil {
		return bad("deliver_subject: %v", err)
	}
	if err := semaq.CheckReplySubject(deliver); err != nil {
		// The broker publishes there: never into its own namespaces.
		return bad("deliver_subject: %v; use an inbox", err)
	}
	return nil
}

// CheckLimits refuses negative limits and a max_ack_pending over most.
func CheckLimits(maxAckPending int, ackWait time.Duration, most int, bad BadFunc) error {
	if maxAckPending < 0 || ackWait < 0 {
		return bad("max_ack_pending and ack_wait may not be negative")
	}
	if maxAckPending > most {
		return bad("max_ack_pending %d is over %d", maxAckPending, most)
	}
	return nil
}
