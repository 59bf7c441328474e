package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/semaq/semaq/semaq"
)

// WASM plugins (docs/plugins.md): modules the broker runs at a stage of
// its ingress, on the messages of the subjects they name. With auth on,
// only admins manage plugins.

// pluginCommitTimeout bounds the commit of an upload when the caller's
// context has no deadline: the commit compiles the module on every node.
const pluginCommitTimeout = 2 * time.Minute

// AddPlugin uploads the module wasm and stores p as its plugin; replace
// lets it take the place of a plugin of the same name (without it, that
// fails with semaq.ErrPluginExists). p.SHA256 and p.Size are computed
// from wasm when empty, and must match it when given. The upload goes in
// chunks of the size the broker asks for; the last request, which loads
// the module on every node, gets two minutes when ctx has no deadline.
// A module the broker refuses returns semaq.ErrBadPlugin with the reason.
func (c *Client) AddPlugin(ctx context.Context, p semaq.Plugin, wasm []byte, replace bool) (*semaq.PluginInfo, error) {
	if p.Name == "" {
		return nil, semaq.NewAPIError(semaq.ErrBadPlugin, "client: AddPlugin: the plugin has no name")
	}
	if len(wasm) == 0 {
		return nil, semaq.NewAPIError(semaq.ErrBadPlugin, "client: AddPlugin: the module is empty")
	}
	if len(wasm) > semaq.MaxPluginBytes {
		return nil, semaq.NewAPIError(semaq.ErrBadPlugin, "client: AddPlugin: the module has %d bytes, more than the %d a plugin may have",
			len(wasm), semaq.MaxPluginBytes)
	}
	sum := sha256.Sum256(wasm)
	digest := hex.EncodeToString(sum[:])
	switch {
	case p.SHA256 == "":
		p.SHA256 = digest
	case p.SHA256 != digest:
		return nil, semaq.NewAPIError(semaq.ErrBadPlugin, "client: AddPlugin: SHA256 %s is not the module's (%s)", p.SHA256, digest)
	}
	switch {
	case p.Size == 0:
		p.Size = int64(len(wasm))
	case p.Size != int64(len(wasm)):
		return nil, semaq.NewAPIError(semaq.ErrBadPlugin, "client: AddPlugin: Size %d is not the module's (%d bytes)", p.Size, len(wasm))
	}

	var up semaq.PluginUpload
	if err := c.request(ctx, semaq.APIPluginAdd, semaq.PluginAddRequest{Plugin: p, Replace: replace}, &up); err != nil {
		return nil, err
	}
	if up.Upload == "" || up.Chunk <= 0 {
		return nil, fmt.Errorf("client: AddPlugin: broker sent no upload (id %q, chunk %d)", up.Upload, up.Chunk)
	}
	chunk := min(up.Chunk, semaq.MaxPluginChunk)
	n := 0
	for off := 0; off < len(wasm); off += chunk {
		end := min(off+chunk, len(wasm))
		var ack semaq.PluginChunkResponse
		if err := c.requestData(ctx, fmt.Sprintf(semaq.APIPluginChunkT, up.Upload, n), wasm[off:end], &ack); err != nil {
			return nil, err
		}
		if ack.Received != int64(end) {
			return nil, fmt.Errorf("client: AddPlugin: the broker has %d bytes of the module after chunk %d, not %d", ack.Received, n, end)
		}
		n++
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, pluginCommitTimeout)
		defer cancel()
	}
	var info semaq.PluginInfo
	if err := c.requestData(ctx, fmt.Sprintf(semaq.APIPluginChunkT, up.Upload, n), nil, &info); err != nil {
		return nil, err
	}
	return &info, nil
}

// Plugins lists the plugins by name, with the counters of the node that
// answers.
func (c *Client) Plugins(ctx context.Context) ([]semaq.PluginInfo, error) {
	var resp semaq.PluginListResponse
	if err := c.request(ctx, semaq.APIPluginList, nil, &resp); err != nil {
		return nil, err
	}
	if resp.Plugins == nil {
		resp.Plugins = []semaq.PluginInfo{}
	}
	return resp.Plugins, nil
}

// DeletePlugin removes a plugin from every node; semaq.ErrPluginNotFound
// if there is none of that name.
func (c *Client) DeletePlugin(ctx context.Context, name string) error {
	if name == "" {
		return semaq.NewAPIError(semaq.ErrBadRequest, "client: DeletePlugin: no name")
	}
	return c.request(ctx, semaq.APIPluginDelete, semaq.PluginNameRequest{Name: name}, &semaq.PolicyDeleteResponse{})
}
