package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// The JetStream guard (docs/security.md, Subjects users choose).
// JetStream publishes as the NATS server, with no permissions, on two
// kinds of subject a client names: the reply subject of an API request
// and a push consumer's deliver subject. Replies are safe by where users
// live: every user account (the public one included) reaches JetStream
// through service imports (tenancy.go), so an answer goes back through
// the server's _R_ mapping into the requester's own account, never into
// the node's, where storage, advisories and the broker's subjects are.
// A deliver subject is not a reply: JetStream publishes on it in the
// node's account, where the consumer lives. So the imports of consumer
// create and update map them to jsGuardPrefix, where the broker checks
// the deliver subject before it hands the request on to JetStream: an
// inbox of the requester or nothing. Stream snapshots (whose deliver
// subject is chosen the same way) are closed to users (permissions.go):
// a backup is the node's (operator credentials).

const (
	// jsGuardPrefix is where user accounts' consumer create and update
	// calls arrive in the node's account: jsGuardPrefix+"CONSUMER.CREATE.…"
	// for $JS.API.CONSUMER.CREATE.…, and so on.
	jsGuardPrefix = reserved.JetStreamGuardPrefix
	// jsGuardInbox is the guard's own reply inbox (brokerInboxes).
	jsGuardInbox = reserved.JetStreamGuardInbox
	// jsGuardConcurrency bounds the calls one node hands on at once; more
	// wait in the subscription's pending buffer, whose bound is the NATS
	// client's (a slow consumer drops them, and their clients time out).
	jsGuardConcurrency = 64
)

// jsGuard is the guard's connection, with an inbox of its own. JetStream
// takes a call's account from the requester a reply leads back to, so
// the guard asks with its own reply and relays the answer.
type jsGuard struct {
	nc   *nats.Conn
	sub  *nats.Subscription
	busy chan struct{} // a slot per call handed on
	wg   sync.WaitGroup
}

// openJetStreamGuard serves jsGuardPrefix on every node. Closing it stops
// taking calls and waits for those under way.
func openJetStreamGuard(_ context.Context, s *Server) (subsystem.Subsystem, error) {
	nc, err := nats.Connect("", nats.InProcessServer(s.ns), s.internalAuth(), nats.Name("semaq-jsguard"),
		nats.CustomInboxPrefix(jsGuardInbox), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("broker: jetstream guard: %w", err)
	}
	g := &jsGuard{nc: nc, busy: make(chan struct{}, jsGuardConcurrency)}
	if g.sub, err = nc.QueueSubscribe(jsGuardPrefix+">", reserved.APIQueueGroup, func(m *nats.Msg) {
		g.busy <- struct{}{}
		g.wg.Add(1)
		go func() {
			defer func() { <-g.busy; g.wg.Done() }()
			s.guardJetStream(g.nc, m)
		}()
	}); err != nil {
		nc.Close()
		return nil, fmt.Errorf("broker: jetstream guard: %w", err)
	}
	if err := nc.Flush(); err != nil {
		nc.Close()
		return nil, fmt.Errorf("broker: jetstream guard: %w", err)
	}
	return subsystem.Func(func(context.Context) error {
		_ = g.sub.Unsubscribe()
		g.wg.Wait()
		g.nc.Close()
		return nil
	}), nil
}

// guardJetStream checks one consumer create or update and hands it on to
// JetStream, then relays JetStream's answer to the requester.
func (s *Server) guardJetStream(nc *nats.Conn, m *nats.Msg) {
	call := strings.TrimPrefix(m.Subject, jsGuardPrefix)
	if !strings.HasPrefix(m.Reply, responsePrefix) {
		// Not through an import: nobody but a user account reaches this
		// subject, and JetStream answers there without a reply.
		s.refuseJetStream("not_imported", "a call without an import's reply dropped", "subject", m.Subject)
		return
	}
	if err := s.checkConsumerCall(m.Header, m.Data); err != nil {
		s.refuseJetStream("deliver_subject", "consumer refused", "call", call, "err", err.Description)
		s.replyJetStreamError(m.Reply, err)
		return
	}
	// The request as JetStream reads it, without the header the import
	// added: the consumer is the node's account's, as it always was.
	ctx, cancel := context.WithTimeout(context.Background(), api.Timeout)
	defer cancel()
	resp, err := nc.RequestWithContext(ctx, "$JS.API."+call, m.Data)
	if err != nil {
		s.log.Warn("jetstream guard: handing a call on", "call", call, "err", err)
		s.replyJetStreamError(m.Reply, semaq.NewAPIError(semaq.ErrUnavailable, "consumer: JetStream did not answer: %v", err))
		return
	}
	if err := s.egress.PublishMsg(&nats.Msg{Subject: m.Reply, Header: resp.Header, Data: resp.Data}); err != nil {
		s.log.Warn("jetstream guard: relaying an answer", "call", call, "err", err)
	}
}

// refuseJetStream counts a refused call and logs it, once a second per
// reason.
func (s *Server) refuseJetStream(reason, msg string, args ...any) {
	s.metrics.JetStreamRefused(reason)
	if s.jsGuardQuiet.Open(reason) {
		s.log.Warn("jetstream guard: "+msg, args...)
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
func (s *Server) checkConsumerCall(h nats.Header, data []byte) *semaq.APIError {
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
	inbox := s.deliverInbox(h)
	if inbox == "" || !strings.HasPrefix(deliver, inbox) {
		return semaq.NewAPIError(semaq.ErrForbidden, "consumer: deliver_subject %s is not in the requester's inbox %s>: "+
			"JetStream delivers a push consumer's messages with the server's rights, so only to the inbox of the client that made it", deliver, inbox)
	}
	return nil
}

// deliverInbox is the inbox prefix the sender of headers h receives its
// deliveries under: a store user's own with auth on, the public inbox
// without; "" when none.
func (s *Server) deliverInbox(h nats.Header) string {
	if !s.cfg.Auth {
		return strings.TrimSuffix(publicInbox, ">")
	}
	p := s.principal(h)
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

// replyJetStreamError answers a refused call as JetStream would.
func (s *Server) replyJetStreamError(reply string, e *semaq.APIError) {
	var out jsAPIError
	out.Type = "io.nats.jetstream.api.v1.consumer_create_response"
	out.Error.Code = e.Code
	out.Error.Description = e.Description
	data, err := json.Marshal(out)
	if err != nil {
		return
	}
	if err := s.egress.Publish(reply, data); err != nil {
		s.log.Warn("jetstream guard: answering a refused call", "err", err)
	}
}
