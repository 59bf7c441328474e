package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client/internal/denial"
	"github.com/semaq/semaq/provenance"
	"github.com/semaq/semaq/semaq"
)

// Provenance (docs/provenance.md): a stream with provenance on chains
// the messages of each session by hash, and signs them with "signed". The
// broker keeps a head record per session; an export is the chain's
// messages as the stream holds them, which package provenance verifies
// offline.

// ProvenanceHead reads the head of a session's chain in stream: its last
// hash, how many links it has, when its first and last were stored. With
// auth on, tenant is the caller's own unless it is a service or an admin.
// A session with no chain is an *semaq.APIError with ErrCode
// semaq.ErrCodeChainNotFound.
func (c *Client) ProvenanceHead(ctx context.Context, stream, tenant, session string) (*semaq.ProvenanceHead, error) {
	if err := semaq.CheckStreamName(stream); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "%v", err)
	}
	if session == "" {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: ProvenanceHead: no session")
	}
	var h semaq.ProvenanceHead
	if err := c.request(ctx, semaq.APIProvenanceHead, semaq.ProvenanceHeadRequest{Stream: stream, Tenant: tenant, Session: session}, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// ProvenanceKeys lists the signing keys of the cluster's nodes: what a
// verifier pins (provenance.VerifyOptions.TrustedKeys).
func (c *Client) ProvenanceKeys(ctx context.Context) ([]semaq.ProvenanceKey, error) {
	var keys semaq.ProvenanceKeys
	if err := c.request(ctx, semaq.APIProvenanceKeys, nil, &keys); err != nil {
		return nil, err
	}
	if keys.Keys == nil {
		keys.Keys = []semaq.ProvenanceKey{}
	}
	return keys.Keys, nil
}

// exportClockSkew is how long before the chain's first link an export
// starts reading: a link's receipt time comes from the node that took
// it, the stream's time from the node that stores it.
const exportClockSkew = time.Second

// exportBatch is how many messages one pull of an export asks for.
const exportBatch = 64

// ExportProvenance writes the export of a session's chain to w
// (docs/provenance.md#the-export-format; provenance.Verify checks it):
// the head and the nodes' keys, then every message of the session the
// stream holds from the chain's first link up to the head's last link, in
// stream order. It reads with an ordered consumer, filtered on the
// stream's subjects, that acknowledges nothing and is deleted at the end
// (the broker drops it by itself if the client goes away): nothing is
// consumed. It returns the head the export was made against.
//
// A link the stream no longer holds (its age or size limits removed it)
// is not in the export, and the verifier names it missing.
func (c *Client) ExportProvenance(ctx context.Context, stream, tenant, session string, w io.Writer) (*semaq.ProvenanceHead, error) {
	head, err := c.ProvenanceHead(ctx, stream, tenant, session)
	if err != nil {
		return nil, err
	}
	if head.Hash == "" || head.Links == 0 {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "stream %s keeps no provenance chain for session %s: it orders sessions only", stream, session)
	}
	keys, err := c.ProvenanceKeys(ctx)
	if err != nil {
		return nil, err
	}
	info, err := c.StreamInfo(ctx, stream)
	if err != nil {
		return nil, err
	}
	h := &provenance.ExportHeader{Stream: stream, Tenant: head.Tenant, Session: head.Session, Provenance: info.Config.Provenance,
		Head:     provenance.ExportHead{Hash: head.Hash, Links: head.Links, First: head.First, Last: head.Last, Seq: head.Seq},
		Exported: time.Now().UTC()}
	for _, k := range keys {
		h.Keys = append(h.Keys, provenance.ExportKey{ID: k.ID, Node: k.Node, PublicKey: k.PublicKey})
	}
	pw, err := provenance.NewWriter(w, h)
	if err != nil {
		return nil, fmt.Errorf("client: exporting session %s of stream %s: %w", session, stream, err)
	}
	if err := c.exportLinks(ctx, info, head, pw); err != nil {
		return nil, fmt.Errorf("client: exporting session %s of stream %s: %w", session, stream, err)
	}
	return head, pw.Flush()
}

// exportLinks writes the session's messages from the chain's first link
// to the head's last link.
func (c *Client) exportLinks(ctx context.Context, info *semaq.StreamInfo, head *semaq.ProvenanceHead, pw *provenance.Writer) error {
	stream := info.Config.Name
	cfg := jetstream.OrderedConsumerConfig{
		// The stream's own subjects: head records ($chain.…) are not among
		// them, and a reader's grant names them.
		FilterSubjects:    info.Config.Subjects,
		DeliverPolicy:     jetstream.DeliverAllPolicy,
		InactiveThreshold: 30 * time.Second,
	}
	if !head.First.IsZero() {
		start := head.First.Add(-exportClockSkew)
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &start
	}
	createCtx, cancel := c.withTimeout(ctx)
	defer cancel()
	// A refusal of the consumer by the server's permissions ends the wait
	// at once, with the reason.
	create := "$JS.API.CONSUMER.CREATE." + stream + "."
	createCtx, done := c.denied.WatchMatch(createCtx, func(subj string) bool { return strings.HasPrefix(subj, create) })
	cons, err := c.js.OrderedConsumer(createCtx, stream, cfg)
	done()
	if err != nil {
		if cause := denial.Cause(createCtx); cause != nil {
			return fmt.Errorf("reading stream %s: %w", stream, cause)
		}
		return fmt.Errorf("reading stream %s: %w", stream, err)
	}
	defer func() {
		if ci := cons.CachedInfo(); ci != nil && !c.nc.IsClosed() {
			dctx, cancel := context.WithTimeout(context.Background(), c.timeout)
			defer cancel()
			_ = c.js.DeleteConsumer(dctx, stream, ci.Name) // else InactiveThreshold removes it
		}
	}()
	var pending uint64
	if ci := cons.CachedInfo(); ci != nil {
		pending = ci.NumPending
	}
	// A head record is stored before its batch's links, which name it
	// (internal/broker/ingress/chain.go): the head's links are after its
	// record and before the stream's last message when the export asked
	// for the stream's info, which was after the head.
	last := info.State.LastSeq
	var written uint64
	for pending > 0 && written < head.Links {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch, err := cons.Fetch(int(min(pending, exportBatch)), jetstream.FetchMaxWait(fetchWait))
		if err != nil {
			return fmt.Errorf("reading stream %s: %w", stream, err)
		}
		got := 0
		for m := range batch.Messages() {
			got++
			md, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("reading stream %s: a message without JetStream metadata: %w", stream, err)
			}
			pending = md.NumPending
			if md.Sequence.Stream > last {
				pending = 0 // stored after the export began: not the head's
				continue
			}
			if written >= head.Links || !inSession(m, head) {
				continue
			}
			if n, err := strconv.ParseUint(m.Headers().Get(provenance.HdrChainSeq), 10, 64); err == nil && n > head.Links {
				pending = 0 // a link of a later head: the chain ends before
				continue
			}
			if err := pw.WriteLink(&provenance.ExportLink{Seq: md.Sequence.Stream, Subject: m.Subject(), Time: md.Timestamp.UTC(),
				Headers: m.Headers(), Data: m.Data()}); err != nil {
				return err
			}
			written++
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("reading stream %s: %w", stream, err)
		}
		if got == 0 {
			break // what was pending is gone (removed meanwhile)
		}
	}
	return nil
}

// inSession reports whether m is a message of head's session (and not a
// head record).
func inSession(m jetstream.Msg, head *semaq.ProvenanceHead) bool {
	h := m.Headers()
	return !strings.HasPrefix(m.Subject(), semaq.ChainHeadPrefix) &&
		h.Get(semaq.HdrSession) == head.Session && h.Get(semaq.HdrTenant) == head.Tenant
}
