package broker

import (
	"context"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/clusterstatus"
	"github.com/semaq/semaq/internal/broker/clustersync"
	"github.com/semaq/semaq/internal/broker/streams"
	"github.com/semaq/semaq/internal/broker/subsystem"
)

// The open functions of the cluster's own parts (the list in
// subsystems.go): the cluster sync, its answers and the cluster status.

// openClusterSync makes the node's cluster sync (internal/broker/clustersync):
// from here on a change made through this node may wait for the other
// nodes to apply it (openUsers's resubscribeLate does, at start). It
// answers their requests only from openClusterSyncAnswers on, once what
// it applies is open. Only a clustered node has one.
func openClusterSync(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	if !s.cfg.Clustered() {
		return nil, nil
	}
	sy, err := clustersync.Open(ctx, clustersync.Deps{
		Conn:     s.nc,
		Node:     s.ns.Name(),
		Routed:   s.routedNodes,
		Apply:    func(ctx context.Context, req clustersync.Request) error { return catchUp(ctx, s, req) },
		Interest: func(subject string) bool { return s.account().hasInterest(subject, nil) },
		Gate:     s.gate.Child("cluster-sync"),
		Log:      s.log,
	})
	if err != nil {
		return nil, err
	}
	s.syncer = sy
	return nil, nil // openClusterSyncAnswers closes it
}

// catchUp brings this node up to what JetStream holds now, as another
// node's sync request says (clustersync.Deps.Apply).
func catchUp(ctx context.Context, s *Server, req clustersync.Request) error {
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
	if req.Models > 0 && s.models != nil {
		if err := s.models.WaitApplied(ctx, req.Models); err != nil {
			return err
		}
	}
	if req.Policy > 0 && s.policies != nil {
		if err := s.policies.WaitApplied(ctx, req.Policy); err != nil {
			return err
		}
	}
	if req.Classes > 0 && s.classes != nil {
		if err := s.classes.WaitApplied(ctx, req.Classes); err != nil {
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
		return s.disconnectSubscribers(req.From, req.Resubscribe)
	}
	return nil
}

// openClusterSyncAnswers answers the other nodes' sync requests, now that
// everything catchUp uses is open. Closing it stops answering and waits
// for the answers in flight, before those close.
func openClusterSyncAnswers(_ context.Context, s *Server) (subsystem.Subsystem, error) {
	if s.syncer == nil {
		return nil, nil
	}
	if err := s.syncer.Answer(); err != nil {
		_ = s.syncer.Close(context.Background())
		return nil, err
	}
	return s.syncer, nil
}

// openClusterStatus serves $SQ.API.CLUSTER.STATUS (one node of the queue
// group answers) and $SQ.API.CLUSTER.NODE (every node answers), on the
// egress connection like every API handler.
func openClusterStatus(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	st, err := clusterstatus.Open(ctx, clusterstatus.Deps{
		NATS: s.ns, ClusterName: s.cfg.ClusterName, Sync: s.cfg.Sync, Version: Version, MaxRoutes: MaxRoutes,
		Replicas: s.ownReplicas, Nodes: s.clusterNodes, Dispatching: s.streams.Dispatching,
		Own:     func(stream string) bool { return slices.Contains(s.resources.Replicated(), stream) },
		IsQueue: func(c *jetstream.StreamConfig) bool { _, ok := streams.QueueConfigOf(c); return ok },
		JS:      s.js, Conn: s.nc, Egress: s.egress, Log: s.log,
	})
	if err != nil {
		return nil, err
	}
	s.status = st
	return st, nil
}
