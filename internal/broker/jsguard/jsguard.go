// Package jsguard is the JetStream guard (docs/security.md, Subjects
// users choose).
//
// JetStream publishes as the NATS server, with no permissions, on two
// kinds of subject a client names: the reply subject of an API request
// and a push consumer's deliver subject. Replies are safe by where users
// live: every user account (the public one included) reaches JetStream
// through service imports (the broker's tenancy.go), so an answer goes
// back through the server's _R_ mapping into the requester's own
// account, never into the node's, where storage, advisories and the
// broker's subjects are. A deliver subject is not a reply: JetStream
// publishes on it in the node's account, where the consumer lives. So
// the imports of consumer create and update map them to
// reserved.JetStreamGuardPrefix, where the guard checks the deliver
// subject before it hands the request on to JetStream: an inbox of the
// requester or nothing. Stream snapshots (whose deliver subject is chosen
// the same way) are closed to users (the broker's permissions.go): a
// backup is the node's (operator credentials).
package jsguard

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/quietlog"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

const (
	// prefix is where user accounts' consumer create and update calls
	// arrive in the node's account: prefix+"CONSUMER.CREATE.…" for
	// $JS.API.CONSUMER.CREATE.…, and so on.
	prefix = reserved.JetStreamGuardPrefix
	// inbox is the guard's own reply inbox (the broker's inboxes).
	inbox = reserved.JetStreamGuardInbox
	// concurrency bounds the calls one node hands on at once; more wait
	// in the subscription's pending buffer, whose bound is the NATS
	// client's (a slow consumer drops them, and their clients time out).
	concurrency = 64
)

// Deps is what the guard needs of the node. Every field is required.
type Deps struct {
	// Internal connects a client of the node's internal user to its NATS
	// server, with opts added: the guard's own connection, with an inbox
	// of its own.
	Internal func(opts ...nats.Option) (*nats.Conn, error)
	// Egress sends to subjects clients chose: the guard answers the
	// requester's reply there.
	Egress *nats.Conn
	// Auth is the node's --auth: with it a push consumer delivers to its
	// maker's user inbox, without it to PublicInbox.
	Auth bool
	// PublicInbox is the inbox pattern (a prefix and ">") of clients
	// without credentials, with auth off.
	PublicInbox string
	// ReplyPrefix starts the NATS server's reply mappings across
	// accounts: a call that came through an import has its reply there.
	ReplyPrefix string
	// Principal is who sent a call with headers h. It must not block.
	Principal func(h nats.Header) api.Principal
	// Refused counts a refused call by its reason (metrics). It must not
	// block.
	Refused func(reason string)
	// Log is the node's logger; the guard's lines start with
	// "jetstream guard:".
	Log *slog.Logger
	// Gate runs each call handed on; Close closes it.
	Gate *subsystem.Gate
}

// Guard serves reserved.JetStreamGuardPrefix on a node. Its connection
// has an inbox of its own: JetStream takes a call's account from the
// requester a reply leads back to, so the guard asks with its own reply
// and relays the answer.
type Guard struct {
	deps Deps
	log  *slog.Logger
	nc   *nats.Conn
	sub  *nats.Subscription
	busy chan struct{} // a slot per call handed on
	// quiet keeps the guard's refusals to a line a second.
	quiet quietlog.Gate
}

// Open serves the guard's prefix. Closing it stops taking calls and
// waits for those under way.
func Open(ctx context.Context, deps Deps) (*Guard, error) {
	fail := func(err error) (*Guard, error) {
		_ = deps.Gate.Close(ctx)
		return nil, fmt.Errorf("broker: jetstream guard: %w", err)
	}
	nc, err := deps.Internal(nats.Name("semaq-jsguard"), nats.CustomInboxPrefix(inbox), nats.MaxReconnects(-1))
	if err != nil {
		return fail(err)
	}
	g := &Guard{deps: deps, log: deps.Log, nc: nc, busy: make(chan struct{}, concurrency)}
	if g.sub, err = nc.QueueSubscribe(prefix+">", reserved.APIQueueGroup, g.take); err != nil {
		nc.Close()
		return fail(err)
	}
	if err := nc.Flush(); err != nil {
		nc.Close()
		return fail(err)
	}
	return g, nil
}

// Close stops taking calls, waits for those under way (or ctx), and
// closes the guard's connection.
func (g *Guard) Close(ctx context.Context) error {
	_ = g.sub.Unsubscribe()
	err := g.deps.Gate.Close(ctx)
	g.nc.Close()
	return err
}

// take hands call m on in a goroutine of its own, once one of the
// concurrency slots is free. Once the gate closes, calls are dropped, as
// the subscription's are; their clients time out.
func (g *Guard) take(m *nats.Msg) {
	g.busy <- struct{}{}
	if !g.deps.Gate.Go("call", func(context.Context) {
		defer func() { <-g.busy }()
		g.guard(m)
	}) {
		<-g.busy
	}
}

// guard checks one consumer create or update and hands it on to
// JetStream, then relays JetStream's answer to the requester.
func (g *Guard) guard(m *nats.Msg) {
	call := strings.TrimPrefix(m.Subject, prefix)
	if !strings.HasPrefix(m.Reply, g.deps.ReplyPrefix) {
		// Not through an import: nobody but a user account reaches this
		// subject, and JetStream answers there without a reply.
		g.refuse("not_imported", "a call without an import's reply dropped", "subject", m.Subject)
		return
	}
	if err := g.checkConsumerCall(m.Header, m.Data); err != nil {
		g.refuse("deliver_subject", "consumer refused", "call", call, "err", err.Description)
		g.replyError(m.Reply, err)
		return
	}
	// The request as JetStream reads it, without the header the import
	// added: the consumer is the node's account's, as it always was. A
	// call under way completes when the guard closes.
	ctx, cancel := context.WithTimeout(context.Background(), api.Timeout)
	defer cancel()
	resp, err := g.nc.RequestWithContext(ctx, "$JS.API."+call, m.Data)
	if err != nil {
		g.log.Warn("jetstream guard: handing a call on", "call", call, "err", err)
		g.replyError(m.Reply, semaq.NewAPIError(semaq.ErrUnavailable, "consumer: JetStream did not answer: %v", err))
		return
	}
	if err := g.deps.Egress.PublishMsg(&nats.Msg{Subject: m.Reply, Header: resp.Header, Data: resp.Data}); err != nil {
		g.log.Warn("jetstream guard: relaying an answer", "call", call, "err", err)
	}
}

// refuse counts a refused call and logs it, once a second per reason.
func (g *Guard) refuse(reason, msg string, args ...any) {
	g.deps.Refused(reason)
	if g.quiet.Open(reason) {
		g.log.Warn("jetstream guard: "+msg, args...)
	}
}

// consumerCall is what the guard reads of a consumer create or update:
// the same fields, by the same parser, as JetStream's.
type consumerCall struct {
	Config struct {
		DeliverSubject string `json:"deliver_subject"`
	} `json:"config"`
}

// checkConsumerCall refuses a consumer whose deliver subject is not an
// inbox of the sender of headers h.
func (g *Guard) checkConsumerCall(h nats.Header, data []byte) *semaq.APIError {
	var req consumerCall
	if len(data) > 0 {
		if err := json.Unmarshal(data, &req); err != nil {
			return semaq.NewAPIError(semaq.ErrBadRequest, "consumer: the request is not valid JSON: %v", err)
		}
	}
	deliver := req.Config.DeliverSubject
	if deliver == "" {
		return nil // a pull consumer: JetStream answers through the import
	}
	if err := semaq.CheckReplySubject(deliver); err != nil {
		return semaq.NewAPIError(semaq.ErrBadRequest, "consumer: deliver_subject: %v; use an inbox", err)
	}
	inbox := g.deliverInbox(h)
	if inbox == "" || !strings.HasPrefix(deliver, inbox) {
		return semaq.NewAPIError(semaq.ErrForbidden, "consumer: deliver_subject %s is not in the requester's inbox %s>: "+
			"JetStream delivers a push consumer's messages with the server's rights, so only to the inbox of the client that made it", deliver, inbox)
	}
	return nil
}

// deliverInbox is the inbox prefix the sender of headers h receives its
// deliveries under: a store user's own with auth on, the public inbox
// without; "" when none.
func (g *Guard) deliverInbox(h nats.Header) string {
	if !g.deps.Auth {
		return strings.TrimSuffix(g.deps.PublicInbox, ">")
	}
	p := g.deps.Principal(h)
	if p.Who != api.User || p.User == "" {
		return ""
	}
	return semaq.UserInboxPrefix + p.User + "."
}

// jsAPIError is a JetStream API error answer, the shape every NATS
// client's JetStream API reads.
type jsAPIError struct {
	Type  string `json:"type"`
	Error struct {
		Code        int    `json:"code"`
		Description string `json:"description"`
	} `json:"error"`
}

// replyError answers a refused call as JetStream would.
func (g *Guard) replyError(reply string, e *semaq.APIError) {
	var out jsAPIError
	out.Type = "io.nats.jetstream.api.v1.consumer_create_response"
	out.Error.Code = e.Code
	out.Error.Description = e.Description
	data, err := json.Marshal(out)
	if err != nil {
		return
	}
	if err := g.deps.Egress.Publish(reply, data); err != nil {
		g.log.Warn("jetstream guard: answering a refused call", "err", err)
	}
}
