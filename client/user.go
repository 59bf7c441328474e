package client

import (
	"context"
	"fmt"
	"time"

	"github.com/semaq/semaq/semaq"
)

// The user API of a broker started with auth on (docs/security.md,
// Identities). Only an admin's key may call it.

// changeTimeout is how long a change that waits for the cluster waits
// for its answer when ctx has no deadline, if the client's timeout is
// shorter: a stream or queue add (JetStream places its replicas, and a
// queue's dispatcher and lease store start), a user add or key rotation,
// whose answer is the only copy of the key. On a cluster the broker
// answers once the other nodes applied the change (up to 5 s for one
// that does not confirm) and its audit record is stored, while a node's
// loss has JetStream elect new leaders.
const changeTimeout = 30 * time.Second

// withChangeTimeout is ctx for a change that waits for the cluster.
func (c *Client) withChangeTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, max(c.timeout, changeTimeout))
}

// AddUser creates a user and returns it with its key: the only time the
// key is shown. A name already taken is semaq.ErrUserExists; a request
// the broker refuses is semaq.ErrBadRequest naming the field at fault.
// Without a deadline in ctx it waits up to 30 s (changeTimeout); when
// it times out all the same, the user may exist without its key known:
// RotateKey gives it a new one.
func (c *Client) AddUser(ctx context.Context, r semaq.UserAddRequest) (*semaq.UserAddResponse, error) {
	ctx, cancel := c.withChangeTimeout(ctx)
	defer cancel()
	var resp semaq.UserAddResponse
	if err := c.request(ctx, semaq.APIUserAdd, r, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// Users lists the users, by name. No key or hash is ever listed.
func (c *Client) Users(ctx context.Context) ([]semaq.UserInfo, error) {
	var resp semaq.UserListResponse
	if err := c.request(ctx, semaq.APIUserList, nil, &resp); err != nil {
		return nil, err
	}
	if resp.Users == nil {
		resp.Users = []semaq.UserInfo{}
	}
	return resp.Users, nil
}

// UserInfo describes user name; semaq.ErrUserNotFound if there is none.
func (c *Client) UserInfo(ctx context.Context, name string) (*semaq.UserInfo, error) {
	var info semaq.UserInfo
	if err := c.request(ctx, fmt.Sprintf(semaq.APIUserInfoT, name), nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// RemoveUser removes a user; its open connections are closed.
func (c *Client) RemoveUser(ctx context.Context, name string) (*semaq.UserRemoveResponse, error) {
	var resp semaq.UserRemoveResponse
	if err := c.request(ctx, semaq.APIUserRemove, semaq.UserRemoveRequest{Name: name}, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// RotateKey gives a user a new key, returned this once; its old keys stop
// working at once and their open connections are closed. A positive
// expiresIn makes the new key stop working that long from now (the first
// value counts; none: no expiry).
func (c *Client) RotateKey(ctx context.Context, name string, expiresIn ...time.Duration) (*semaq.UserAddResponse, error) {
	r := semaq.UserRotateRequest{Name: name}
	if len(expiresIn) > 0 {
		r.ExpiresIn = expiresIn[0]
	}
	ctx, cancel := c.withChangeTimeout(ctx)
	defer cancel()
	var resp semaq.UserAddResponse
	if err := c.request(ctx, semaq.APIUserRotate, r, &resp); err != nil {
		return nil, err
	}
	return &resp, nil
}

// SetUserQuota changes a user's own quotas (docs/quotas.md): a nil rpm or
// tpm keeps its value, 0 removes the limit. It needs an admin's key.
func (c *Client) SetUserQuota(ctx context.Context, name string, rpm, tpm *int64) (*semaq.UserInfo, error) {
	var info semaq.UserInfo
	if err := c.request(ctx, semaq.APIUserQuota, semaq.UserQuotaRequest{Name: name, RPM: rpm, TPM: tpm}, &info); err != nil {
		return nil, err
	}
	return &info, nil
}
