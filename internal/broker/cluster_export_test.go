package broker

import (
	"context"

	"github.com/semaq/semaq/internal/broker/clustersync"
)

// ClusterSync asks every node this one reaches to apply the schema
// registry and the streams as they are now, and returns the nodes that
// had not when it gave up.
func ClusterSync(ctx context.Context, s *Server) []string {
	return s.syncer.Sync(ctx, clustersync.Request{Schemas: true, Streams: true})
}

// CloseRegistry stops the node's schema registry from following its
// bucket, as a node that cannot keep up.
func CloseRegistry(s *Server) error { return s.reg.Close() }

// StopSyncReplies makes the node deaf to other nodes' sync requests, as a
// node that cannot keep up.
func StopSyncReplies(s *Server) error {
	return s.syncer.StopAnswering()
}
