// Package chainhead is the head record of a session chain
// (docs/provenance.md): the one message per session a chained stream keeps
// under semaq.ChainHeadSubject, which the ingress writes with every batch
// of the session's messages and reads when it does not know it, and the
// provenance API reads for a session's head.
package chainhead

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/internal/jsutil"
	"github.com/semaq/semaq/internal/reserved"
	"github.com/semaq/semaq/provenance"
	"github.com/semaq/semaq/semaq"
)

// Head is a session's head record.
//
// A record is written before the messages of its batch (docs/provenance.md,
// How a chain is written): it says what the chain is once they are stored
// (Links, Hash, Order) and what it was before them (Base, BaseHash,
// BaseOrder). A record whose Base equals its Links ends no batch: it was
// written to settle one.
type Head struct {
	Hash     string // the last link's hash; "" without provenance
	Links    uint64
	First    time.Time // the first link's receipt
	Last     time.Time // the last link's
	Order    semaq.OrderValue
	HasOrder bool

	Base      uint64
	BaseHash  string
	BaseOrder semaq.OrderValue

	Seq    uint64    // the record's stream sequence; 0: none yet
	Stored time.Time // when the record was stored
}

// Pending reports whether h begins a batch whose messages may not all be
// stored.
func (h Head) Pending() bool { return h.Base < h.Links }

// Public is h as the provenance API answers it.
func (h Head) Public(stream, tenant, session string) *semaq.ProvenanceHead {
	return &semaq.ProvenanceHead{Stream: stream, Tenant: tenant, Session: session, Hash: h.Hash, Links: h.Links,
		First: h.First, Last: h.Last, Order: h.Order.Text, Seq: h.Seq}
}

// Subject is the stored subject of a session's head record.
func Subject(stream, tenant, session string) string {
	return semaq.ChainHeadSubject(stream, provenance.SessionKey(tenant, session))
}

// Record is the head record of a session at h, as published into the
// storage namespace: it rolls up the one before, which must be at stream
// sequence prev (0: none), or JetStream refuses it.
func Record(stream, tenant, session string, h Head, prev uint64) *nats.Msg {
	m := nats.NewMsg(reserved.StoragePrefix + Subject(stream, tenant, session))
	m.Header[semaq.HdrSession] = []string{session}
	if tenant != "" {
		m.Header[semaq.HdrTenant] = []string{tenant}
	}
	if h.Hash != "" {
		m.Header[provenance.HdrHash] = []string{h.Hash}
	}
	m.Header[semaq.HdrChainLinks] = []string{strconv.FormatUint(h.Links, 10)}
	m.Header[semaq.HdrChainFirst] = []string{h.First.UTC().Format(time.RFC3339Nano)}
	m.Header[semaq.HdrChainLast] = []string{h.Last.UTC().Format(time.RFC3339Nano)}
	if h.HasOrder {
		m.Header[semaq.HdrChainOrder] = []string{h.Order.Text}
	}
	m.Header[HdrBase] = []string{strconv.FormatUint(h.Base, 10)}
	if h.BaseHash != "" {
		m.Header[HdrBaseHash] = []string{h.BaseHash}
	}
	if h.BaseOrder.Text != "" {
		m.Header[HdrBaseOrder] = []string{h.BaseOrder.Text}
	}
	m.Header["Nats-Rollup"] = []string{"sub"}
	m.Header[semaq.HdrExpectedLastSubjSeq] = []string{strconv.FormatUint(prev, 10)}
	return m
}

// The record's headers of the batch it begins.
const (
	HdrBase      = "AI-Chain-Base"       // links before the batch
	HdrBaseHash  = "AI-Chain-Base-Hash"  // the hash before it
	HdrBaseOrder = "AI-Chain-Base-Order" // the order value before it
)

// Read reads the head record of a session of stream from the stream's
// leader over nc (a replica's copy may be behind): found false, and a
// zero head, when the session has no chain yet. order is the stream's
// session order, which its order value is read by.
func Read(ctx context.Context, nc *nats.Conn, stream, tenant, session, order string) (h Head, found bool, err error) {
	m, err := jsutil.GetMsg(ctx, nc, stream, jsutil.MsgQuery{LastBySubj: Subject(stream, tenant, session)})
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return Head{}, false, nil
	}
	if err != nil {
		return Head{}, false, fmt.Errorf("reading a head record: %w", err)
	}
	if h, err = Parse(m.Header, order); err != nil {
		return Head{}, false, fmt.Errorf("head record %d: %w", m.Seq, err)
	}
	h.Seq, h.Stored = m.Seq, m.Time
	return h, true, nil
}

// Parse reads a head record's headers.
func Parse(hdr nats.Header, order string) (Head, error) {
	var h Head
	var err error
	if h.Links, err = strconv.ParseUint(hdr.Get(semaq.HdrChainLinks), 10, 64); err != nil {
		return h, fmt.Errorf("%s: %w", semaq.HdrChainLinks, err)
	}
	if h.First, err = time.Parse(time.RFC3339Nano, hdr.Get(semaq.HdrChainFirst)); err != nil {
		return h, fmt.Errorf("%s: %w", semaq.HdrChainFirst, err)
	}
	if h.Last, err = time.Parse(time.RFC3339Nano, hdr.Get(semaq.HdrChainLast)); err != nil {
		return h, fmt.Errorf("%s: %w", semaq.HdrChainLast, err)
	}
	if h.Hash = hdr.Get(provenance.HdrHash); h.Hash != "" {
		if err := provenance.CheckHash(h.Hash); err != nil {
			return h, err
		}
	}
	if o := hdr.Get(semaq.HdrChainOrder); o != "" && order != "" {
		if h.Order, err = semaq.ParseOrder(order, o); err != nil {
			return h, err
		}
		h.HasOrder = true
	}
	h.Base, h.BaseHash = h.Links, h.Hash
	if b := hdr.Get(HdrBase); b != "" {
		if h.Base, err = strconv.ParseUint(b, 10, 64); err != nil || h.Base > h.Links {
			return h, fmt.Errorf("%s %q is not a count up to %d", HdrBase, b, h.Links)
		}
		h.BaseHash = hdr.Get(HdrBaseHash)
	}
	if o := hdr.Get(HdrBaseOrder); o != "" && order != "" {
		if h.BaseOrder, err = semaq.ParseOrder(order, o); err != nil {
			return h, err
		}
	}
	return h, nil
}
