package broker_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"fmt"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/provenance"
	"github.com/semaq/semaq/semaq"
)

// exportVerified exports a session's chain through c and verifies it
// with the keys the broker lists pinned: the report and the export.
func exportVerified(ctx context.Context, t *testing.T, c *client.Client, stream, tenant, session string) (*provenance.Report, *provenance.ExportHeader) {
	t.Helper()
	keys, err := c.ProvenanceKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pinned []ed25519.PublicKey
	for _, k := range keys {
		pinned = append(pinned, k.PublicKey)
	}
	var out bytes.Buffer
	head, err := c.ExportProvenance(ctx, stream, tenant, session, &out)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := provenance.Verify(bytes.NewReader(out.Bytes()), provenance.VerifyOptions{TrustedKeys: pinned, Head: head.Hash})
	if err != nil {
		t.Fatalf("verify: %v\nexport:\n%s", err, out.String())
	}
	if !rep.OK() || !rep.Pinned || rep.AnchoredAt != head.Links {
		t.Fatalf("verdict %q (pinned %v, anchored at %d) of head %+v\nexport:\n%s", rep, rep.Pinned, rep.AnchoredAt, head, out.String())
	}
	r, err := provenance.NewReader(bytes.NewReader(out.Bytes()), provenance.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return rep, r.Header()
}

// A session's chain goes on across a restart of its node: the links
// published after it build on the head stored before, signed with the
// same key, and the export is one chain.
func TestProvenanceChainAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	withDir := func(c *broker.Config) { c.DataDir = dir }
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pub := func(c *client.Client, from, to int) {
		t.Helper()
		for k := from; k < to; k++ {
			if _, err := c.Publish(ctx, "agent.step", []byte(fmt.Sprintf(`{"step":%d}`, k)), client.WithSession("s-1"), client.WithHeader("AI-Model", "llama3")); err != nil {
				t.Fatalf("message %d: %v", k, err)
			}
			if _, err := c.Publish(ctx, "agent.other", []byte("{}"), client.WithSession("s-2")); err != nil {
				t.Fatal(err)
			}
		}
	}

	s1 := brokertest.Start(t, withDir)
	c1 := brokertest.Connect(t, s1)
	if _, err := c1.AddStream(ctx, semaq.StreamConfig{Name: "AGENT", Subjects: []string{"agent.>"}, Provenance: semaq.ProvenanceSigned}); err != nil {
		t.Fatal(err)
	}
	pub(c1, 0, 5)
	before, _ := exportVerified(ctx, t, c1, "AGENT", "", "s-1")
	c1.Close()
	if err := s1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	s2 := brokertest.Start(t, withDir)
	c2 := brokertest.Connect(t, s2)
	pub(c2, 5, 10)
	rep, hdr := exportVerified(ctx, t, c2, "AGENT", "", "s-1")
	if rep.Links != 10 || len(rep.Signers) != 1 || rep.Signers[0] != before.Signers[0] || len(hdr.Keys) != 1 {
		t.Fatalf("after the restart: %q, signers %v (before %v), %d keys listed: want 10 links signed by the one key", rep, rep.Signers, before.Signers, len(hdr.Keys))
	}
	// The chain before the restart is a prefix of the one after.
	anchored, err := exportAnchored(ctx, c2, "AGENT", "s-1", before.Head)
	if err != nil || anchored != 5 {
		t.Fatalf("the head before the restart anchors link %d (%v), want 5", anchored, err)
	}
}

// exportAnchored exports a session (no tenant) and returns the link the
// anchor head is.
func exportAnchored(ctx context.Context, c *client.Client, stream, session, head string) (uint64, error) {
	var out bytes.Buffer
	if _, err := c.ExportProvenance(ctx, stream, "", session, &out); err != nil {
		return 0, err
	}
	rep, err := provenance.Verify(&out, provenance.VerifyOptions{Head: head})
	if err != nil {
		return 0, err
	}
	if !rep.OK() {
		return 0, fmt.Errorf("%s", rep)
	}
	return rep.AnchoredAt, nil
}
