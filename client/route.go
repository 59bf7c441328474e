package client

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/semaq"
)

// RouteOption adjusts AddRoute.
type RouteOption func(*semaq.RouteAddRequest) error

// WithReplace lets AddRoute replace a rule of the same name, atomically:
// every message is routed by the old rule or the new one. Without it an
// existing name fails with semaq.ErrRouteExists.
func WithReplace() RouteOption {
	return func(r *semaq.RouteAddRequest) error {
		r.Replace = true
		return nil
	}
}

// AddRoute stores a route rule. When it returns, the broker it is
// connected to routes the next message by it; other nodes follow within
// milliseconds. A rule the broker refuses returns semaq.ErrBadRoute with
// the reason: an expression that does not compile (with its line and
// column), a target no stream captures, bad weights.
func (c *Client) AddRoute(ctx context.Context, r semaq.Route, opts ...RouteOption) (*semaq.RouteInfo, error) {
	req := semaq.RouteAddRequest{Route: r}
	for _, opt := range opts {
		if err := opt(&req); err != nil {
			return nil, err
		}
	}
	if err := semaq.CheckRouteName(r.Name); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRoute, "client: AddRoute: %v", err)
	}
	var info semaq.RouteInfo
	if err := c.request(ctx, semaq.APIRouteAdd, req, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Routes lists the route rules in the order the ingress tries them, with
// the counters of the node that answers.
func (c *Client) Routes(ctx context.Context) ([]semaq.RouteInfo, error) {
	var resp semaq.RouteListResponse
	if err := c.request(ctx, semaq.APIRouteList, nil, &resp); err != nil {
		return nil, err
	}
	if resp.Routes == nil {
		resp.Routes = []semaq.RouteInfo{}
	}
	return resp.Routes, nil
}

// DeleteRoute removes a rule; semaq.ErrRouteNotFound if there is none of
// that name. When it returns, the connected broker no longer routes by it.
func (c *Client) DeleteRoute(ctx context.Context, name string) error {
	if err := semaq.CheckRouteName(name); err != nil {
		return semaq.NewAPIError(semaq.ErrBadRequest, "client: DeleteRoute: %v", err)
	}
	return c.request(ctx, semaq.APIRouteDelete, semaq.RouteDeleteRequest{Name: name}, nil)
}

// TestRoute asks the broker what it would do with a message published to
// subject with data and the headers opts set, without storing it: the
// ingress's own steps as a dry run (envelope, policy, schema, routing) —
// which rule matches (every rule tried, and why it did not match), the
// target subject, the stream, and the message as it would be stored. A
// message the ingress would refuse is not an error: the response's Refused
// says why and RefusedBy at which step. It takes no quota and reserves no
// queue room. The sender is the caller.
func (c *Client) TestRoute(ctx context.Context, subject string, data []byte, opts ...PublishOption) (*semaq.RouteTestResponse, error) {
	return c.testRoute(ctx, "", subject, data, opts)
}

// TestRouteAs is TestRoute for a message sent by the store user named as
// (auth on): its tenant is stamped and the policy sees it as the sender,
// as when it publishes. Admins may ask it.
func (c *Client) TestRouteAs(ctx context.Context, as, subject string, data []byte, opts ...PublishOption) (*semaq.RouteTestResponse, error) {
	if as == "" {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: TestRouteAs: no user")
	}
	return c.testRoute(ctx, as, subject, data, opts)
}

func (c *Client) testRoute(ctx context.Context, as, subject string, data []byte, opts []PublishOption) (*semaq.RouteTestResponse, error) {
	h := nats.Header{}
	for _, opt := range opts {
		if err := opt(h); err != nil {
			return nil, semaq.NewAPIError(semaq.ErrBadRequest, "%v", err)
		}
	}
	var resp semaq.RouteTestResponse
	req := semaq.RouteTestRequest{Subject: subject, Headers: h, Data: data, As: as}
	if err := c.request(ctx, semaq.APIRouteTest, req, &resp); err != nil {
		return nil, err
	}
	if resp.Target == "" {
		return nil, fmt.Errorf("client: TestRoute: broker sent no target")
	}
	return &resp, nil
}
