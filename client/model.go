package client

import (
	"cmp"
	"context"
	"time"

	"github.com/semaq/semaq/semaq"
)

// ModelRegister adds a version to the model registry (docs/models.md).
func (c *Client) ModelRegister(ctx context.Context, req semaq.ModelRegisterRequest) (*semaq.ModelInfo, error) {
	return modelCall[semaq.ModelInfo](ctx, c, semaq.APIModelRegister, req)
}

// ModelPromote makes a version the canary of a share of the traffic, or
// the active version in one switch, past the promotion gate
// (semaq.ErrModelGate names the figures that refused it).
func (c *Client) ModelPromote(ctx context.Context, req semaq.ModelPromoteRequest) (*semaq.ModelInfo, error) {
	return modelCall[semaq.ModelInfo](ctx, c, semaq.APIModelPromote, req)
}

// ModelRollback ends a model's canary, or returns its traffic to the
// previous active version.
func (c *Client) ModelRollback(ctx context.Context, model string) (*semaq.ModelInfo, error) {
	return modelCall[semaq.ModelInfo](ctx, c, semaq.APIModelRollback, semaq.ModelRef{Model: model})
}

// ModelReport reports a version's figures, which the gate judges.
func (c *Client) ModelReport(ctx context.Context, req semaq.ModelReportRequest) (*semaq.ModelInfo, error) {
	return modelCall[semaq.ModelInfo](ctx, c, semaq.APIModelReport, req)
}

// ModelGet is one model with its history; ModelList the registry.
func (c *Client) ModelGet(ctx context.Context, model string) (*semaq.ModelInfo, error) {
	return modelCall[semaq.ModelInfo](ctx, c, semaq.APIModelGet, semaq.ModelRef{Model: model})
}

func (c *Client) ModelList(ctx context.Context) (*semaq.ModelListResponse, error) {
	return modelCall[semaq.ModelListResponse](ctx, c, semaq.APIModelList, nil)
}

// ModelDrain stops admission to a version and waits until no request
// bound to it is queued or held, then retires it; it asks again every
// poll (0: 250ms) until then or until ctx ends, calling progress, when
// not nil, with each answer.
func (c *Client) ModelDrain(ctx context.Context, model, version string, poll time.Duration, progress func(semaq.ModelDrainResponse)) (*semaq.ModelDrainResponse, error) {
	for {
		r, err := modelCall[semaq.ModelDrainResponse](ctx, c, semaq.APIModelDrain, semaq.ModelRef{Model: model, Version: version})
		if err != nil || r.Done {
			return r, err
		}
		if progress != nil {
			progress(*r)
		}
		select {
		case <-ctx.Done():
			return r, ctx.Err()
		case <-time.After(cmp.Or(poll, 250*time.Millisecond)):
		}
	}
}

func modelCall[T any](ctx context.Context, c *Client, subj string, body any) (*T, error) {
	var out T
	if err := c.request(ctx, subj, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
