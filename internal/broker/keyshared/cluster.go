package keyshared

// A group in a cluster (docs/key-shared.md#in-a-cluster): its pump runs on
// one node, whatever node each member asked. A JOIN is checked by the node
// that took it (the caller's rights, the stream, the group's durable and
// key), then the member joins
//
//   - here, if this node runs the group;
//   - else on the node that runs it, asked on runSubject, which that node
//     listens on while it runs the group;
//   - else, nobody runs it: on the node leading the group's consumer
//     (JetStream's choice, the same for every node), asked on startSubject,
//     so two JOINs racing through two nodes meet on one.
//
// The member's id names the pump's node, so its PING and LEAVE go there.
// When that node is lost, its members' pings find nobody: they join again,
// and the pump starts on the consumer's new leader, with the keys of the
// messages still in flight at members pinned (scan.go).

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/broker/pump"
	"github.com/semaq/semaq/semaq"
)

// hop is how far a JOIN has come.
type hop int

const (
	fromClient hop = iota // from a member: checked here, may be sent on
	toLeader              // sent to the consumer's leader: asks the runner, else starts here
	toRunner              // sent to the node running the group: joins there
)

func runSubject(stream, group string) string {
	return pump.RemotePrefix + "ks.run." + stream + "." + group
}

func infoSubject(stream, group string) string {
	return pump.RemotePrefix + "ks.info." + stream + "." + group
}

func startSubject(node string) string { return pump.RemotePrefix + "ks.start." + node }

// leaderWait bounds the wait for a group's consumer to have a leader (it is
// electing one after its node was lost).
const leaderWait = 5 * time.Second

// joinElsewhere sends req to the node that runs the group or, when none
// does and this node took it from a client, to the node leading the
// group's consumer, and returns that node's answer. It returns nothing
// when the member is to join here, starting the group.
func (k *Service) joinElsewhere(ctx context.Context, req *semaq.KeySharedJoinRequest, stream string, cons jetstream.Consumer, h hop) ([]byte, error) {
	if h == toRunner {
		return nil, nil
	}
	raw, err := k.ask(ctx, runSubject(stream, req.Group), req)
	if err == nil || !errors.Is(err, nats.ErrNoResponders) {
		return raw, err
	}
	if h != fromClient {
		return nil, nil
	}
	leader, err := k.leaderOf(ctx, cons)
	if err != nil || leader == k.deps.Node {
		return nil, err
	}
	raw, err = k.ask(ctx, startSubject(leader), req)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "key-shared: group %s: node %s, which leads its consumer, does not answer; join again", req.Group, leader)
	}
	return raw, err
}

// ask sends a JOIN to another node. No responders is returned as is;
// other failures as unavailable.
func (k *Service) ask(ctx context.Context, subject string, req *semaq.KeySharedJoinRequest) ([]byte, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	m, err := k.deps.NC.RequestWithContext(ctx, subject, body)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, err
	case err != nil:
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "key-shared: group %s: the node running it did not answer (%v); join again", req.Group, err)
	}
	return m.Data, nil
}

// leaderOf is the node leading cons, this node when JetStream is not
// clustered. It waits for an election under way.
func (k *Service) leaderOf(ctx context.Context, cons jetstream.Consumer) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	for {
		info, err := cons.Info(ctx)
		if err == nil {
			if info.Cluster == nil {
				return k.deps.Node, nil
			}
			if info.Cluster.Leader != "" {
				return info.Cluster.Leader, nil
			}
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", semaq.NewAPIError(semaq.ErrUnavailable, "key-shared: the group's consumer has no leader now (%v); join again", err)
		case <-t.C:
		}
	}
}

// onRemoteJoin serves a JOIN another node sent on. That node checked the
// caller's rights; the request itself is checked again (only the broker
// may publish here, and this keeps it so if that ever failed).
func (k *Service) onRemoteJoin(h hop) nats.MsgHandler {
	return func(m *nats.Msg) {
		req, err := parseJoin(m.Data)
		if err != nil {
			api.ReplyErr(k.deps.Log, m, api.Error("key-shared join")(err))
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), api.Timeout)
		defer cancel()
		k.replyJoin(ctx, m, req, h)
	}
}

// infoElsewhere asks the node running the group for its info.
func (k *Service) infoElsewhere(ctx context.Context, req *semaq.KeySharedInfoRequest) (any, error) {
	gone := semaq.NewAPIError(semaq.ErrMemberGone, "key-shared group %s on stream %s has no members", req.Group, req.Stream)
	if semaq.CheckConsumerName(req.Group) != nil || semaq.CheckConsumerName(req.Stream) != nil {
		return nil, gone
	}
	m, err := k.deps.NC.RequestWithContext(ctx, infoSubject(req.Stream, req.Group), nil)
	if err != nil {
		return nil, gone
	}
	var rep semaq.ErrorReply
	if json.Unmarshal(m.Data, &rep) == nil && rep.Error != nil {
		return nil, rep.Error
	}
	return json.RawMessage(m.Data), nil
}

// subscribeRemote makes the group reachable from other nodes while it
// runs.
func (g *group) subscribeRemote() error {
	k := g.ks
	join, err := k.deps.NC.Subscribe(runSubject(g.stream, g.name), k.onRemoteJoin(toRunner))
	if err != nil {
		return err
	}
	info, err := k.deps.NC.Subscribe(infoSubject(g.stream, g.name), func(m *nats.Msg) { api.ReplyJSON(k.deps.Log, m, g.info()) })
	if err != nil {
		_ = join.Unsubscribe()
		return err
	}
	g.mu.Lock()
	g.remote = []*nats.Subscription{join, info}
	stopped := g.stopped
	g.mu.Unlock()
	if stopped {
		g.unsubscribeRemote()
	}
	return nil
}

func (g *group) unsubscribeRemote() {
	g.mu.Lock()
	subs := g.remote
	g.remote = nil
	g.mu.Unlock()
	for _, s := range subs {
		_ = s.Unsubscribe()
	}
}
