package client

import (
	"context"
	"fmt"
	"time"

	"github.com/semaq/semaq/semaq"
)

// The user API of a broker started with auth on (docs/security.md,
// Identities). Only an admin's key may call it.

// AddUser creates a user and returns it with its key: the only time the
// key is shown. A name already taken is semaq.ErrUserExists; a request
// the broker refuses is semaq.ErrBadRequest naming the field at fault.
func (c *Client) AddUser(ctx context.Context, r semaq.UserAddRequest) (*semaq.UserAddResponse, error) {
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
