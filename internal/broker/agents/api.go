package agents

import (
	"context"
	"encoding/json"
	"errors"
	"slices"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/semaq"
)

// Handlers serves the registry on $SQ.API.AGENT.*.
func (r *Registry) Handlers() api.Handlers {
	return api.Handlers{
		semaq.APIAgentAnnounce: op(r, "announce", r.announce),
		semaq.APIAgentList:     op(r, "list", r.listLive),
		semaq.APIAgentLeave:    op(r, "leave", r.leave),
	}
}

// op adapts one registry operation to a NATS handler, as the route rules'
// do.
func op[Req any](r *Registry, name string, fn func(ctx context.Context, req *Req) (any, error)) nats.MsgHandler {
	return api.Op(r.log, "agent "+name, fn, api.Error("agent "+name))
}

func (r *Registry) announce(ctx context.Context, req *semaq.AgentAnnounceRequest) (any, error) {
	ttl, err := semaq.CheckAgent(&req.Agent, req.TTL)
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadAgent, "agent announce: %v", err)
	}
	now := r.now().UTC()
	info := semaq.AgentInfo{Agent: req.Agent, TTL: ttl, AnnouncedAt: now, ExpiresAt: now.Add(ttl)}
	info.Intents = slices.Compact(slices.Sorted(slices.Values(info.Intents)))
	val, err := json.Marshal(info)
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadAgent, "agent %s: %v", info.ID, err)
	}
	if _, err := r.kv.Put(ctx, info.ID, val); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "agent %s: storing: %v", info.ID, err)
	}
	return info, nil
}

func (r *Registry) listLive(ctx context.Context, _ *struct{}) (any, error) {
	live, expired, err := r.list(ctx)
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "agent list: %v", err)
	}
	for _, e := range expired {
		// Only the revision read may go: a heartbeat since then keeps it.
		if err := r.kv.Delete(ctx, e.key, jetstream.LastRevision(e.revision)); err != nil &&
			!errors.Is(err, jetstream.ErrKeyExists) {
			r.log.Debug("removing expired agent", "agent", e.key, "err", err)
		}
	}
	return semaq.AgentListResponse{Agents: live}, nil
}

func (r *Registry) leave(ctx context.Context, req *semaq.AgentLeaveRequest) (any, error) {
	if err := semaq.CheckAgentID(req.ID); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "agent leave: %v", err)
	}
	if _, err := r.kv.Get(ctx, req.ID); err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, semaq.NewAPIError(semaq.ErrAgentNotFound, "agent %s not found", req.ID)
		}
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "agent %s: reading: %v", req.ID, err)
	}
	if err := r.kv.Delete(ctx, req.ID); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "agent %s: deleting: %v", req.ID, err)
	}
	return semaq.AgentLeaveResponse{Success: true}, nil
}
