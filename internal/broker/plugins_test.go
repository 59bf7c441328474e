package broker_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/plugin"
	"github.com/semaq/semaq/internal/plugin/plugintest"
	"github.com/semaq/semaq/semaq"
)

// uploadPlugin adds a plugin through the API as the SDK does: the record,
// the module in chunks, the empty chunk that commits it.
func uploadPlugin(ctx context.Context, t *testing.T, nc *nats.Conn, p semaq.Plugin, wasm []byte, replace bool) (*semaq.PluginInfo, error) {
	t.Helper()
	sum := sha256.Sum256(wasm)
	p.SHA256, p.Size = hex.EncodeToString(sum[:]), int64(len(wasm))
	var up semaq.PluginUpload
	if err := apiCall(ctx, t, nc, semaq.APIPluginAdd, semaq.PluginAddRequest{Plugin: p, Replace: replace}, &up); err != nil {
		return nil, err
	}
	n := 0
	for off := 0; off < len(wasm); off += up.Chunk {
		m, err := nc.RequestWithContext(ctx, fmt.Sprintf(semaq.APIPluginChunkT, up.Upload, n), wasm[off:min(off+up.Chunk, len(wasm))])
		if err != nil {
			return nil, err
		}
		if err := replyError(m); err != nil {
			return nil, err
		}
		n++
	}
	m, err := nc.RequestWithContext(ctx, fmt.Sprintf(semaq.APIPluginChunkT, up.Upload, n), nil)
	if err != nil {
		return nil, err
	}
	if err := replyError(m); err != nil {
		return nil, err
	}
	var info semaq.PluginInfo
	return &info, jsonUnmarshal(m.Data, &info)
}

func TestPluginIngressRewriteFailuresAndReload(t *testing.T) {
	enrich := plugintest.Build(t, plugintest.Enrich)
	hostile := plugintest.Build(t, plugintest.Hostile)
	noop := plugintest.Build(t, plugintest.Noop)
	n := newPolicyNode(t, 2*time.Minute)
	c, nc, js, ctx := n.c, n.nc, n.js, n.ctx

	info, err := uploadPlugin(ctx, t, nc, semaq.Plugin{Name: "enrich", Stage: semaq.PluginStageIngress, Subjects: []string{"demo.enrich.>"}, Timeout: time.Second}, enrich, false)
	if err != nil {
		t.Fatal(err)
	}
	if info.Revision == 0 || info.Error != "" {
		t.Fatalf("added: %+v", info)
	}
	if _, err := c.Publish(ctx, "demo.enrich.in", []byte(`{"model":"llama","q":"hi"}`)); err != nil {
		t.Fatal(err)
	}
	m := lastStored(ctx, t, js, "DEMO", "demo.enrich.in")
	if m.Header.Get("X-Payload-Length") != "26" || m.Header.Get(semaq.HdrModel) != "llama" {
		t.Fatalf("stored headers %v", m.Header)
	}
	// A subject the plugin is not attached to is untouched.
	if _, err := c.Publish(ctx, "demo.other", []byte(`{"model":"llama"}`)); err != nil {
		t.Fatal(err)
	}
	if h := lastStored(ctx, t, js, "DEMO", "demo.other").Header; h.Get("X-Payload-Length") != "" {
		t.Fatalf("a message outside the plugin's subjects was rewritten: %v", h)
	}

	// A module that is not a plugin is refused when it is added.
	if _, err := uploadPlugin(ctx, t, nc, semaq.Plugin{Name: "junk", Stage: semaq.PluginStageIngress, Subjects: []string{"demo.>"}}, []byte("\x00asm\x01\x00\x00\x00"), false); !errors.Is(err, semaq.ErrBadPlugin) {
		t.Fatalf("a module without the ABI: %v", err)
	}

	// A plugin that traps fails its message, per its failure policy; after
	// FailAfter failures in a row it is disabled, and says so.
	events, err := nc.SubscribeSync(semaq.PolicyEventPrefix + ">")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := uploadPlugin(ctx, t, nc, semaq.Plugin{Name: "hostile", Stage: semaq.PluginStageIngress, Subjects: []string{"demo.hostile.>"}, Timeout: 200 * time.Millisecond, FailAfter: 2}, hostile, false); err != nil {
		t.Fatal(err)
	}
	if _, err := uploadPlugin(ctx, t, nc, semaq.Plugin{Name: "lenient", Stage: semaq.PluginStageIngress, Subjects: []string{"demo.lenient.>"}, Timeout: 200 * time.Millisecond, OnFailure: semaq.PluginFailPass}, hostile, false); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range []string{"trap", "loop"} {
		_, err := c.Publish(ctx, "demo.hostile.in", []byte(cmd))
		if !errors.Is(err, semaq.ErrPluginFailed) || !strings.Contains(err.Error(), "hostile") {
			t.Fatalf("%s: %v", cmd, err)
		}
	}
	if _, err := c.Publish(ctx, "demo.lenient.in", []byte("trap")); err != nil {
		t.Fatalf("a failure of a plugin that passes on failure: %v", err)
	}
	ev, err := events.NextMsg(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(ev.Data), `"plugin_disabled"`) || !strings.Contains(string(ev.Data), `"hostile"`) {
		t.Fatalf("event %s", ev.Data)
	}
	if _, err := c.Publish(ctx, "demo.hostile.in", []byte("pass")); !errors.Is(err, semaq.ErrPluginFailed) || !strings.Contains(err.Error(), "disabled") {
		t.Fatalf("a disabled plugin's message: %v", err)
	}

	// Hot reload: publishes keep flowing while enrich is replaced by noop;
	// none fails, and once the replace answers every message is noop's.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := c.Publish(ctx, "demo.enrich.in", []byte(`{"q":"x"}`)); err != nil {
				select {
				case errs <- err:
				default:
				}
				return
			}
		}
	}()
	if _, err := uploadPlugin(ctx, t, nc, semaq.Plugin{Name: "enrich", Stage: semaq.PluginStageIngress, Subjects: []string{"demo.enrich.>"}, Timeout: time.Second}, noop, true); err != nil {
		t.Fatal(err)
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("a publish during the reload: %v", err)
	default:
	}
	if _, err := c.Publish(ctx, "demo.enrich.in", []byte(`{"q":"y"}`)); err != nil {
		t.Fatal(err)
	}
	if h := lastStored(ctx, t, js, "DEMO", "demo.enrich.in").Header; h.Get("X-Payload-Length") != "" {
		t.Fatalf("after the reload the old version ran: %v", h)
	}
	var list semaq.PluginListResponse
	if err := apiCall(ctx, t, nc, semaq.APIPluginList, struct{}{}, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Plugins) != 3 || list.Plugins[0].Name != "enrich" || list.Plugins[1].Name != "hostile" || !list.Plugins[1].Stats.Disabled {
		t.Fatalf("list %+v", list.Plugins)
	}
	if err := apiCall(ctx, t, nc, semaq.APIPluginDelete, semaq.PluginNameRequest{Name: "hostile"}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, "demo.hostile.in", []byte("trap")); err != nil {
		t.Fatalf("after the plugin was removed: %v", err)
	}
}

func TestPluginFilterAndTokensStages(t *testing.T) {
	hostile := plugintest.Build(t, plugintest.Hostile)
	redact := plugintest.Build(t, plugintest.Redact)
	n := newPolicyNode(t, 2*time.Minute)
	c, nc, ctx := n.c, n.nc, n.ctx

	// Filter stage: the hostile plugin keeps what it is given, and traps on
	// "trap": its failure policy (reject) keeps that message from the
	// subscriber, who gets the rest in order.
	if _, err := uploadPlugin(ctx, t, nc, semaq.Plugin{Name: "judge", Stage: semaq.PluginStageFilter, Timeout: time.Second, FailAfter: 100}, hostile, false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe(ctx, "demo.f", client.WithFilterPlugin("missing")); !errors.Is(err, semaq.ErrPluginNotFound) {
		t.Fatalf("a filter naming no plugin: %v", err)
	}
	sub, err := c.Subscribe(ctx, "demo.f", client.WithFilter(`subject == "demo.f"`), client.WithFilterPlugin("judge"))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for _, p := range []string{"a", "trap", "b"} {
		if _, err := c.Publish(ctx, "demo.f", []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"a", "b"} {
		m, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Data) != want {
			t.Fatalf("got %q, want %q", m.Data, want)
		}
		_ = m.Ack(ctx)
	}

	// Tokens stage: the redact example rewrites "password" in what the
	// relay stores, and stops a stream that starts a private key.
	if _, err := uploadPlugin(ctx, t, nc, semaq.Plugin{Name: "redact", Stage: semaq.PluginStageTokens, Timeout: time.Second}, redact, false); err != nil {
		t.Fatal(err)
	}
	const key = "writer-key-0123456789abcdef"
	if err := tokenRecord(ctx, nc, "req-p", key, false, semaq.TokenChunk{Seq: 1, N: 1, Text: "your password is hunter2"}); err != nil {
		t.Fatal(err)
	}
	if err := tokenRecord(ctx, nc, "req-p", key, false, semaq.TokenChunk{Seq: 2, Offset: 1, N: 1, Text: " -----BEGIN PRIVATE KEY-----"}); err != nil {
		t.Fatal(err)
	}
	rd, err := c.ReadTokens(ctx, "req-p")
	if err != nil {
		t.Fatal(err)
	}
	res, err := rd.Collect(ctx)
	rd.Close()
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "your [redacted] is hunter2" || res.Final.FinishReason != semaq.FinishContentFilter {
		t.Fatalf("read %q, finish %q", res.Text, res.Final.FinishReason)
	}
}

// With plugin_keys, a plugin must carry a signature one of them verifies.
func TestPluginSignatureRequired(t *testing.T) {
	noop := plugintest.Build(t, plugintest.Noop)
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, other, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	n := newPolicyNode(t, time.Minute, func(c *broker.Config) { c.PluginKeys = []string{base64.StdEncoding.EncodeToString(pub)} })
	nc, ctx := n.nc, n.ctx
	p := semaq.Plugin{Name: "noop", Stage: semaq.PluginStageIngress, Subjects: []string{"demo.>"}}
	if _, err := uploadPlugin(ctx, t, nc, p, noop, false); !errors.Is(err, semaq.ErrBadPlugin) || !strings.Contains(err.Error(), "not signed") {
		t.Fatalf("unsigned: %v", err)
	}
	p.Signature = base64.StdEncoding.EncodeToString(plugin.Sign(noop, other))
	if _, err := uploadPlugin(ctx, t, nc, p, noop, false); !errors.Is(err, semaq.ErrBadPlugin) || !strings.Contains(err.Error(), "does not verify") {
		t.Fatalf("signed by another key: %v", err)
	}
	p.Signature = base64.StdEncoding.EncodeToString(plugin.Sign(noop, priv))
	if _, err := uploadPlugin(ctx, t, nc, p, noop, false); err != nil {
		t.Fatalf("signed: %v", err)
	}
}
