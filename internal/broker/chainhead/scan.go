package chainhead

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/provenance"
	"github.com/semaq/semaq/semaq"
)

// Link is a stored message of a chain as a scan finds it.
type Link struct {
	N        uint64 // its number in the chain
	Hash     string
	Order    semaq.OrderValue
	HasOrder bool
	Seq      uint64
	Stored   time.Time
}

// Window is how long after its head record a batch's messages may still
// be coming: a scan past it, finding some missing, takes the batch as
// ended where the stored ones end (its writer stopped, or is fenced out).
const Window = 2 * time.Second

// maxScan bounds the messages one scan reads.
const maxScan = 100_000

// Scan reads stream from sequence from (up to and including upTo, 0: the
// end) for the links of a session numbered base+1 to want, in order, as
// its leader has them. It stops at the link want, at the end, at a
// message stored after until (when until is not zero), or after maxScan
// messages; a link out of order ends the found run.
func Scan(ctx context.Context, nc *nats.Conn, stream, tenant, session, order string, from, upTo, base, want uint64, until time.Time) ([]Link, error) {
	var out []Link
	next := base + 1
	for n := 0; n < maxScan && next <= want; n++ {
		if upTo != 0 && from > upTo {
			break
		}
		m, err := jsutil.GetMsg(ctx, nc, stream, jsutil.MsgQuery{Seq: from, NextBySubj: ">"})
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("scanning a chain: %w", err)
		}
		h := m.Header
		if upTo != 0 && m.Seq > upTo || !until.IsZero() && m.Time.After(until) {
			break
		}
		from = m.Seq + 1
		if strings.HasPrefix(m.Subject, semaq.ChainHeadPrefix) || h.Get(semaq.HdrSession) != session || h.Get(semaq.HdrTenant) != tenant {
			continue
		}
		k, err := strconv.ParseUint(h.Get(provenance.HdrChainSeq), 10, 64)
		if err != nil || k != next {
			continue // another batch's, or one refused before
		}
		l := Link{N: k, Hash: h.Get(provenance.HdrHash), Seq: m.Seq, Stored: m.Time}
		if order != "" {
			if v, err := semaq.ParseOrder(order, h.Get(semaq.OrderHeader(order))); err == nil {
				l.Order, l.HasOrder = v, true
			}
		}
		out = append(out, l)
		next++
	}
	return out, nil
}

// Upto is h as it stands with links, the stored run of its batch from
// its base on: the chain the stream holds if the batch ends there.
func (h Head) Upto(links []Link) Head {
	out := h
	out.Links, out.Hash = h.Base, h.BaseHash
	out.Order, out.HasOrder = h.BaseOrder, h.BaseOrder.Text != ""
	for _, l := range links {
		out.Links, out.Hash = l.N, l.Hash
		if l.HasOrder {
			out.Order, out.HasOrder = l.Order, true
		}
		out.Last = l.Stored
	}
	out.Base, out.BaseHash, out.BaseOrder = out.Links, out.Hash, out.Order
	return out
}

// Settled reads a session's head and, when it begins a batch, looks for
// the batch's messages: the head as the stream holds it, complete when
// the whole batch is stored (or the record begins none). Read-only: a
// batch still in its Window, or whose writer died, is reported as far as
// it is stored, with complete false.
func Settled(ctx context.Context, nc *nats.Conn, stream, tenant, session, order string) (h Head, found, complete bool, err error) {
	h, found, err = Read(ctx, nc, stream, tenant, session, order)
	if err != nil || !found || !h.Pending() {
		return h, found, true, err
	}
	links, err := Scan(ctx, nc, stream, tenant, session, order, h.Seq+1, 0, h.Base, h.Links, h.Stored.Add(Window))
	if err != nil {
		return h, found, false, err
	}
	if uint64(len(links)) == h.Links-h.Base {
		return h, true, true, nil
	}
	return h.Upto(links), true, false, nil
}
