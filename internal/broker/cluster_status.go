package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/streams"
	"github.com/semaq/semaq/internal/broker/subsystem"
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

// openClusterAPI serves $SQ.API.CLUSTER.STATUS (one node of the queue
// group answers) and $SQ.API.CLUSTER.NODE (every node answers), on the
// egress connection like every API handler.
func openClusterAPI(_ context.Context, s *Server) (subsystem.Subsystem, error) {
	s.started = time.Now()
	var subs []*nats.Subscription
	unsubscribe := subsystem.Func(func(context.Context) error {
		for _, sub := range subs {
			_ = sub.Unsubscribe()
		}
		return nil
	})
	status := api.Op(s.log, "cluster status", s.apiClusterStatus, nil)
	sub, err := s.egress.QueueSubscribe(semaq.APIClusterStatus, reserved.APIQueueGroup, api.CheckedReply(s.log, status))
	if err != nil {
		return nil, err
	}
	subs = append(subs, sub)
	report := api.Op(s.log, "cluster node", func(context.Context, *struct{}) (any, error) { return s.nodeReport(), nil }, nil)
	if sub, err = s.egress.Subscribe(semaq.APIClusterNode, api.CheckedReply(s.log, report)); err != nil {
		_ = unsubscribe.Close(context.Background())
		return nil, err
	}
	subs = append(subs, sub)
	sub, err = s.nc.Subscribe(nodeReportSubject, func(m *nats.Msg) {
		if !strings.HasPrefix(m.Reply, nodeReportReplyPrefix) {
			return
		}
		b, err := json.Marshal(s.nodeReport())
		if err == nil {
			_ = s.nc.Publish(m.Reply, b)
		}
	})
	if err != nil {
		_ = unsubscribe.Close(context.Background())
		return nil, err
	}
	subs = append(subs, sub)
	if err := errors.Join(s.nc.Flush(), s.egress.Flush()); err != nil {
		_ = unsubscribe.Close(context.Background())
		return nil, fmt.Errorf("broker: cluster api: %w", err)
	}
	return unsubscribe, nil
}

// nodeReport describes this node.
func (s *Server) nodeReport() nodeReport {
	r := nodeReport{ClusterNode: semaq.ClusterNode{
		Name:             s.ns.Name(),
		Connected:        true,
		Version:          Version,
		NATSVersion:      server.VERSION,
		Started:          s.started.UTC(),
		Sync:             s.cfg.Sync,
		JetStreamCurrent: !s.cfg.Clustered() || s.ns.JetStreamIsCurrent(),
	}}
	if rz, err := s.ns.Routez(nil); err == nil {
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
	r.Dispatching = s.streams.Dispatching()
	if s.cfg.Clustered() && s.ns.JetStreamIsLeader() {
		r.MetaLeader = true
		if jsz, err := s.ns.Jsz(nil); err == nil && jsz.Meta != nil {
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

// gatherNodes asks every node for its report and collects the answers
// until every node this one reaches has answered or gatherTimeout passes.
func (s *Server) gatherNodes(ctx context.Context) map[string]nodeReport {
	out := map[string]nodeReport{}
	want := s.clusterNodes()
	inbox := nodeReportReplyPrefix + nuid.Next()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return out
	}
	defer func() { _ = sub.Unsubscribe() }()
	// Bound the replies kept: one per node, and no more nodes than routes.
	_ = sub.SetPendingLimits(MaxRoutes+1, 64<<20)
	if err := s.nc.PublishRequest(nodeReportSubject, inbox, nil); err != nil {
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

// apiClusterStatus answers $SQ.API.CLUSTER.STATUS.
func (s *Server) apiClusterStatus(ctx context.Context, _ *struct{}) (any, error) {
	st := semaq.ClusterStatus{
		Name:       s.cfg.ClusterName,
		AnsweredBy: s.ns.Name(),
		Replicas:   s.ownReplicas(),
		Nodes:      []semaq.ClusterNode{},
		Streams:    []semaq.StreamClusterStatus{},
		Queues:     []semaq.QueueDispatch{},
	}
	reports := s.gatherNodes(ctx)
	if !s.cfg.Clustered() {
		reports[s.ns.Name()] = s.nodeReport()
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
			st.MetaLeader = name
			meta = map[string]semaq.PeerStatus{name: peerStatus(name, true, false, 0, 0)}
			for _, p := range r.MetaPeers {
				meta[p.Name] = p
				names[p.Name] = true
			}
		}
	}
	if st.MetaLeader == "" && s.cfg.Clustered() {
		if jsz, err := s.ns.Jsz(nil); err == nil && jsz.Meta != nil {
			st.MetaLeader = jsz.Meta.Leader
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
		st.Nodes = append(st.Nodes, n.ClusterNode)
	}
	slices.SortFunc(st.Nodes, func(a, b semaq.ClusterNode) int { return strings.Compare(a.Name, b.Name) })
	if w := syncDisagreement(st.Nodes); w != "" {
		st.Warnings = append(st.Warnings, w)
	}
	dispatcher := map[string]string{}
	for name, r := range reports {
		for _, q := range r.Dispatching {
			dispatcher[q] = name
		}
	}
	lister := s.js.ListStreams(ctx)
	for info := range lister.Info() {
		if len(st.Streams) == semaq.MaxClusterStreams {
			st.StreamsTruncated = true
			break
		}
		sc := semaq.StreamClusterStatus{Stream: info.Config.Name, Replicas: info.Config.Replicas,
			Own: slices.Contains(s.resources.Replicated(), info.Config.Name)}
		if c := streams.Cluster(info.Cluster); c != nil {
			sc.StreamCluster = *c
		}
		st.Streams = append(st.Streams, sc)
		if _, ok := streams.QueueConfigOf(&info.Config); ok {
			st.Queues = append(st.Queues, semaq.QueueDispatch{Queue: info.Config.Name,
				Node: dispatcher[info.Config.Name], StreamLeader: sc.Leader})
		}
	}
	if err := lister.Err(); err != nil && !st.StreamsTruncated {
		return nil, err
	}
	slices.SortFunc(st.Streams, func(a, b semaq.StreamClusterStatus) int { return strings.Compare(a.Stream, b.Stream) })
	slices.SortFunc(st.Queues, func(a, b semaq.QueueDispatch) int { return strings.Compare(a.Queue, b.Queue) })
	return st, nil
}
