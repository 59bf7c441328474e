package client_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/plugin/plugintest"
	"github.com/semaq/semaq/semaq"
)

// stored reads the next message stored on subject from the start of its
// stream.
func stored(t *testing.T, c *client.Client, subject string, seq uint64) *client.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, err := c.Subscribe(ctx, subject, client.WithStartSequence(seq), client.WithMaxMessages(1))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	m, err := sub.Next(ctx)
	if err != nil {
		t.Fatalf("reading seq %d of %s: %v", seq, subject, err)
	}
	return m
}

func TestPolicyRules(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "AI", "ai.>")
	ctx := context.Background()

	rule := semaq.PolicyRule{Name: "pii-in", Subjects: []string{"ai.inference.>"}, Redact: []string{semaq.PIIEmail}}
	info, err := c.AddPolicy(ctx, rule)
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "pii-in" || info.Revision == 0 || info.Error != "" {
		t.Fatalf("AddPolicy = %+v", info)
	}
	if _, err := c.AddPolicy(ctx, rule); !errors.Is(err, semaq.ErrPolicyExists) {
		t.Fatalf("adding pii-in again: %v, want ErrPolicyExists", err)
	}
	rule.Paths = []string{"prompt"}
	again, err := c.AddPolicy(ctx, rule, client.WithPolicyReplace())
	if err != nil {
		t.Fatal(err)
	}
	if again.Revision <= info.Revision || len(again.Paths) != 1 {
		t.Fatalf("replaced rule = %+v, first at revision %d", again, info.Revision)
	}

	list, err := c.Policies(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "pii-in" || list[0].Subjects[0] != "ai.inference.>" {
		t.Fatalf("Policies = %+v", list)
	}

	// In force on the next publish: the stored payload holds the mask, not
	// the address; a path the rule does not search keeps its value.
	ack, err := c.Publish(ctx, "ai.inference.llm", []byte(`{"prompt":"write to ada@example.com","from":"bob@example.com"}`))
	if err != nil {
		t.Fatal(err)
	}
	m := stored(t, c, "ai.inference.llm", ack.Sequence)
	if got := string(m.Data); !strings.Contains(got, `"prompt":"write to [EMAIL]"`) || strings.Contains(got, "ada@example.com") ||
		!strings.Contains(got, "bob@example.com") {
		t.Fatalf("stored %s", got)
	}
	got, err := c.Policy(ctx, "pii-in")
	if err != nil {
		t.Fatal(err)
	}
	if got.Stats.Found[semaq.PIIEmail] != 1 {
		t.Errorf("Policy(pii-in).Stats = %+v, want one email found", got.Stats)
	}

	if err := c.DeletePolicy(ctx, "pii-in"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Policy(ctx, "pii-in"); !errors.Is(err, semaq.ErrPolicyNotFound) {
		t.Fatalf("Policy after delete: %v, want ErrPolicyNotFound", err)
	}
	if err := c.DeletePolicy(ctx, "pii-in"); !errors.Is(err, semaq.ErrPolicyNotFound) {
		t.Fatalf("deleting twice: %v, want ErrPolicyNotFound", err)
	}
	ack, err = c.Publish(ctx, "ai.inference.llm", []byte(`{"prompt":"write to ada@example.com"}`))
	if err != nil {
		t.Fatal(err)
	}
	if m := stored(t, c, "ai.inference.llm", ack.Sequence); !strings.Contains(string(m.Data), "ada@example.com") {
		t.Fatalf("stored %s after the rule was removed", m.Data)
	}

	if _, err := c.AddPolicy(ctx, semaq.PolicyRule{Name: "bad", Subjects: []string{"ai.>"}, Redact: []string{"shoe-size"}}); !errors.Is(err, semaq.ErrBadPolicy) ||
		!strings.Contains(err.Error(), "shoe-size") {
		t.Fatalf("a rule with an unknown type: %v, want ErrBadPolicy naming it", err)
	}
}

func TestPolicyTestAndBlock(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "AI", "ai.>")
	ctx := context.Background()
	sample := []byte(`{"prompt":"mail ada@example.com"}`)

	res, err := c.TestPolicy(ctx, semaq.PolicyTestRequest{
		Rule: &semaq.PolicyRule{Name: "t", Redact: []string{semaq.PIIEmail}, Action: semaq.PIITokenize}, Data: sample})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Findings) != 1 || res.Findings[0].Type != semaq.PIIEmail || res.Findings[0].Path != "/prompt" ||
		!strings.Contains(string(res.Data), "<EMAIL_1>") || res.Blocked != "" {
		t.Fatalf("TestPolicy tokenize = %+v (%s)", res, res.Data)
	}

	block := semaq.PolicyRule{Name: "no-email", Subjects: []string{"ai.>"}, Redact: []string{semaq.PIIEmail}, Action: semaq.PIIBlock}
	if _, err := c.AddPolicy(ctx, block); err != nil {
		t.Fatal(err)
	}
	res, err = c.TestPolicy(ctx, semaq.PolicyTestRequest{Name: "no-email", Data: sample})
	if err != nil {
		t.Fatal(err)
	}
	if res.Blocked == "" || strings.Contains(res.Blocked, "ada@example.com") {
		t.Fatalf("TestPolicy of a block rule: Blocked %q", res.Blocked)
	}
	_, err = c.Publish(ctx, "ai.x", sample)
	if !errors.Is(err, semaq.ErrPIIBlocked) || !strings.Contains(err.Error(), "email") || !strings.Contains(err.Error(), "/prompt") ||
		strings.Contains(err.Error(), "ada@example.com") {
		t.Fatalf("publishing what a block rule finds: %v, want ErrPIIBlocked naming email and /prompt, not the value", err)
	}
	if si, err := c.StreamInfo(ctx, "AI"); err != nil || si.State.Messages != 0 {
		t.Fatalf("stream after a blocked publish: %+v, %v", si, err)
	}
	if _, err := c.TestPolicy(ctx, semaq.PolicyTestRequest{Name: "missing", Data: sample}); !errors.Is(err, semaq.ErrPolicyNotFound) {
		t.Fatalf("testing a missing rule: %v", err)
	}
}

func TestRestorePII(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "AI", "ai.>")
	ctx := context.Background()
	if _, err := c.AddPolicy(ctx, semaq.PolicyRule{Name: "pii-in", Subjects: []string{"ai.>"},
		Redact: []string{semaq.PIIEmail}, Action: semaq.PIITokenize}); err != nil {
		t.Fatal(err)
	}
	ack, err := c.Publish(ctx, "ai.chat", []byte(`{"prompt":"mail ada@example.com"}`), client.WithMsgID("req-1"))
	if err != nil {
		t.Fatal(err)
	}
	m := stored(t, c, "ai.chat", ack.Sequence)
	if scope := m.Header.Get(semaq.HdrPIIScope); scope != "r.req-1" || !strings.Contains(string(m.Data), "<EMAIL_1>") ||
		strings.Contains(string(m.Data), "ada@") {
		t.Fatalf("stored %s with scope %q", m.Data, scope)
	}
	res, err := c.RestorePII(ctx, semaq.PolicyRestoreRequest{Scope: "r.req-1", Text: "Dear <EMAIL_1>, <EMAIL_2>"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != "Dear ada@example.com, <EMAIL_2>" || res.Restored != 1 {
		t.Fatalf("RestorePII = %+v", res)
	}
	if _, err := c.RestorePII(ctx, semaq.PolicyRestoreRequest{Scope: "r.req-2", Text: "<EMAIL_1>"}); !errors.Is(err, semaq.ErrVaultNotFound) {
		t.Fatalf("restoring from a scope never written: %v, want ErrVaultNotFound", err)
	}
	if _, err := c.RestorePII(ctx, semaq.PolicyRestoreRequest{Text: "<EMAIL_1>"}); !errors.Is(err, semaq.ErrBadRequest) {
		t.Fatalf("restoring without a scope: %v", err)
	}
}

func TestPluginAddListDelete(t *testing.T) {
	t.Parallel()
	wasm := plugintest.Build(t, plugintest.Enrich)
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	brokertest.AddStream(t, c, "DEMO", "demo.>")
	ctx := context.Background()

	sum := sha256.Sum256(wasm)
	// The longest call time also gives the module's start its longest
	// bound (30s): starting a Go module takes seconds on a loaded machine.
	p := semaq.Plugin{Name: "enrich", Stage: semaq.PluginStageIngress, Subjects: []string{"demo.>"}, Timeout: semaq.MaxPluginTime}
	info, err := c.AddPlugin(ctx, p, wasm, false)
	if err != nil {
		t.Fatal(err)
	}
	if info.SHA256 != hex.EncodeToString(sum[:]) || info.Size != int64(len(wasm)) || info.Error != "" {
		t.Fatalf("AddPlugin = %+v", info)
	}
	if _, err := c.AddPlugin(ctx, p, wasm, false); !errors.Is(err, semaq.ErrPluginExists) {
		t.Fatalf("adding enrich again: %v, want ErrPluginExists", err)
	}

	ack, err := c.Publish(ctx, "demo.x", []byte(`{"model":"llama3"}`))
	if err != nil {
		t.Fatal(err)
	}
	m := stored(t, c, "demo.x", ack.Sequence)
	if m.Header.Get("X-Payload-Length") != "18" || m.Header.Get(semaq.HdrModel) != "llama3" {
		t.Fatalf("stored headers %v: the plugin did not run", m.Header)
	}
	list, err := c.Plugins(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != "enrich" || list[0].Stats.Calls != 1 {
		t.Fatalf("Plugins = %+v", list)
	}

	if err := c.DeletePlugin(ctx, "enrich"); err != nil {
		t.Fatal(err)
	}
	if list, err := c.Plugins(ctx); err != nil || len(list) != 0 {
		t.Fatalf("Plugins after delete = %+v, %v", list, err)
	}
	if err := c.DeletePlugin(ctx, "enrich"); !errors.Is(err, semaq.ErrPluginNotFound) {
		t.Fatalf("deleting twice: %v, want ErrPluginNotFound", err)
	}

	// A digest that is not the module's is refused before anything is sent.
	p.SHA256 = strings.Repeat("0", 64)
	if _, err := c.AddPlugin(ctx, p, wasm, false); !errors.Is(err, semaq.ErrBadPlugin) || !strings.Contains(err.Error(), "SHA256") {
		t.Fatalf("a wrong digest: %v, want ErrBadPlugin naming SHA256", err)
	}
}
