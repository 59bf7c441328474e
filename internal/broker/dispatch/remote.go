package dispatch

// What the other nodes of a cluster ask the dispatcher of a queue, which
// runs on one node only (the leader of the queue's stream): admission
// for requests their ingress takes, and the queue's status for the API
// they serve. Fetches, answers and cancels need nothing here: the
// dispatcher's subscriptions to them reach it from every node.
//
// The subjects are under _SQ_Q., one of the broker's own inboxes: only
// the broker may publish there or listen (docs/security.md), so a client
// can neither reserve a queue's capacity nor read what the nodes say.
// The replies go to the asking node's internal connection. Remote is the
// asking side: a queue as the other nodes know it (internal/broker/streams
// keeps one per queue dispatched elsewhere).

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/api"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// RemotePrefix is the prefix of the subjects other nodes reach a queue's
// dispatcher on.
const RemotePrefix = reserved.QueueRemoteInbox

// AdmitSubject takes admission checks for queue from other nodes: a
// RemoteAdmit; the reply is empty when the request is admitted (and
// reserved), a semaq.ErrorReply otherwise.
func AdmitSubject(queue string) string { return RemotePrefix + "adm." + queue }

// InfoSubject answers the queue's semaq.QueueInfo.
func InfoSubject(queue string) string { return RemotePrefix + "info." + queue }

// RemoteAdmit is an admission check another node's ingress asks for.
type RemoteAdmit struct {
	Tokens  int64 `json:"t"` // prompt tokens as declared, -1 when estimated from the payload
	DataLen int   `json:"b"` // payload bytes
}

// remoteSubs are the subscriptions of the remote subjects.
func (d *Dispatcher) remoteSubs() map[string]nats.MsgHandler {
	return map[string]nats.MsgHandler{
		AdmitSubject(d.name): d.onRemoteAdmit,
		InfoSubject(d.name):  d.onRemoteInfo,
	}
}

func (d *Dispatcher) onRemoteAdmit(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	var req RemoteAdmit
	if err := json.Unmarshal(m.Data, &req); err != nil || req.DataLen < 0 {
		_ = d.nc.Publish(m.Reply, semaq.MarshalError(semaq.NewAPIError(semaq.ErrBadRequest, "queue %s: admission check %q is not valid", d.name, m.Data)))
		return
	}
	var body []byte
	if e := d.admit(req.Tokens, req.DataLen); e != nil {
		body = semaq.MarshalError(e)
	}
	_ = d.nc.Publish(m.Reply, body)
}

func (d *Dispatcher) onRemoteInfo(m *nats.Msg) {
	if m.Reply == "" {
		return
	}
	body, _ := json.Marshal(semaq.QueueInfo{Config: d.Config(), Status: d.Status(time.Now())})
	_ = d.nc.Publish(m.Reply, body)
}

// remoteAdmitTimeout bounds an admission check asked of another node.
const remoteAdmitTimeout = 2 * time.Second

// Remote is a queue dispatched by another node, as this node reaches its
// dispatcher: the other side of the subjects above. Its methods are safe
// for concurrent use.
type Remote struct {
	name string
	nc   *nats.Conn // the node's internal connection
	log  func(msg string, args ...any)
}

// NewRemote is queue dispatched by another node, asked over nc (the
// node's internal connection); log gets the checks not answered.
func NewRemote(nc *nats.Conn, queue string, log func(msg string, args ...any)) *Remote {
	return &Remote{name: queue, nc: nc, log: log}
}

// Admit asks the queue's dispatcher. With no dispatcher answering (the
// queue's stream is electing a leader, or its dispatcher is starting) the
// request is admitted: JetStream's limits on the stream hold whatever
// admission says (dispatch/admission.go).
func (r *Remote) Admit(env *semaq.Envelope, dataLen int) *semaq.APIError {
	body, _ := json.Marshal(RemoteAdmit{Tokens: int64(env.PromptTokens), DataLen: dataLen})
	m, err := r.nc.Request(AdmitSubject(r.name), body, remoteAdmitTimeout)
	if err != nil {
		r.log("admission check not answered; admitted (the stream's limits still hold)", "queue", r.name, "err", err)
		return nil
	}
	if len(m.Data) == 0 {
		return nil
	}
	var rep semaq.ErrorReply
	if err := json.Unmarshal(m.Data, &rep); err != nil || rep.Error == nil {
		r.log("admission check answered with something else; admitted", "queue", r.name, "reply", string(m.Data))
		return nil
	}
	return rep.Error
}

// Info asks the node dispatching the queue for its info. A queue whose
// dispatcher does not answer (its stream is electing a leader) is
// unavailable, not missing.
func (r *Remote) Info(ctx context.Context) (*semaq.QueueInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, api.Timeout)
	defer cancel()
	m, err := r.nc.RequestWithContext(ctx, InfoSubject(r.name), nil)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			return nil, semaq.NewAPIError(semaq.ErrUnavailable, "queue %s has no dispatcher answering right now (its stream is electing a leader?); ask again", r.name)
		}
		return nil, err
	}
	var qi semaq.QueueInfo
	if err := json.Unmarshal(m.Data, &qi); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrUnavailable, "queue %s: its dispatcher answered %q", r.name, m.Data)
	}
	return &qi, nil
}
