package client

import (
	"context"

	"github.com/semaq/semaq/semaq"
)

// ClusterStatus describes the cluster the broker belongs to: its nodes,
// JetStream's meta leader, every stream's leader and replicas, and where
// each work queue is dispatched. A node that is not clustered describes
// itself alone.
func (c *Client) ClusterStatus(ctx context.Context) (*semaq.ClusterStatus, error) {
	var st semaq.ClusterStatus
	if err := c.request(ctx, semaq.APIClusterStatus, nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}
