package ingress

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nuid"

	"github.com/semaq/semaq/internal/broker/chainhead"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/provenance"
)

// startChains subscribes to the acks of the chains' batches, on the
// node's internal connection, which also sends them.
func (in *Ingress) startChains(key ed25519.PrivateKey) error {
	cs := &in.chains
	// Under mu: the batch sweeper (startFrames) may already tick.
	cs.mu.Lock()
	cs.sessions = make(map[chainKey]*chainSession)
	cs.inflight = make(map[string]*chainBatch)
	cs.mu.Unlock()
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

// settleHead reads session k's head record from the stream's leader and
// settles the batch it begins: all stored, it is the head; some missing
// after chainhead.Window (their writer died, or is late), it fences them
// off with a record of the run that is stored (the messages of the batch
// still on their way are refused from then on), looks once more for any
// stored before the fence, and records those too. Nothing there is a
// chain not begun.
func (in *Ingress) settleHead(ctx context.Context, k chainKey, order string) (chainhead.Head, error) {
	ctx, cancel := context.WithTimeout(ctx, headSettleTimeout)
	defer cancel()
	for {
		h, found, err := chainhead.Read(ctx, in.conn, k.stream, k.tenant, k.session, order)
		if err != nil || !found || !h.Pending() {
			return h, err
		}
		links, err := chainhead.Scan(ctx, in.conn, k.stream, k.tenant, k.session, order, h.Seq+1, 0, h.Base, h.Links, h.Stored.Add(chainhead.Window))
		if err != nil {
			return h, err
		}
		if uint64(len(links)) == h.Links-h.Base {
			h.Base, h.BaseHash, h.BaseOrder = h.Links, h.Hash, h.Order
			return h, nil
		}
		if wait := time.Until(h.Stored.Add(chainhead.Window)); wait > 0 {
			// Its writer may still be storing the batch.
			select {
			case <-time.After(min(wait, 100*time.Millisecond)):
				continue
			case <-ctx.Done():
				return h, ctx.Err()
			}
		}
		// Fence: a record of the stored run, replacing h.
		fenced := h.Upto(links)
		seq, err := in.writeHead(ctx, k, fenced, h.Seq)
		if err != nil {
			if isStale(err) {
				continue // another writer settled or moved it
			}
			return h, err
		}
		in.metrics.ChainSettled()
		// Messages of the batch stored between the scan and the fence.
		more, err := chainhead.Scan(ctx, in.conn, k.stream, k.tenant, k.session, order, h.Seq+1, seq, fenced.Links, h.Links, time.Time{})
		if err != nil || len(more) == 0 {
			fenced.Seq = seq
			return fenced, err
		}
		late := fenced.Upto(more)
		if _, err := in.writeHead(ctx, k, late, seq); err != nil && !isStale(err) {
			return h, err
		}
		// Read it back: the loop takes whatever is the head now.
	}
}

// headSettleTimeout bounds the settling of one session's head.
const headSettleTimeout = 30 * time.Second

// errStale is a head record refused because the head moved.
var errStale = errors.New("the head moved")

func isStale(err error) bool { return errors.Is(err, errStale) }

// writeHead stores h as session k's head record, replacing the one at
// prev, and returns its sequence.
func (in *Ingress) writeHead(ctx context.Context, k chainKey, h chainhead.Head, prev uint64) (uint64, error) {
	r := chainhead.Record(k.stream, k.tenant, k.session, h, prev)
	m, err := in.conn.RequestMsgWithContext(ctx, r)
	if err != nil {
		return 0, err
	}
	var ack jsAck
	if err := json.Unmarshal(m.Data, &ack); err != nil {
		return 0, fmt.Errorf("writing a chain head: %w", err)
	}
	if e := ack.Error; e != nil {
		if e.ErrCode == jsWrongLastSeq || e.ErrCode == jsWrongLastSeqConst {
			return 0, errStale
		}
		return 0, errors.New(e.Description)
	}
	return ack.Sequence, nil
}
