package client

import (
	"context"

	"github.com/semaq/semaq/semaq"
)

// RestorePII returns text with the placeholders a tokenize policy put in a
// message restored, or with Values the scope's whole mapping: the caller's
// own tenant's only (docs/policy.md, The vault).
func (c *Client) RestorePII(ctx context.Context, req semaq.PolicyRestoreRequest) (*semaq.PolicyRestoreResponse, error) {
	var out semaq.PolicyRestoreResponse
	if err := c.request(ctx, semaq.APIPolicyRestore, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
