package client

import (
	"context"

	"github.com/semaq/semaq/semaq"
)

// Audit lists the records of admin changes r selects, oldest first
// (docs/security.md, Audit); More says older ones matched beyond
// r.Limit. Only an admin's key may call it with auth on.
func (c *Client) Audit(ctx context.Context, r semaq.AuditListRequest) (*semaq.AuditListResponse, error) {
	var resp semaq.AuditListResponse
	if err := c.request(ctx, semaq.APIAuditList, r, &resp); err != nil {
		return nil, err
	}
	if resp.Records == nil {
		resp.Records = []semaq.AuditRecord{}
	}
	return &resp, nil
}
