package client

import (
	"context"

	"github.com/semaq/semaq/semaq"
)

// AddClass adds a hardware class of work queues, or with replace replaces
// one (docs/queues.md); admins only. It is in force on the connected node
// when it returns.
func (c *Client) AddClass(ctx context.Context, class semaq.QueueClass, replace bool) (*semaq.ClassInfo, error) {
	var info semaq.ClassInfo
	err := c.request(ctx, semaq.APIClassAdd, semaq.ClassAddRequest{QueueClass: class, Replace: replace}, &info)
	return &info, err
}

// Classes lists the classes by name, with the requests each has held.
func (c *Client) Classes(ctx context.Context) ([]semaq.ClassInfo, error) {
	var resp semaq.ClassListResponse
	err := c.request(ctx, semaq.APIClassList, nil, &resp)
	return resp.Classes, err
}

// DeleteClass removes a class; semaq.ErrClassNotFound if there is none.
func (c *Client) DeleteClass(ctx context.Context, name string) error {
	return c.request(ctx, semaq.APIClassDelete, semaq.ClassNameRequest{Name: name}, nil)
}
