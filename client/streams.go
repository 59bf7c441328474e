package client

import (
	"context"
	"fmt"

	"github.com/semaq/semaq/semaq"
)

// AddStream creates a stream. It fails with semaq.ErrStreamExists when the
// name is taken and semaq.ErrBadStream when the configuration is refused.
func (c *Client) AddStream(ctx context.Context, cfg semaq.StreamConfig) (*semaq.StreamInfo, error) {
	if err := semaq.CheckStreamName(cfg.Name); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadStream, "%v", err)
	}
	ctx, cancel := c.withChangeTimeout(ctx)
	defer cancel()
	var info semaq.StreamInfo
	if err := c.request(ctx, fmt.Sprintf(semaq.APIStreamCreateT, cfg.Name), cfg, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// StreamInfo describes one stream; semaq.ErrStreamNotFound if there is none.
func (c *Client) StreamInfo(ctx context.Context, name string) (*semaq.StreamInfo, error) {
	if err := semaq.CheckStreamName(name); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "%v", err)
	}
	var info semaq.StreamInfo
	if err := c.request(ctx, fmt.Sprintf(semaq.APIStreamInfoT, name), nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Streams lists every stream, sorted by name.
func (c *Client) Streams(ctx context.Context) ([]semaq.StreamInfo, error) {
	var resp semaq.StreamListResponse
	if err := c.request(ctx, semaq.APIStreamList, nil, &resp); err != nil {
		return nil, err
	}
	return resp.Streams, nil
}

// DeleteStream deletes a stream and every message in it.
func (c *Client) DeleteStream(ctx context.Context, name string) error {
	if err := semaq.CheckStreamName(name); err != nil {
		return semaq.NewAPIError(semaq.ErrBadRequest, "%v", err)
	}
	return c.request(ctx, fmt.Sprintf(semaq.APIStreamDeleteT, name), nil, nil)
}

// StreamBySubject names the stream that captures subject; semaq.ErrNoStream
// if none does.
func (c *Client) StreamBySubject(ctx context.Context, subject string) (string, error) {
	var resp semaq.StreamLookupResponse
	if err := c.request(ctx, semaq.APIStreamLookup, semaq.StreamLookupRequest{Subject: subject}, &resp); err != nil {
		return "", err
	}
	return resp.Stream, nil
}

// ServerInfo describes the broker.
func (c *Client) ServerInfo(ctx context.Context) (*semaq.ServerInfo, error) {
	var info semaq.ServerInfo
	if err := c.request(ctx, semaq.APIInfo, nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}
