package client

import (
	"context"

	"github.com/semaq/semaq/semaq"
)

// Policy rules (docs/policy.md): PII redaction and content policy the
// broker applies at its ingress and on token streams. Rules are stored
// replicated; a rule added or removed is in force on every node when the
// call returns. With auth on, only admins manage rules.

// PolicyOption adjusts AddPolicy.
type PolicyOption func(*semaq.PolicyAddRequest) error

// WithPolicyReplace lets AddPolicy replace a rule of the same name.
// Without it an existing name fails with semaq.ErrPolicyExists.
func WithPolicyReplace() PolicyOption {
	return func(r *semaq.PolicyAddRequest) error {
		r.Replace = true
		return nil
	}
}

// AddPolicy stores a policy rule. A rule the broker refuses returns
// semaq.ErrBadPolicy naming the field at fault: an unknown PII type or
// action, a pattern that does not compile, a bound passed.
func (c *Client) AddPolicy(ctx context.Context, r semaq.PolicyRule, opts ...PolicyOption) (*semaq.PolicyInfo, error) {
	req := semaq.PolicyAddRequest{PolicyRule: r}
	for _, opt := range opts {
		if err := opt(&req); err != nil {
			return nil, err
		}
	}
	if r.Name == "" {
		return nil, semaq.NewAPIError(semaq.ErrBadPolicy, "client: AddPolicy: the rule has no name")
	}
	var info semaq.PolicyInfo
	if err := c.request(ctx, semaq.APIPolicyAdd, req, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Policies lists the rules by name, with the counters of the node that
// answers.
func (c *Client) Policies(ctx context.Context) ([]semaq.PolicyInfo, error) {
	var resp semaq.PolicyListResponse
	if err := c.request(ctx, semaq.APIPolicyList, nil, &resp); err != nil {
		return nil, err
	}
	if resp.Policies == nil {
		resp.Policies = []semaq.PolicyInfo{}
	}
	return resp.Policies, nil
}

// Policy reads one rule; semaq.ErrPolicyNotFound if there is none of that
// name.
func (c *Client) Policy(ctx context.Context, name string) (*semaq.PolicyInfo, error) {
	if name == "" {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: Policy: no name")
	}
	var info semaq.PolicyInfo
	if err := c.request(ctx, semaq.APIPolicyGet, semaq.PolicyNameRequest{Name: name}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// DeletePolicy removes a rule; semaq.ErrPolicyNotFound if there is none
// of that name.
func (c *Client) DeletePolicy(ctx context.Context, name string) error {
	if name == "" {
		return semaq.NewAPIError(semaq.ErrBadRequest, "client: DeletePolicy: no name")
	}
	return c.request(ctx, semaq.APIPolicyDelete, semaq.PolicyNameRequest{Name: name}, &semaq.PolicyDeleteResponse{})
}

// TestPolicy runs a rule, stored (r.Name) or given (r.Rule), on the sample
// r.Data without storing anything or writing the vault. A sample the rule
// would refuse is no error: the response's Blocked or Stopped says why.
func (c *Client) TestPolicy(ctx context.Context, r semaq.PolicyTestRequest) (*semaq.PolicyTestResponse, error) {
	if (r.Name == "") == (r.Rule == nil) {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: TestPolicy: name a stored rule or give one, not both")
	}
	var resp semaq.PolicyTestResponse
	if err := c.request(ctx, semaq.APIPolicyTest, r, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// RestorePII puts back the values a tokenize action replaced in r.Text,
// from the vault scope r.Scope (a message's AI-PII-Scope header), or with
// r.Values returns the scope's whole mapping. Only the tenant whose
// message the values came from gets them; semaq.ErrVaultNotFound when the
// scope holds none for it (expired, or never there).
func (c *Client) RestorePII(ctx context.Context, r semaq.PolicyRestoreRequest) (*semaq.PolicyRestoreResponse, error) {
	if r.Scope == "" {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: RestorePII: no scope")
	}
	var resp semaq.PolicyRestoreResponse
	if err := c.request(ctx, semaq.APIPolicyRestore, r, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}
