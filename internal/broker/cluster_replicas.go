package broker

import (
	"context"
	"sync"
	"time"

	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/registry"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// ownStreams are the streams of SemaQ's own state: the schema registry,
// route rules, agents and identities (KV buckets), dead letters, token
// streams and the audit records. Queues' metadata lives in their streams'
// metadata; a queue made without replicas gets ownReplicas, and its lease
// store the queue's (queue.go); user streams keep the replicas they were
// made with.
var ownStreams = []string{
	"KV_" + registry.DefaultBucket,
	"KV_" + reserved.RouteBucket,
	"KV_" + reserved.AgentBucket,
	"KV_" + reserved.UserBucket,
	semaq.DLQStream,
	semaq.TokenStream,
	reserved.AuditStream,
}

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
// second one protects nothing. Every site that makes one of ownStreams asks
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

// replicaKeeper raises ownStreams to ownReplicas when the cluster grows to
// 3 nodes after they were made (a node that started first, or a cluster
// grown from one node): every node once after it starts, and the node
// leading JetStream's meta group when the number of nodes it reaches
// changes and every few seconds. It also compares the nodes' sync modes
// when the number changes (cluster_sync.go).
type replicaKeeper struct {
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// startReplicaKeeper runs the keeper until stopReplicaKeeper; only a
// clustered node has one.
func (s *Server) startReplicaKeeper() {
	if !s.cfg.Clustered() {
		return
	}
	k := &replicaKeeper{stop: make(chan struct{}), done: make(chan struct{})}
	s.keeper = k
	go func() {
		defer close(k.done)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			select {
			case <-k.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
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
			if n >= 3 && due && (!started || s.ns.JetStreamIsLeader()) && s.raiseOwnReplicas(k.stop) {
				started, seen, last = true, n, time.Now()
			}
			// Every node compares the nodes' sync modes whenever the
			// count changes, and says so once per disagreement.
			if n >= 2 && n != syncSeen {
				if w, complete := s.checkClusterSync(ctx); complete {
					syncSeen = n
					if w != "" && w != syncWarned {
						s.log.Warn(w)
					}
					syncWarned = w
				}
			}
			select {
			case <-k.stop:
				return
			case <-tick.C:
			}
		}
	}()
}

// raiseOwnReplicas raises every one of ownStreams to ownReplicas; it
// reports whether all were checked.
func (s *Server) raiseOwnReplicas(stop <-chan struct{}) bool {
	want := s.ownReplicas()
	if want <= 1 {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	ok := true
	for _, name := range ownStreams {
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

// stopReplicaKeeper stops the keeper and waits for it.
func (s *Server) stopReplicaKeeper() {
	k := s.keeper
	if k == nil {
		return
	}
	k.once.Do(func() { close(k.stop) })
	<-k.done
}
