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
// The replies go to the asking node's internal connection.

import (
	"encoding/json"
	"time"

	"github.com/nats-io/nats.go"

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
