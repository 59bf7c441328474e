// Package clusterstatus tells what a SemaQ cluster looks like:
// $SQ.API.CLUSTER.STATUS (one node of the API queue group answers for the
// cluster) and $SQ.API.CLUSTER.NODE (every node answers for itself).
//
// A status is gathered from the nodes' own reports: the answering node
// asks every node on the broker's inboxes (reserved.NodeInbox), on the
// internal connections, so no client reads a report meant for a node or
// answers in a node's name, and takes the answers that come within
// gatherTimeout; a node that has not answered by then is shown
// unconnected. The meta group's leader adds its peers (its view is the
// one that knows which peers are current), JetStream adds every stream's
// replicas and the work queues' leaders.
//
// The same reports compare the nodes' JetStream sync modes (--sync):
// CheckModes, and a warning in the status.
package clusterstatus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// gatherTimeout bounds how long a cluster status waits for the nodes'
// reports; a node that has not answered by then is shown unconnected.
const gatherTimeout = 2 * time.Second

// The nodes ask each other for their reports among the broker's inboxes
// (permissions.go), on their internal connections: no client reads a
// report meant for a node or answers in a node's name.
const (
	nodeReportSubject     = reserved.NodeInbox + "req"
	nodeReportReplyPrefix = reserved.NodeInbox + "reply."
)

// nodeReport is what a node answers on $SQ.API.CLUSTER.NODE: itself, and
// the meta group's peers when it leads it (the leader's view is the one
// that knows which peers are current).
type nodeReport struct {
	semaq.ClusterNode
	MetaLeader bool               `json:"meta_leader,omitempty"`
	MetaPeers  []semaq.PeerStatus `json:"meta_peers,omitempty"`
}

// Deps is the node's facts the cluster status reports. Every field but
// Log is required. The funcs are called on the API handlers' goroutines
// and the replica keeper's: they must not block.
type Deps struct {
	// NATS is the node's embedded NATS server: its name, its routes
	// (Routez) and JetStream's view of the meta group (Jsz,
	// JetStreamIsLeader, JetStreamIsCurrent).
	NATS *server.Server
	// ClusterName is the cluster's; empty outside a cluster.
	ClusterName string
	// Sync is the node's JetStream sync mode (--sync), Version its
	// SemaQ version.
	Sync, Version string
	// MaxRoutes bounds the routes of a node: the reports kept are at
	// most one per node.
	MaxRoutes int
	// Replicas is the replicas the node's own streams get now.
	Replicas func() int
	// Nodes is the number of nodes this one reaches (itself included):
	// the reports a status waits for.
	Nodes func() int
	// Dispatching are the work queues this node dispatches.
	Dispatching func() []string
	// Own reports whether a stream is one of the node's own that the
	// cluster replicates (reserved.Table).
	Own func(stream string) bool
	// IsQueue reports whether a stream is a work queue.
	IsQueue func(*jetstream.StreamConfig) bool
	// JS lists the streams: the internal connection's JetStream.
	JS jetstream.JetStream
	// Conn asks the other nodes for their reports and answers theirs:
	// the internal connection.
	Conn *nats.Conn
	// Egress serves $SQ.API.CLUSTER.NODE, a subject clients call: the
	// egress connection (docs/security.md).
	Egress *nats.Conn
	// Log gets the API's failures. Nil logs nothing.
	Log *slog.Logger
}

// Status serves a node's part of the cluster status. Its methods are safe
// for concurrent use.
type Status struct {
	deps    Deps
	started time.Time // when the cluster API started serving
	subs    []*nats.Subscription
}

// Open answers $SQ.API.CLUSTER.NODE (every node answers: no queue group,
// on the egress connection like every API handler) and the other nodes'
// requests for this node's report; Handlers is $SQ.API.CLUSTER.STATUS,
// which one node of the API queue group answers.
func Open(_ context.Context, deps Deps) (*Status, error) {
	if deps.NATS == nil || deps.Replicas == nil || deps.Nodes == nil || deps.Dispatching == nil ||
		deps.Own == nil || deps.IsQueue == nil || deps.JS == nil || deps.Conn == nil || deps.Egress == nil {
		return nil, errors.New("broker: cluster api: a required dependency is missing")
	}
	if deps.Log == nil {
		deps.Log = slog.New(slog.DiscardHandler)
	}
	st := &Status{deps: deps, started: time.Now()}
	report := api.Op(deps.Log, "cluster node", func(context.Context, *struct{}) (any, error) { return st.report(), nil }, nil)
	sub, err := deps.Egress.Subscribe(semaq.APIClusterNode, api.CheckedReply(deps.Log, report))
	if err != nil {
		return nil, err
	}
	st.subs = append(st.subs, sub)
	sub, err = deps.Conn.Subscribe(nodeReportSubject, func(m *nats.Msg) {
		if !strings.HasPrefix(m.Reply, nodeReportReplyPrefix) {
			return
		}
		b, err := json.Marshal(st.report())
		if err == nil {
			_ = deps.Conn.Publish(m.Reply, b)
		}
	})
	if err != nil {
		st.unsubscribe()
		return nil, err
	}
	st.subs = append(st.subs, sub)
	if err := errors.Join(deps.Conn.Flush(), deps.Egress.Flush()); err != nil {
		st.unsubscribe()
		return nil, fmt.Errorf("broker: cluster api: %w", err)
	}
	return st, nil
}

// Handlers serves $SQ.API.CLUSTER.STATUS.
func (st *Status) Handlers() api.Handlers {
	return api.Handlers{
		semaq.APIClusterStatus: api.Op(st.deps.Log, "cluster status", st.status, nil),
	}
}

// Close stops answering $SQ.API.CLUSTER.NODE and the other nodes'
// requests. It starts no goroutine: nothing to wait for.
func (st *Status) Close(context.Context) error {
	st.unsubscribe()
	return nil
}

func (st *Status) unsubscribe() {
	for _, sub := range st.subs {
		_ = sub.Unsubscribe()
	}
}

func (st *Status) clustered() bool { return st.deps.ClusterName != "" }

// report describes this node.
func (st *Status) report() nodeReport {
	ns := st.deps.NATS
	r := nodeReport{ClusterNode: semaq.ClusterNode{
		Name:             ns.Name(),
		Connected:        true,
		Version:          st.deps.Version,
		NATSVersion:      server.VERSION,
		Started:          st.started.UTC(),
		Sync:             st.deps.Sync,
		JetStreamCurrent: !st.clustered() || ns.JetStreamIsCurrent(),
	}}
	if rz, err := ns.Routez(nil); err == nil {
		seen := map[string]bool{}
		for _, rt := range rz.Routes {
			if rt.RemoteName == "" || seen[rt.RemoteName] {
				continue // a route pool has several connections per node
			}
			seen[rt.RemoteName] = true
			r.Routes = append(r.Routes, semaq.RouteStatus{Node: rt.RemoteName, RTT: rt.RTT})
		}
		slices.SortFunc(r.Routes, func(a, b semaq.RouteStatus) int { return strings.Compare(a.Node, b.Node) })
	}
	r.Dispatching = append(r.Dispatching, st.deps.Dispatching()...)
	slices.Sort(r.Dispatching)
	if st.clustered() && ns.JetStreamIsLeader() {
		r.MetaLeader = true
		if jsz, err := ns.Jsz(nil); err == nil && jsz.Meta != nil {
			for _, p := range jsz.Meta.Replicas {
				r.MetaPeers = append(r.MetaPeers, peerStatus(p.Name, p.Current, p.Offline, p.Active, p.Lag))
			}
		}
	}
	return r
}

func peerStatus(name string, current, offline bool, active time.Duration, lag uint64) semaq.PeerStatus {
	return semaq.PeerStatus{Name: name, Current: current, Offline: offline, Active: active, Lag: lag}
}

// gather asks every node for its report and collects the answers until
// every node this one reaches has answered or gatherTimeout passes.
func (st *Status) gather(ctx context.Context) map[string]nodeReport {
	nc := st.deps.Conn
	out := map[string]nodeReport{}
	want := st.deps.Nodes()
	inbox := nodeReportReplyPrefix + nuid.Next()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		return out
	}
	defer func() { _ = sub.Unsubscribe() }()
	// Bound the replies kept: one per node, and no more nodes than routes.
	_ = sub.SetPendingLimits(st.deps.MaxRoutes+1, 64<<20)
	if err := nc.PublishRequest(nodeReportSubject, inbox, nil); err != nil {
		return out
	}
	ctx, cancel := context.WithTimeout(ctx, gatherTimeout)
	defer cancel()
	for len(out) < want {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			break
		}
		var r nodeReport
		if json.Unmarshal(m.Data, &r) != nil || r.Name == "" {
			continue
		}
		out[r.Name] = r
	}
	return out
}

// status answers $SQ.API.CLUSTER.STATUS.
func (st *Status) status(ctx context.Context, _ *struct{}) (any, error) {
	ns := st.deps.NATS
	cs := semaq.ClusterStatus{
		Name:       st.deps.ClusterName,
		AnsweredBy: ns.Name(),
		Replicas:   st.deps.Replicas(),
		Nodes:      []semaq.ClusterNode{},
		Streams:    []semaq.StreamClusterStatus{},
		Queues:     []semaq.QueueDispatch{},
	}
	reports := st.gather(ctx)
	if !st.clustered() {
		reports[ns.Name()] = st.report()
	}
	// Every node anyone knows of: those that answered, the meta group's
	// peers and the nodes routed to.
	var meta map[string]semaq.PeerStatus
	names := map[string]bool{}
	for name, r := range reports {
		names[name] = true
		for _, rt := range r.Routes {
			names[rt.Node] = true
		}
		if r.MetaLeader {
			cs.MetaLeader = name
			meta = map[string]semaq.PeerStatus{name: peerStatus(name, true, false, 0, 0)}
			for _, p := range r.MetaPeers {
				meta[p.Name] = p
				names[p.Name] = true
			}
		}
	}
	if cs.MetaLeader == "" && st.clustered() {
		if jsz, err := ns.Jsz(nil); err == nil && jsz.Meta != nil {
			cs.MetaLeader = jsz.Meta.Leader
		}
	}
	for name := range names {
		n, ok := reports[name]
		if !ok {
			n.Name = name
		}
		if p, ok := meta[name]; ok {
			n.Meta = &p
		}
		cs.Nodes = append(cs.Nodes, n.ClusterNode)
	}
	slices.SortFunc(cs.Nodes, func(a, b semaq.ClusterNode) int { return strings.Compare(a.Name, b.Name) })
	if w := syncDisagreement(cs.Nodes); w != "" {
		cs.Warnings = append(cs.Warnings, w)
	}
	dispatcher := map[string]string{}
	claims := map[string][]string{}
	for name, r := range reports {
		for _, q := range r.Dispatching {
			dispatcher[q] = name
			claims["queue "+q] = append(claims["queue "+q], name)
		}
		if r.MetaLeader {
			claims["the meta group"] = append(claims["the meta group"], name)
		}
	}
	cs.Warnings = append(cs.Warnings, splitBrain(claims)...)
	lister := st.deps.JS.ListStreams(ctx)
	for info := range lister.Info() {
		if len(cs.Streams) == semaq.MaxClusterStreams {
			cs.StreamsTruncated = true
			break
		}
		sc := semaq.StreamClusterStatus{Stream: info.Config.Name, Replicas: info.Config.Replicas,
			Own: st.deps.Own(info.Config.Name)}
		if c := StreamCluster(info.Cluster); c != nil {
			sc.StreamCluster = *c
		}
		cs.Streams = append(cs.Streams, sc)
		if st.deps.IsQueue(&info.Config) {
			cs.Queues = append(cs.Queues, semaq.QueueDispatch{Queue: info.Config.Name,
				Node: dispatcher[info.Config.Name], StreamLeader: sc.Leader})
		}
	}
	if err := lister.Err(); err != nil && !cs.StreamsTruncated {
		return nil, err
	}
	slices.SortFunc(cs.Streams, func(a, b semaq.StreamClusterStatus) int { return strings.Compare(a.Stream, b.Stream) })
	slices.SortFunc(cs.Queues, func(a, b semaq.QueueDispatch) int { return strings.Compare(a.Queue, b.Queue) })
	return cs, nil
}

// StreamCluster is where a stream's replicas are, from JetStream's stream
// info; nil outside a cluster.
func StreamCluster(ci *jetstream.ClusterInfo) *semaq.StreamCluster {
	if ci == nil || ci.Name == "" {
		return nil
	}
	c := &semaq.StreamCluster{Leader: ci.Leader}
	for _, p := range ci.Replicas {
		c.Followers = append(c.Followers, peerStatus(p.Name, p.Current, p.Offline, p.Active, p.Lag))
	}
	return c
}

// SplitBrainWarning starts the warning of a group two nodes claim to lead
// at once.
const SplitBrainWarning = "split brain: "

// splitBrain warns of every group more than one node claims to lead, in
// order.
func splitBrain(claims map[string][]string) []string {
	var out []string
	for g, nodes := range claims {
		if len(nodes) > 1 {
			slices.Sort(nodes)
			out = append(out, fmt.Sprintf("%s%s is led by %d nodes at once: %s", SplitBrainWarning, g, len(nodes), strings.Join(nodes, ", ")))
		}
	}
	slices.Sort(out)
	return out
}
