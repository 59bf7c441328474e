package broker

import (
	"context"
	"time"

	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/jsutil"
)

// replicasKeepInterval is how often a node checks whether the cluster
// grew; replicasRecheck how often the meta leader checks the replicas
// anyway.
const (
	replicasKeepInterval = time.Second
	replicasRecheck      = 10 * time.Second
)

// ownReplicas decides the replicas of SemaQ's own buckets and streams: 3
// once the node sees 3 or more nodes of its cluster (itself and the nodes it
// has a route to), 1 otherwise: two replicas need both for a quorum, so a
// second one protects nothing. Every site that makes one of the node's own
// streams (reserved.Table) asks
// here. Replicas are never lowered: a cluster that shrinks keeps them (and
// its streams' quorum needs 2 of the 3).
func (s *Server) ownReplicas() int {
	if s.clusterNodes() >= 3 {
		return 3
	}
	return 1
}

// clusterNodes is the number of nodes this one reaches: itself and the
// nodes it has a route to.
func (s *Server) clusterNodes() int {
	if !s.cfg.Clustered() {
		return 1
	}
	return 1 + len(s.routedNodes())
}

// openReplicaKeeper raises the node's own streams (the Replicated rows of
// reserved.Table) to ownReplicas when the cluster grows to 3 nodes after
// they were made (a node that started first, or a cluster grown from one
// node): every node once after it starts, and the node leading
// JetStream's meta group when the number of nodes it reaches changes and
// every few seconds. It also compares the nodes' sync modes when the
// number changes (clusterstatus CheckModes). Only a clustered node has one.
func openReplicaKeeper(_ context.Context, s *Server) (subsystem.Subsystem, error) {
	if !s.cfg.Clustered() {
		return nil, nil
	}
	g := s.gate.Child("replicas")
	g.Go("keeper", func(ctx context.Context) {
		tick := time.NewTicker(replicasKeepInterval)
		defer tick.Stop()
		started := false // this node checked once since it started
		seen := 0        // nodes at the last complete check
		var last time.Time
		syncSeen, syncWarned := 0, "" // nodes at the last complete sync check, and what it said
		for {
			// Each node checks once it reaches 3 nodes after its start
			// (a cluster grown while it was down), then the meta leader
			// whenever the count changes and every replicasRecheck (a
			// node that left and came back between two ticks).
			n := s.clusterNodes()
			due := !started || n != seen || time.Since(last) >= replicasRecheck
			if n >= 3 && due && (!started || s.ns.JetStreamIsLeader()) && raiseOwnReplicas(ctx, s) {
				started, seen, last = true, n, time.Now()
			}
			// Every node compares the nodes' sync modes whenever the
			// count changes, and says so once per disagreement.
			if n >= 2 && n != syncSeen {
				if w, complete := s.status.CheckModes(ctx); complete {
					syncSeen = n
					if w != "" && w != syncWarned {
						s.log.Warn(w)
					}
					syncWarned = w
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return g, nil
}

// raiseOwnReplicas raises every replicated stream of the node's own to
// ownReplicas; it reports whether all were checked.
func raiseOwnReplicas(ctx context.Context, s *Server) bool {
	want := s.ownReplicas()
	if want <= 1 {
		return true
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ok := true
	for _, name := range s.resources.Replicated() {
		changed, err := jsutil.RaiseReplicas(ctx, s.js, name, want)
		switch {
		case err != nil:
			ok = false
			s.log.Warn("cluster: could not raise the replicas of a SemaQ stream; retried when the cluster changes", "stream", name, "replicas", want, "err", err)
		case changed:
			s.log.Info("cluster: SemaQ stream raised to the cluster's replicas", "stream", name, "replicas", want)
		}
	}
	return ok
}
