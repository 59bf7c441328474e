package ingress

import (
	"context"
	"crypto/ed25519"
	"time"

	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/broker/chainhead"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/provenance"
)

// startChains subscribes to the commits of the chains' batches, on the
// node's internal connection, which also sends them.
func (in *Ingress) startChains(key ed25519.PrivateKey) error {
	cs := &in.chains
	cs.sessions = make(map[chainKey]*chainSession)
	cs.inflight = make(map[string]*chainBatch)
	if in.conn == nil {
		return nil // chained streams refuse (chain)
	}
	cs.conn = in.conn
	cs.prefix = reserved.IngressAckInbox + nuid.Next() + "."
	if key != nil {
		cs.key = key
		cs.keyID = provenance.KeyID(key.Public().(ed25519.PublicKey))
	}
	sub, err := in.conn.Subscribe(cs.prefix+">", in.chainAck)
	if err != nil {
		return err
	}
	if err := sub.SetPendingLimits(pendingMsgs, pendingBytes); err != nil {
		return err
	}
	return in.conn.Flush()
}

// headReadTimeout bounds the read of a session's head record.
const headReadTimeout = 5 * time.Second

// readHead reads session k's head record from its stream's leader:
// nothing there is a chain not begun.
func (in *Ingress) readHead(k chainKey, order string) (chainhead.Head, error) {
	ctx, cancel := context.WithTimeout(context.Background(), headReadTimeout)
	defer cancel()
	h, _, err := chainhead.Read(ctx, in.conn, k.stream, k.tenant, k.session, order)
	return h, err
}
