package client_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/jstest"
	"github.com/semaq/semaq/internal/provenancetest"
	"github.com/semaq/semaq/provenance"
	"github.com/semaq/semaq/semaq"
)

// provenanceBroker is a bare JetStream server where session s-1 of
// tenant acme has a signed chain of 8 links in stream AGENT, among
// another session's messages and messages of none, and a ninth link
// stored after the head the API answers with.
func provenanceBroker(t *testing.T) (url string, c *provenancetest.Chain, js jetstream.JetStream) {
	t.Helper()
	ns := jstest.Server(t)
	nc, js := jstest.Connect(t, ns)
	b := provenancetest.NewBroker(t, nc, semaq.StreamConfig{Name: "AGENT", Subjects: []string{"agent.>"}, Provenance: semaq.ProvenanceSigned})
	b.AddKey("n1", provenancetest.Key(1))
	c = provenancetest.New("AGENT", "acme", "s-1").Signed("n1", provenancetest.Key(1))
	other := provenancetest.New("AGENT", "acme", "s-2").Signed("n1", provenancetest.Key(1))
	b.Other(t, "agent.acme.x", map[string][]string{"AI-Tenant": {"acme"}}) // no session, before the chain
	for k := range 8 {
		c.Add("agent.acme.step", strings.Repeat("x", k), map[string][]string{"AI-Model": {"llama3"}})
		b.Store(t, c, k)
		other.Add("agent.acme.step", "other", nil)
		b.Store(t, other, k)
		// The same session id in another tenant is another chain.
		b.Other(t, "agent.globex.x", map[string][]string{"AI-Session": {"s-1"}, "AI-Tenant": {"globex"}})
	}
	head := b.Store(t, c, 8)
	c.Add("agent.acme.step", "after the head", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// Link 9 stored, its head record not yet: the export is of the head
	// the API gave.
	if _, err := js.PublishMsg(ctx, natsMsg(c.Links[8])); err != nil {
		t.Fatal(err)
	}
	if head.Links != 8 {
		t.Fatalf("head of %d links, want 8", head.Links)
	}
	return ns.ClientURL(), c, js
}

func TestProvenanceExport(t *testing.T) {
	url, c, js := provenanceBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	var out bytes.Buffer
	head, err := cl.ExportProvenance(ctx, "AGENT", "acme", "s-1", &out)
	if err != nil {
		t.Fatal(err)
	}
	if head.Links != 8 || head.Hash != c.Links[7].Headers[provenance.HdrHash][0] {
		t.Fatalf("head %+v, want link 8's", head)
	}
	pub := provenancetest.Key(1).Public().(ed25519.PublicKey)
	rep, err := provenance.Verify(bytes.NewReader(out.Bytes()), provenance.VerifyOptions{TrustedKeys: []ed25519.PublicKey{pub}})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Links != 8 || !strings.HasSuffix(rep.String(), "(n1), trusted") {
		t.Fatalf("verdict %q, want OK with 8 links signed by n1's trusted key\nexport:\n%s", rep, out.String())
	}
	if lines := strings.Count(out.String(), "\n"); lines != 9 {
		t.Fatalf("export of %d lines, want the header and 8 links:\n%s", lines, out.String())
	}
	if strings.Contains(out.String(), "$chain.") || strings.Contains(out.String(), "globex") {
		t.Fatalf("the export holds a head record or another tenant's message:\n%s", out.String())
	}

	// Nothing consumed, nothing left behind.
	st, err := js.Stream(ctx, "AGENT")
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Consumers != 0 {
		t.Fatalf("%d consumers left on the stream after the export", info.State.Consumers)
	}
}

func TestProvenanceExportOfNoChain(t *testing.T) {
	url, _, _ := provenanceBroker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := client.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out bytes.Buffer
	_, err = cl.ExportProvenance(ctx, "AGENT", "acme", "s-404", &out)
	var ae *semaq.APIError
	if !errors.As(err, &ae) || ae.ErrCode != semaq.ErrCodeChainNotFound {
		t.Fatalf("err %v, want the broker's chain-not-found error", err)
	}
	if out.Len() != 0 {
		t.Fatalf("wrote %q for a chain that does not exist", out.String())
	}
	if _, err := cl.ProvenanceHead(ctx, "AGENT", "", ""); !errors.Is(err, semaq.ErrBadRequest) {
		t.Fatalf("a head request without a session: err %v", err)
	}
	keys, err := cl.ProvenanceKeys(ctx)
	if err != nil || len(keys) != 1 || keys[0].Node != "n1" || keys[0].ID != provenance.KeyID(keys[0].PublicKey) {
		t.Fatalf("keys %+v, %v: want n1's", keys, err)
	}
}

func natsMsg(l provenance.ExportLink) *nats.Msg {
	return &nats.Msg{Subject: l.Subject, Header: nats.Header(l.Headers), Data: l.Data}
}
