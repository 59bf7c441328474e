package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// Agent capability registry (docs/agents.md).
//
// Announcements live in the KV bucket SQ_AGENTS, one key per agent ID,
// written only by the broker. Liveness is the broker's own clock: an
// announcement stamps AnnouncedAt and ExpiresAt = AnnouncedAt + TTL, and a
// list returns only the entries not yet expired, deleting the expired
// ones it finds. An expiry read back from the entry itself needs no timer
// and no watcher, and every node answers the same way. The bucket's
// MaxAge (MaxAgentTTL) removes entries nobody lists.
//
// Delivery by intent needs nothing here: client.ServeIntent subscribes
// with the filter intent == "<intent>" on a durable shared by every agent
// serving that intent.

// agentLoadTimeout bounds opening the bucket when the node starts.
const agentLoadTimeout = 30 * time.Second

// agentTable is the announcement bucket.
type agentTable struct {
	kv     jetstream.KeyValue
	stream jetstream.Stream // the bucket's stream, read by list
	now    func() time.Time
}

// agentBucketBytes bounds the agent registry on disk.
const agentBucketBytes = 64 << 20

// openAgents opens (or creates) the announcement bucket and serves the
// registry on $SQ.API.AGENT.*.
func openAgents(ctx context.Context, s *Server) (subsystem.Subsystem, error) {
	ctx, cancel := context.WithTimeout(ctx, agentLoadTimeout)
	defer cancel()
	kv, err := jsutil.Bucket(ctx, s.js, jetstream.KeyValueConfig{
		Bucket:      reserved.AgentBucket,
		Description: "SemaQ agent announcements",
		History:     1,
		TTL:         semaq.MaxAgentTTL,
		// Announcements are small; the bound keeps a flood of names from
		// filling the disk (a full bucket refuses new ones).
		MaxBytes: agentBucketBytes,
		Storage:  jetstream.FileStorage,
		Replicas: s.ownReplicas(),
	})
	if err != nil {
		return nil, fmt.Errorf("broker: agent registry: bucket %s: %w", reserved.AgentBucket, err)
	}
	stream, err := s.js.Stream(ctx, "KV_"+reserved.AgentBucket)
	if err != nil {
		return nil, fmt.Errorf("broker: agent registry: bucket %s: %w", reserved.AgentBucket, err)
	}
	s.agents = &agentTable{kv: kv, stream: stream, now: time.Now}
	return subsystem.WithHandlers(subsystem.None, s.agentHandlers()), nil
}

// agentHandlers serves the registry on $SQ.API.AGENT.*.
func (s *Server) agentHandlers() map[string]nats.MsgHandler {
	return map[string]nats.MsgHandler{
		semaq.APIAgentAnnounce: agentOp(s, "announce", s.agentAnnounce),
		semaq.APIAgentList:     agentOp(s, "list", s.agentList),
		semaq.APIAgentLeave:    agentOp(s, "leave", s.agentLeave),
	}
}

// agentOp adapts one registry operation to a NATS handler, as routeOp does.
func agentOp[Req any](s *Server, name string, op func(ctx context.Context, at *agentTable, req *Req) (any, error)) nats.MsgHandler {
	return api.Op(s.log, "agent "+name, func(ctx context.Context, req *Req) (any, error) {
		if s.agents == nil {
			return nil, semaq.NewAPIError(semaq.ErrUnavailable, "agent registry not open")
		}
		return op(ctx, s.agents, req)
	}, api.Error("agent "+name))
}

func (s *Server) agentAnnounce(ctx context.Context, at *agentTable, req *semaq.AgentAnnounceRequest) (any, error) {
	ttl, err := semaq.CheckAgent(&req.Agent, req.TTL)
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadAgent, "agent announce: %v", err)
	}
	now := at.now().UTC()
	info := semaq.AgentInfo{Agent: req.Agent, TTL: ttl, AnnouncedAt: now, ExpiresAt: now.Add(ttl)}
	info.Intents = slices.Compact(slices.Sorted(slices.Values(info.Intents)))
	val, err := json.Marshal(info)
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadAgent, "agent %s: %v", info.ID, err)
	}
	if _, err := at.kv.Put(ctx, info.ID, val); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "agent %s: storing: %v", info.ID, err)
	}
	return info, nil
}

func (s *Server) agentList(ctx context.Context, at *agentTable, _ *struct{}) (any, error) {
	live, expired, err := at.list(ctx)
	if err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "agent list: %v", err)
	}
	for _, e := range expired {
		// Only the revision read may go: a heartbeat since then keeps it.
		if err := at.kv.Delete(ctx, e.key, jetstream.LastRevision(e.revision)); err != nil &&
			!errors.Is(err, jetstream.ErrKeyExists) {
			s.log.Debug("removing expired agent", "agent", e.key, "err", err)
		}
	}
	return semaq.AgentListResponse{Agents: live}, nil
}

func (s *Server) agentLeave(ctx context.Context, at *agentTable, req *semaq.AgentLeaveRequest) (any, error) {
	if err := semaq.CheckAgentID(req.ID); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "agent leave: %v", err)
	}
	if _, err := at.kv.Get(ctx, req.ID); err != nil {
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, semaq.NewAPIError(semaq.ErrAgentNotFound, "agent %s not found", req.ID)
		}
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "agent %s: reading: %v", req.ID, err)
	}
	if err := at.kv.Delete(ctx, req.ID); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "agent %s: deleting: %v", req.ID, err)
	}
	return semaq.AgentLeaveResponse{Success: true}, nil
}

// agentEntry names one stored announcement: its key and the revision read.
type agentEntry struct {
	key      string
	revision uint64
}

// list reads every announcement: the live ones by ID, and the entries of
// the expired or unreadable ones.
//
// It reads the bucket's stream directly, the subjects it holds and then
// the last message of each, instead of a KV watcher: a watcher signals the
// end of its initial values by per-message pending counts, which
// concurrent heartbeats can bring to zero early, and a list that stopped
// there would drop live agents.
func (at *agentTable) list(ctx context.Context) ([]semaq.AgentInfo, []agentEntry, error) {
	prefix := "$KV." + reserved.AgentBucket + "."
	info, err := at.stream.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, nil, err
	}
	now := at.now()
	live := []semaq.AgentInfo{}
	var expired []agentEntry
	for subj := range info.State.Subjects {
		msg, err := at.stream.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // removed since the subjects were read
		}
		if err != nil {
			return nil, nil, err
		}
		if isKVTombstone(msg.Header) {
			continue
		}
		key := strings.TrimPrefix(subj, prefix)
		var info semaq.AgentInfo
		if err := json.Unmarshal(msg.Data, &info); err != nil || info.ID != key || !now.Before(info.ExpiresAt) {
			expired = append(expired, agentEntry{key: key, revision: msg.Sequence})
			continue
		}
		live = append(live, info)
	}
	slices.SortFunc(live, func(a, b semaq.AgentInfo) int { return strings.Compare(a.ID, b.ID) })
	return live, expired, nil
}

// isKVTombstone reports whether a bucket message marks its key deleted or
// purged (by a client, or by JetStream's own marker on expiry).
func isKVTombstone(h nats.Header) bool {
	switch h.Get("KV-Operation") {
	case "DEL", "PURGE":
		return true
	}
	return h.Get(jetstream.MarkerReasonHeader) != ""
}
