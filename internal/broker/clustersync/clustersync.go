// Package clustersync makes a change made through one node of a cluster
// return once every node it reaches has applied it.
//
// A change made through one node (a schema, a binding, a stream) reaches
// the others through JetStream: the registry's bucket watcher, the stream
// advisories. Until a node has applied it, its ingress decides with what
// it had. So a change returns only once every node it reaches has applied
// it (Syncer.Sync), or after Timeout naming the nodes that had not; the
// change itself stands either way, and those nodes apply it late.
//
// The asking node publishes a Request on the broker's inboxes
// (reserved.SyncInbox), where every node's internal connection listens;
// each node applies it (Deps.Apply) and answers on the asking node's
// inbox. Only the nodes' internal users publish or listen there
// (internal/broker/permissions.go). Nodes of one cluster may run
// different versions: Request's JSON is their protocol.
package clustersync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/reserved"
)

const (
	syncSubject     = reserved.SyncInbox + "req"    // every node's internal connection listens
	syncReplyPrefix = reserved.SyncInbox + "reply." // the asking node's inbox
)

// Timeout bounds how long Sync waits for the nodes, and how long a node
// spends applying one request.
const Timeout = 5 * time.Second

// Request says what the nodes must have applied.
type Request struct {
	From    string `json:"from"`              // the asking node, which has applied it
	Schemas bool   `json:"schemas,omitempty"` // the schema registry's bucket, as it is now
	Streams bool   `json:"streams,omitempty"` // the streams JetStream has now
	Routes  uint64 `json:"routes,omitempty"`  // the route rules' bucket revision
	Users   uint64 `json:"users,omitempty"`   // the identity store's bucket revision
	Policy  uint64 `json:"policy,omitempty"`  // the policy bucket's revision
	Models  uint64 `json:"models,omitempty"`  // the model registry's bucket revision
	Classes uint64 `json:"classes,omitempty"` // the hardware classes' bucket revision
	// Subjects are a new stream's public patterns: JetStream's interest in
	// their storage subjects reaches the other nodes over the routes, and a
	// message stored before it arrives would be dropped.
	Subjects []string `json:"subjects,omitempty"`
	// Resubscribe are tenants the asking node did not know when its routes
	// connected: their users' subscriptions here must be made again
	// (internal/broker/tenancy_known.go).
	Resubscribe []string `json:"resubscribe,omitempty"`
}

type syncReply struct {
	Node string `json:"node"`
	Err  string `json:"err,omitempty"`
}

// Deps is what the cluster sync needs of the node. Every field but Log is
// required.
type Deps struct {
	// Conn is the internal connection: it publishes this node's requests
	// and listens for their answers, and answers the other nodes'.
	Conn *nats.Conn
	// Node is this node's name: the From of its requests, the Node of its
	// answers.
	Node string
	// Routed are the nodes this one has a route to: the nodes Sync waits
	// for. Called on Sync's caller's goroutine; it must not block.
	Routed func() []string
	// Apply brings this node up to what JetStream holds now, as a request
	// from another node says (everything but its Subjects, which the
	// package waits for itself through Interest): the schema registry,
	// the route rules, the identity store and the tenants' accounts, the
	// streams, the subscribers of late tenants. It runs on a goroutine of
	// Gate, with a context bounded by Timeout, and may block until then;
	// its error is the node's answer.
	Apply func(ctx context.Context, req Request) error
	// Interest reports whether this node sees interest in subject:
	// JetStream's, in the storage subjects of a new stream. It is polled
	// every few milliseconds and must not block.
	Interest func(subject string) bool
	// Gate runs the goroutine that answers each request (catching up may
	// wait); Close closes it and waits for them.
	Gate *subsystem.Gate
	// Log gets the nodes that lagged or could not apply a change. Nil logs
	// nothing.
	Log *slog.Logger
}

// Syncer is a clustered node's side of the cluster sync: Sync asks the
// other nodes; once Answer is called, it answers theirs. A nil *Syncer is
// a node outside a cluster: Sync returns at once and HTTP changes
// nothing. Its methods are safe for concurrent use.
type Syncer struct {
	deps Deps

	mu  sync.Mutex
	sub *nats.Subscription // the other nodes' requests, from Answer on
}

// Open makes the node's syncer: Sync works at once; the other nodes'
// requests are answered from Answer on.
func Open(_ context.Context, deps Deps) (*Syncer, error) {
	if deps.Conn == nil || deps.Routed == nil || deps.Apply == nil || deps.Interest == nil || deps.Gate == nil {
		return nil, errors.New("broker: cluster sync: Conn, Routed, Apply, Interest and Gate are required")
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	return &Syncer{deps: deps}, nil
}

// Answer answers the other nodes' sync requests, once this node has
// opened everything Apply uses. Catching up may wait: each request is
// answered in a goroutine of the gate, which Close waits for.
func (sy *Syncer) Answer() error {
	g := sy.deps.Gate
	sub, err := sy.deps.Conn.Subscribe(syncSubject, func(m *nats.Msg) {
		var req Request
		if json.Unmarshal(m.Data, &req) != nil || m.Reply == "" {
			return
		}
		if req.From == sy.deps.Node {
			sy.reply(m, nil)
			return
		}
		g.Go("apply", func(ctx context.Context) {
			ctx, cancel := context.WithTimeout(ctx, Timeout)
			defer cancel()
			sy.reply(m, sy.apply(ctx, req))
		})
	})
	if err != nil {
		return fmt.Errorf("broker: cluster sync: %w", err)
	}
	sy.mu.Lock()
	sy.sub = sub
	sy.mu.Unlock()
	return nil
}

// StopAnswering makes the node deaf to the other nodes' requests, as a
// node that cannot keep up: they name it lagging. Close does it too.
func (sy *Syncer) StopAnswering() error {
	sy.mu.Lock()
	sub := sy.sub
	sy.mu.Unlock()
	if sub == nil {
		return nats.ErrBadSubscription
	}
	return sub.Unsubscribe()
}

// Close stops answering and waits for the answers in flight, or for ctx.
// Sync keeps working while the connection does.
func (sy *Syncer) Close(ctx context.Context) error {
	_ = sy.StopAnswering()
	return sy.deps.Gate.Close(ctx)
}

// apply brings this node up to what JetStream holds now.
func (sy *Syncer) apply(ctx context.Context, req Request) error {
	if err := sy.deps.Apply(ctx, req); err != nil {
		return err
	}
	return sy.waitStorageInterest(ctx, req.Subjects)
}

// waitStorageInterest returns once this node sees JetStream's interest in
// the storage subjects of patterns (a subject each matches), so the
// ingress's next write there reaches the stream wherever its leader is.
func (sy *Syncer) waitStorageInterest(ctx context.Context, patterns []string) error {
	if len(patterns) == 0 {
		return nil
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		missing := ""
		for _, p := range patterns {
			if subj := reserved.StoragePrefix + sampleSubject(p); !sy.deps.Interest(subj) {
				missing = subj
				break
			}
		}
		if missing == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no interest in %s yet: %w", missing, ctx.Err())
		case <-tick.C:
		}
	}
}

// sampleSubject is a literal subject pattern matches.
func sampleSubject(pattern string) string {
	tokens := strings.Split(pattern, ".")
	for i, t := range tokens {
		if t == "*" || t == ">" {
			tokens[i] = "x"
		}
	}
	return strings.Join(tokens, ".")
}

func (sy *Syncer) reply(m *nats.Msg, err error) {
	r := syncReply{Node: sy.deps.Node}
	if err != nil {
		r.Err = err.Error()
	}
	b, _ := json.Marshal(r)
	_ = sy.deps.Conn.Publish(m.Reply, b)
}

// Sync returns once every node this one reaches has applied req, or after
// Timeout with the names of those that had not, sorted; the change itself
// stands either way, and those nodes apply it late. Outside a cluster (a
// nil Syncer) it returns at once.
func (sy *Syncer) Sync(ctx context.Context, req Request) []string {
	if sy == nil {
		return nil
	}
	log := sy.deps.Log
	req.From = sy.deps.Node
	// This node too: the stream's leader may be another node.
	if err := func() error {
		wctx, cancel := context.WithTimeout(ctx, Timeout)
		defer cancel()
		return sy.waitStorageInterest(wctx, req.Subjects)
	}(); err != nil {
		log.Warn("cluster: a new stream's interest had not reached this node", "err", err)
	}
	pending := map[string]bool{}
	for _, n := range sy.deps.Routed() {
		pending[n] = true
	}
	if len(pending) == 0 {
		return nil
	}
	nc := sy.deps.Conn
	inbox := syncReplyPrefix + nuid.Next()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return names(pending)
	}
	defer func() { _ = sub.Unsubscribe() }()
	b, _ := json.Marshal(req)
	if err := nc.PublishRequest(syncSubject, inbox, b); err != nil {
		return names(pending)
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	failed := map[string]bool{}
	for len(pending) > 0 {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			break
		}
		var r syncReply
		if json.Unmarshal(m.Data, &r) != nil {
			continue
		}
		if r.Err != "" && pending[r.Node] {
			log.Warn("cluster: a node could not apply a change", "node", r.Node, "err", r.Err)
			failed[r.Node] = true
		}
		delete(pending, r.Node)
	}
	for n := range failed {
		pending[n] = true
	}
	lagging := names(pending)
	api.NoteLagging(ctx, lagging)
	if len(lagging) > 0 {
		log.Warn("cluster: nodes had not applied a change when it returned; they apply it late",
			"nodes", lagging, "schemas", req.Schemas, "streams", req.Streams, "routes_revision", req.Routes, "users_revision", req.Users)
	}
	return lagging
}

func names(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
