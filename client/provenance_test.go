package client_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/provenance"
	"github.com/semaq/semaq/semaq"
)

// pinnedKeys are the nodes' public keys as the broker lists them: what a
// verifier pins.
func pinnedKeys(ctx context.Context, t *testing.T, c *client.Client) []ed25519.PublicKey {
	t.Helper()
	keys, err := c.ProvenanceKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Fatal("the broker lists no provenance keys")
	}
	var out []ed25519.PublicKey
	for _, k := range keys {
		if k.ID != provenance.KeyID(k.PublicKey) {
			t.Fatalf("key %+v: its id is not its public key's", k)
		}
		out = append(out, k.PublicKey)
	}
	return out
}

// verify checks an export with keys pinned.
func verify(t *testing.T, export []byte, keys []ed25519.PublicKey) *provenance.Report {
	t.Helper()
	rep, err := provenance.Verify(bytes.NewReader(export), provenance.VerifyOptions{TrustedKeys: keys})
	if err != nil {
		t.Fatalf("verify: %v\nexport:\n%s", err, export)
	}
	return rep
}

// TestProvenanceExport publishes a session into a signed stream of a real
// broker, among another session's messages, the same session id in
// another tenant and messages of no session, and exports and verifies it.
func TestProvenanceExport(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, named("n1"))
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "AGENT", Subjects: []string{"agent.>"}, Provenance: semaq.ProvenanceSigned}); err != nil {
		t.Fatal(err)
	}
	pub := func(subject, data string, opts ...client.PublishOption) {
		t.Helper()
		if _, err := c.Publish(ctx, subject, []byte(data), opts...); err != nil {
			t.Fatalf("publish on %s: %v", subject, err)
		}
	}
	acme := client.WithTenant("acme")
	pub("agent.acme.x", `{"none":0}`, acme) // no session, before the chain
	for k := range 8 {
		opts := []client.PublishOption{acme, client.WithSession("s-1")}
		if k%2 == 0 {
			opts = append(opts, client.WithHeader("AI-Model", "llama3"))
		}
		pub("agent.acme.step", fmt.Sprintf(`{"step":%d}`, k), opts...)
		pub("agent.acme.step", `{"other":true}`, acme, client.WithSession("s-2"))
		// The same session id in another tenant is another chain.
		pub("agent.globex.x", `{"globex":true}`, client.WithTenant("globex"), client.WithSession("s-1"))
		pub("agent.loose", `{}`)
	}
	keys := pinnedKeys(ctx, t, c)

	var out bytes.Buffer
	head, err := c.ExportProvenance(ctx, "AGENT", "acme", "s-1", &out)
	if err != nil {
		t.Fatal(err)
	}
	export := out.Bytes()
	rep := verify(t, export, keys)
	if !rep.OK() || rep.Links != 8 || rep.Head != head.Hash || !rep.Pinned || !rep.Signed || head.Links != 8 ||
		!strings.HasSuffix(rep.String(), "(n1), trusted") {
		t.Fatalf("verdict %q (links %d, pinned %v) of head %+v: want OK with 8 pinned links\nexport:\n%s", rep, rep.Links, rep.Pinned, head, export)
	}
	lines := bytes.Split(bytes.TrimSuffix(export, []byte("\n")), []byte("\n"))
	if len(lines) != 9 {
		t.Fatalf("export of %d lines, want the header and 8 links:\n%s", len(lines), export)
	}
	for i, line := range lines[1:] {
		var l provenance.ExportLink
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatal(err)
		}
		if l.Subject != "agent.acme.step" || l.Headers[semaq.HdrTenant][0] != "acme" {
			t.Fatalf("line %d is a head record or another tenant's message: %s", i+2, line)
		}
		if want := fmt.Sprintf(`{"step":%d}`, i); string(l.Data) != want || (i%2 == 0) != (len(l.Headers["AI-Model"]) == 1) {
			t.Fatalf("link %d: data %s, headers %v: want %s, AI-Model on the even steps", i+1, l.Data, l.Headers, want)
		}
	}
	info, err := c.StreamInfo(ctx, "AGENT")
	if err != nil {
		t.Fatal(err)
	}
	if info.State.ConsumerCount != 0 {
		t.Fatalf("%d consumers left on the stream after the export", info.State.ConsumerCount)
	}

	// An export made later, with more links, holds the earlier head: the
	// earlier head anchors it.
	pub("agent.acme.step", `{"step":8}`, acme, client.WithSession("s-1"))
	var later bytes.Buffer
	if _, err := c.ExportProvenance(ctx, "AGENT", "acme", "s-1", &later); err != nil {
		t.Fatal(err)
	}
	anchored, err := provenance.Verify(bytes.NewReader(later.Bytes()), provenance.VerifyOptions{TrustedKeys: keys, Head: head.Hash})
	if err != nil || !anchored.OK() || anchored.Links != 9 || anchored.AnchoredAt != 8 {
		t.Fatalf("the later export anchored at the earlier head: %v, %v", anchored, err)
	}

	// Tampered copies: the verdict names the first bad link.
	edit := func(f func(lines [][]byte) [][]byte) []byte {
		cp := make([][]byte, len(lines))
		for i := range lines {
			cp[i] = bytes.Clone(lines[i])
		}
		return append(bytes.Join(f(cp), []byte("\n")), '\n')
	}
	seqOf := func(link int) uint64 {
		var l provenance.ExportLink
		if err := json.Unmarshal(lines[link], &l); err != nil {
			t.Fatal(err)
		}
		return l.Seq
	}
	for _, tc := range []struct {
		name  string
		bytes []byte
		kind  provenance.Kind
		link  uint64
		text  string
	}{
		{"payload modified", edit(func(ls [][]byte) [][]byte {
			var l map[string]any
			if err := json.Unmarshal(ls[5], &l); err != nil {
				t.Fatal(err)
			}
			l["data"] = base64.StdEncoding.EncodeToString([]byte(`{"step":"edited"}`))
			ls[5], _ = json.Marshal(l)
			return ls
		}), provenance.Modified, 5, fmt.Sprintf("link 5 (stream seq %d): modified: its content does not hash to its AI-Hash", seqOf(5))},
		{"middle line dropped", edit(func(ls [][]byte) [][]byte { return append(ls[:4], ls[5:]...) }),
			provenance.Missing, 4, fmt.Sprintf("link 4 missing: link 3 (stream seq %d) is followed by link 5 (stream seq %d)", seqOf(3), seqOf(5))},
		{"two lines swapped", edit(func(ls [][]byte) [][]byte { ls[3], ls[6] = ls[6], ls[3]; return ls }),
			provenance.Reordered, 6, fmt.Sprintf("link 6 (stream seq %d): reordered: it comes before link 3", seqOf(6))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := verify(t, tc.bytes, keys)
			if rep.OK() || rep.Problem.Kind != tc.kind || rep.Problem.Link != tc.link || !strings.HasPrefix(rep.String(), tc.text) {
				t.Fatalf("verdict %q, want %s of link %d: %q", rep, tc.kind, tc.link, tc.text)
			}
		})
	}
}

func TestProvenanceExportOfNoChain(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, named("n1"))
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.AddStream(ctx, semaq.StreamConfig{Name: "AGENT", Subjects: []string{"agent.>"}, Provenance: semaq.ProvenanceSigned}); err != nil {
		t.Fatal(err)
	}
	brokertest.AddStream(t, c, "PLAIN", "plain.>")
	if _, err := c.Publish(ctx, "agent.x", []byte("{}"), client.WithSession("s-1")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ stream, session, why string }{
		{"AGENT", "s-404", "a session with no chain"},
		{"PLAIN", "s-1", "a stream without provenance"},
	} {
		var out bytes.Buffer
		_, err := c.ExportProvenance(ctx, tc.stream, "", tc.session, &out)
		var ae *semaq.APIError
		if !errors.As(err, &ae) || ae.ErrCode != semaq.ErrCodeChainNotFound {
			t.Fatalf("%s: err %v, want the broker's chain-not-found error", tc.why, err)
		}
		if out.Len() != 0 {
			t.Fatalf("%s: wrote %q", tc.why, out.String())
		}
	}
	if _, err := c.ProvenanceHead(ctx, "AGENT", "", ""); !errors.Is(err, semaq.ErrBadRequest) {
		t.Fatalf("a head request without a session: err %v", err)
	}
	keys, err := c.ProvenanceKeys(ctx)
	if err != nil || len(keys) != 1 || keys[0].Node != "n1" || keys[0].ID != provenance.KeyID(keys[0].PublicKey) {
		t.Fatalf("keys %+v, %v: want n1's", keys, err)
	}
}

// With auth on, a reader exports its own tenant's session; another
// tenant's reader gets neither its head nor its export; a publisher,
// which may not read the stream, is told why.
func TestProvenanceExportAuth(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t, brokertest.WithAuth)
	admin := brokertest.ConnectKey(t, s, brokertest.AdminKey(t, s))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := admin.AddStream(ctx, semaq.StreamConfig{Name: "AGENT", Subjects: []string{"agent.>"}, Provenance: semaq.ProvenanceSigned}); err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, u := range []semaq.UserAddRequest{
		{Name: "acme-pub", Tenant: "acme", Role: semaq.RolePublisher, Subjects: []string{"agent.>"}},
		{Name: "acme-read", Tenant: "acme", Role: semaq.RoleReader, Subjects: []string{"agent.>"}},
		{Name: "globex-read", Tenant: "globex", Role: semaq.RoleReader, Subjects: []string{"agent.>"}},
	} {
		r, err := admin.AddUser(ctx, u)
		if err != nil {
			t.Fatalf("add user %s: %v", u.Name, err)
		}
		keys[u.Name] = r.Key
	}
	publisher := brokertest.ConnectKey(t, s, keys["acme-pub"])
	for k := range 4 {
		if _, err := publisher.Publish(ctx, "agent.plan", []byte(fmt.Sprintf(`{"step":%d}`, k)), client.WithSession("s-1"), client.WithHeader("AI-Model", "llama3")); err != nil {
			t.Fatal(err)
		}
	}

	reader := brokertest.ConnectKey(t, s, keys["acme-read"])
	for _, tenant := range []string{"", "acme"} {
		var out bytes.Buffer
		head, err := reader.ExportProvenance(ctx, "AGENT", tenant, "s-1", &out)
		if err != nil {
			t.Fatalf("acme's reader exporting (tenant %q): %v", tenant, err)
		}
		rep := verify(t, out.Bytes(), pinnedKeys(ctx, t, reader))
		if !rep.OK() || rep.Links != 4 || rep.Tenant != "acme" || head.Tenant != "acme" {
			t.Fatalf("acme's reader's export (tenant %q): %q, tenant %q", tenant, rep, rep.Tenant)
		}
	}

	globex := brokertest.ConnectKey(t, s, keys["globex-read"])
	if _, err := globex.ProvenanceHead(ctx, "AGENT", "acme", "s-1"); !isCode(err, semaq.ErrCodeForbidden) {
		t.Fatalf("globex's reader asking for acme's head: %v", err)
	}
	var out bytes.Buffer
	if _, err := globex.ExportProvenance(ctx, "AGENT", "acme", "s-1", &out); !isCode(err, semaq.ErrCodeForbidden) || out.Len() != 0 {
		t.Fatalf("globex's reader exporting acme's session: %v, wrote %d bytes", err, out.Len())
	}
	// Its own tenant has no session s-1.
	if _, err := globex.ExportProvenance(ctx, "AGENT", "", "s-1", &out); !isCode(err, semaq.ErrCodeChainNotFound) {
		t.Fatalf("globex's reader exporting its own s-1: %v", err)
	}

	// A publisher reads heads but may not make a consumer: the export
	// fails at once, saying so, and writes only what it had.
	if h, err := publisher.ProvenanceHead(ctx, "AGENT", "", "s-1"); err != nil || h.Links != 4 {
		t.Fatalf("the publisher's head: %+v, %v", h, err)
	}
	start := time.Now()
	_, err := publisher.ExportProvenance(ctx, "AGENT", "", "s-1", &out)
	if err == nil || !strings.Contains(err.Error(), "refused publish to $JS.API.CONSUMER.CREATE.AGENT.") || !strings.Contains(err.Error(), "user may not") {
		t.Fatalf("a publisher exporting: %v, want the server's refusal of its consumer", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the refused export took %v", d)
	}
}

// named names the broker's node.
func named(name string) func(*broker.Config) { return func(c *broker.Config) { c.Name = name } }

func isCode(err error, code uint16) bool {
	var ae *semaq.APIError
	return errors.As(err, &ae) && ae.ErrCode == code
}
