package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/reserved"
)

// A change made through one node (a schema, a binding, a stream) reaches
// the others through JetStream: the registry's bucket watcher, the stream
// advisories. Until a node has applied it, its ingress decides with what
// it had. So a change returns only once every node it reaches has applied
// it (clusterSync), or after syncTimeout naming the nodes that had not.
const (
	syncSubject     = reserved.SyncInbox + "req"    // every node's internal connection listens
	syncReplyPrefix = reserved.SyncInbox + "reply." // the asking node's inbox
	syncTimeout     = 5 * time.Second
)

// syncRequest says what the nodes must have applied.
type syncRequest struct {
	From    string `json:"from"`              // the asking node, which has applied it
	Schemas bool   `json:"schemas,omitempty"` // the schema registry's bucket, as it is now
	Streams bool   `json:"streams,omitempty"` // the streams JetStream has now
	Routes  uint64 `json:"routes,omitempty"`  // the route rules' bucket revision
	Users   uint64 `json:"users,omitempty"`   // the identity store's bucket revision
	// Subjects are a new stream's public patterns: JetStream's interest in
	// their storage subjects reaches the other nodes over the routes, and a
	// message stored before it arrives would be dropped.
	Subjects []string `json:"subjects,omitempty"`
	// Resubscribe are tenants the asking node did not know when its routes
	// connected: their users' subscriptions here must be made again
	// (tenancy_known.go).
	Resubscribe []string `json:"resubscribe,omitempty"`
}

type syncReply struct {
	Node string `json:"node"`
	Err  string `json:"err,omitempty"`
}

// openClusterSync answers other nodes' sync requests. The subjects are
// among the broker's inboxes (permissions.go): only the nodes' internal
// users publish or listen there.
//
// Catching up may wait: each request is answered in a goroutine of the
// node's gate, which closing the subsystem waits for.
func openClusterSync(_ context.Context, s *Server) (subsystem.Subsystem, error) {
	if !s.cfg.Clustered() {
		return nil, nil
	}
	g := s.gate.Child("cluster-sync")
	sub, err := s.nc.Subscribe(syncSubject, func(m *nats.Msg) {
		var req syncRequest
		if json.Unmarshal(m.Data, &req) != nil || m.Reply == "" {
			return
		}
		if req.From == s.ns.Name() {
			s.replySync(m, nil)
			return
		}
		g.Go("apply", func(ctx context.Context) {
			ctx, cancel := context.WithTimeout(ctx, syncTimeout)
			defer cancel()
			s.replySync(m, s.applyNow(ctx, req))
		})
	})
	if err != nil {
		return nil, fmt.Errorf("broker: cluster sync: %w", err)
	}
	s.syncSub = sub
	return subsystem.Func(func(ctx context.Context) error {
		_ = sub.Unsubscribe()
		return g.Close(ctx)
	}), nil
}

// applyNow brings this node up to what JetStream holds now.
func (s *Server) applyNow(ctx context.Context, req syncRequest) error {
	if req.Schemas && s.reg != nil {
		if err := s.reg.CatchUp(ctx); err != nil {
			return err
		}
	}
	if req.Routes > 0 && s.routes != nil {
		if err := s.routes.WaitApplied(ctx, req.Routes); err != nil {
			return err
		}
	}
	if req.Users > 0 && s.identities != nil {
		if err := s.identities.WaitRevision(ctx, req.Users); err != nil {
			return err
		}
		if err := s.tenancy.ensureTenants(s.ns, s.identities.Tenants()); err != nil {
			return err
		}
	}
	if req.Streams {
		if err := s.streams.Sync(ctx); err != nil {
			return err
		}
	}
	if len(req.Resubscribe) > 0 {
		if err := s.disconnectSubscribers(req.From, req.Resubscribe); err != nil {
			return err
		}
	}
	return s.waitStorageInterest(ctx, req.Subjects)
}

// waitStorageInterest returns once this node sees JetStream's interest in
// the storage subjects of patterns (a subject each matches), so the
// ingress's next write there reaches the stream wherever its leader is.
func (s *Server) waitStorageInterest(ctx context.Context, patterns []string) error {
	if len(patterns) == 0 {
		return nil
	}
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		missing := ""
		for _, p := range patterns {
			if subj := reserved.StoragePrefix + sampleSubject(p); !s.account().hasInterest(subj, nil) {
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

func (s *Server) replySync(m *nats.Msg, err error) {
	r := syncReply{Node: s.ns.Name()}
	if err != nil {
		r.Err = err.Error()
	}
	b, _ := json.Marshal(r)
	_ = s.nc.Publish(m.Reply, b)
}

// clusterSync returns once every node this one reaches has applied req, or
// after syncTimeout with the names of those that had not, sorted; the
// change itself stands either way, and those nodes apply it late. Outside a
// cluster it returns at once.
func (s *Server) clusterSync(ctx context.Context, req syncRequest) []string {
	if !s.cfg.Clustered() {
		return nil
	}
	req.From = s.ns.Name()
	// This node too: the stream's leader may be another node.
	if err := func() error {
		wctx, cancel := context.WithTimeout(ctx, syncTimeout)
		defer cancel()
		return s.waitStorageInterest(wctx, req.Subjects)
	}(); err != nil {
		s.log.Warn("cluster: a new stream's interest had not reached this node", "err", err)
	}
	pending := map[string]bool{}
	for _, n := range s.routedNodes() {
		pending[n] = true
	}
	if len(pending) == 0 {
		return nil
	}
	inbox := syncReplyPrefix + nuid.Next()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return names(pending)
	}
	defer func() { _ = sub.Unsubscribe() }()
	b, _ := json.Marshal(req)
	if err := s.nc.PublishRequest(syncSubject, inbox, b); err != nil {
		return names(pending)
	}
	ctx, cancel := context.WithTimeout(ctx, syncTimeout)
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
			s.log.Warn("cluster: a node could not apply a change", "node", r.Node, "err", r.Err)
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
		s.log.Warn("cluster: nodes had not applied a change when it returned; they apply it late",
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
