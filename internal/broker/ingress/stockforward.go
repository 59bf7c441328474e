package ingress

import (
	"strings"

	"github.com/semaq/semaq/internal/broker/wire"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/semaq"
)

// A stock client's batch on a cluster (stockbatch.go): the queue group of
// the ingresses spans the nodes, so a batch's messages reach several. Each
// is forwarded to the node of the client's connection, named in
// Nats-Request-Info, on <IngressBatchInbox><node>.<subject>, headers as
// they came and the reply in hdrForwardReply (the NATS server refuses a
// client's publish with a reply of its service imports, _R_.…, which the
// client's is): that node holds the batch. Only the nodes publish and
// listen there (reserved.Inboxes), so what arrives is what a client's
// server stamped.

// hdrForwardReply carries a forwarded batch message's reply subject.
const hdrForwardReply = "Semaq-Forward-Reply"

// startStockForward subscribes to the stock batch messages other nodes
// forward to this one, when the node is one of a cluster.
func (in *Ingress) startStockForward() error {
	if !in.clustered || in.conn == nil {
		return nil
	}
	node := in.conn.ConnectedServerName()
	if !nodeToken(node) {
		in.log.Warn("stock clients' batches are held where their messages land: the node's name is not a subject token", "node", node)
		return nil
	}
	in.node = node
	prefix := reserved.IngressBatchInbox + node + "."
	_, err := in.wire.QueueSubscribe(prefix+">", "", func(m *wire.Msg) {
		subject, ok := strings.CutPrefix(string(m.Subject), prefix)
		if !ok {
			return
		}
		st, pat := in.served.find(subject)
		if st == nil {
			// The stream went away: the batch misses this message, and
			// is refused at its commit.
			in.log.Debug("a forwarded batch message no stream captures", "subject", subject)
			return
		}
		fwd := *m
		fwd.Subject = []byte(subject)
		if reply := headerValue(m.Header, forwardReplyKey); len(reply) > 0 {
			fwd.Reply = reply
		}
		in.receive(st, st.pats[pat], &fwd)
	})
	return err
}

// forwardStock forwards p, a message of a stock batch from a client of
// node server, to that node when it is another: reported true.
func (in *Ingress) forwardStock(p *publication, server string) bool {
	if in.node == "" || server == in.node || !nodeToken(server) {
		return false
	}
	m := p.m
	delete(m.Header, hdrForwardReply) // only a node sets it
	if m.Reply != "" {
		m.Header[hdrForwardReply] = []string{m.Reply}
	}
	if err := p.out.Publish(reserved.IngressBatchInbox+server+"."+m.Subject, "", m.Header, m.Data); err != nil {
		in.reject(p, semaq.NewAPIError(semaq.ErrUnavailable, "batch message on %s: forwarding it to node %s, which holds its batch: %v", m.Subject, server, err))
	}
	return true
}

var forwardReplyKey = []byte("\r\n" + hdrForwardReply + ":")

// nodeToken says whether a node's name can be one token of a subject.
func nodeToken(name string) bool {
	return name != "" && !strings.ContainsAny(name, ".*> \t\r\n")
}
