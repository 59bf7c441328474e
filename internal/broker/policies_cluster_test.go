package broker_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/plugin"
	"github.com/semaq/semaq/internal/plugin/plugintest"
	"github.com/semaq/semaq/semaq"
)

// policyCluster is the one 3-node cluster the policy cluster tests share:
// an SDK client and an operator connection on every node, and the
// operator's JetStream on n1 to read what was stored.
type policyCluster struct {
	c   *brokertest.Cluster
	sdk []*client.Client
	op  []*nats.Conn
	js  jetstream.JetStream
	// cache holds the plugins compiled for every node.
	cache *pluginCache
}

func startPolicyCluster(t *testing.T, plugins ...[]byte) *policyCluster {
	t.Helper()
	cache := sharedPluginCache(t, plugins...)
	pc := &policyCluster{c: brokertest.StartCluster(t, 3, func(cfg *broker.Config) { cfg.PluginCacheDir = cache.dir })}
	for i := range 3 {
		pc.sdk = append(pc.sdk, brokertest.Connect(t, pc.c.Node(i)))
		nc, err := brokertest.DialOperator(pc.c.Node(i))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		pc.op = append(pc.op, nc)
	}
	js, err := jetstream.New(pc.op[0])
	if err != nil {
		t.Fatal(err)
	}
	pc.js = js
	brokertest.AddStream(t, pc.sdk[0], "PDEMO", "pdemo.>")
	pc.cache = cache
	return pc
}

// pluginCache is the compilation cache every node of a test cluster keeps
// its compiled plugins in (plugin_cache_dir: the tests' shared one). A Go
// plugin takes seconds to compile, ten times that under the race
// detector: with the modules compiled once, ahead, while the nodes start,
// the tests see how plugins travel, not how long the compiler takes.
type pluginCache struct {
	dir  string
	done chan error
	n    int // modules still compiling
}

func sharedPluginCache(t *testing.T, modules ...[]byte) *pluginCache {
	t.Helper()
	pc := &pluginCache{dir: plugintest.CacheDir(), done: make(chan error, len(modules))}
	if pc.dir == "" {
		pc.dir = t.TempDir()
	}
	for _, m := range modules {
		go func() { pc.done <- compileInto(pc.dir, m) }()
	}
	pc.n = len(modules)
	return pc
}

// compileInto compiles module into the compilation cache in dir.
func compileInto(dir string, module []byte) error {
	ctx := context.Background()
	rt, err := plugin.NewRuntime(ctx, plugin.RuntimeConfig{CacheDir: dir})
	if err != nil {
		return err
	}
	p, err := rt.Load(ctx, "warm", module, nil, plugin.Limits{})
	if err == nil {
		err = p.Close(ctx)
	}
	return errors.Join(err, rt.Close(ctx))
}

// wait returns once every module is compiled.
func (pc *pluginCache) wait() error {
	var errs []error
	for ; pc.n > 0; pc.n-- {
		errs = append(errs, <-pc.done)
	}
	return errors.Join(errs...)
}

// publish publishes data on subject through node i's ingress and returns
// the payload the stream stored.
func (pc *policyCluster) publish(ctx context.Context, t *testing.T, i int, subject, data string, opts ...client.PublishOption) *jetstream.RawStreamMsg {
	t.Helper()
	ack, err := pc.sdk[i].Publish(ctx, subject, []byte(data), opts...)
	if err != nil {
		t.Fatalf("publish on %s through n%d: %v", subject, i+1, err)
	}
	st, err := pc.js.Stream(ctx, "PDEMO")
	if err != nil {
		t.Fatal(err)
	}
	m, err := st.GetMsg(ctx, ack.Sequence)
	if err != nil {
		t.Fatalf("reading message %d: %v", ack.Sequence, err)
	}
	return m
}

// The policy of a cluster is one: whatever node a change is made through,
// the next message on every node meets it, without waiting.
func TestClusterPolicy(t *testing.T) {
	t.Parallel()
	enrich := plugintest.Build(t, plugintest.Enrich)
	noop := plugintest.Build(t, plugintest.Noop)
	pc := startPolicyCluster(t, enrich, noop)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("rule in force on every node at once", func(t *testing.T) {
		const addr = "ann@example.com"
		payload := `{"q":"mail ` + addr + `"}`
		for round := range 3 {
			name := fmt.Sprintf("mask-%d", round)
			rule := semaq.PolicyRule{Name: name, Subjects: []string{"pdemo.mask.>"}, Redact: []string{semaq.PIIEmail}}
			if err := apiCall(ctx, t, pc.op[0], semaq.APIPolicyAdd, semaq.PolicyAddRequest{PolicyRule: rule}, nil); err != nil {
				t.Fatal(err)
			}
			for i := 1; i < 3; i++ {
				if got := string(pc.publish(ctx, t, i, "pdemo.mask.in", payload).Data); got != `{"q":"mail [EMAIL]"}` {
					t.Fatalf("round %d: right after the add through n1, n%d stored %s", round, i+1, got)
				}
			}
			if err := apiCall(ctx, t, pc.op[0], semaq.APIPolicyDelete, semaq.PolicyNameRequest{Name: name}, nil); err != nil {
				t.Fatal(err)
			}
			for i := 1; i < 3; i++ {
				if got := string(pc.publish(ctx, t, i, "pdemo.mask.in", payload).Data); got != payload {
					t.Fatalf("round %d: right after the delete through n1, n%d stored %s", round, i+1, got)
				}
			}
		}
	})

	t.Run("tokenize on one node, restore on another", func(t *testing.T) {
		rule := semaq.PolicyRule{Name: "tok", Subjects: []string{"pdemo.tok.>"}, Redact: []string{semaq.PIIEmail}, Action: semaq.PIITokenize}
		if err := apiCall(ctx, t, pc.op[0], semaq.APIPolicyAdd, semaq.PolicyAddRequest{PolicyRule: rule}, nil); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = apiCall(ctx, t, pc.op[0], semaq.APIPolicyDelete, semaq.PolicyNameRequest{Name: "tok"}, nil)
		}()
		m := pc.publish(ctx, t, 1, "pdemo.tok.in", `{"q":"ann@example.com wrote to bob@example.com"}`, client.WithMsgID("creq-1"))
		if string(m.Data) != `{"q":"<EMAIL_1> wrote to <EMAIL_2>"}` || m.Header.Get(semaq.HdrPIIScope) != "r.creq-1" {
			t.Fatalf("stored %s, scope %q", m.Data, m.Header.Get(semaq.HdrPIIScope))
		}
		// n3 opens what n2 sealed: the nodes' vault keys come from the
		// same cluster secret.
		res, err := pc.sdk[2].RestorePII(ctx, semaq.PolicyRestoreRequest{Scope: "r.creq-1", Text: "to <EMAIL_2> from <EMAIL_1>"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Text != "to bob@example.com from ann@example.com" || res.Restored != 2 {
			t.Fatalf("restored through n3: %+v", res)
		}
	})

	t.Run("token stream filtered on the writer's node", func(t *testing.T) {
		for _, r := range []semaq.PolicyRule{
			{Name: "tok-pii", Streams: []string{semaq.PolicyStreamTokens}, Redact: []string{semaq.PIIEmail}},
			{Name: "tok-stop", Streams: []string{semaq.PolicyStreamTokens}, Words: []string{"launch codes"}, OnMatch: semaq.ContentStop},
		} {
			if err := apiCall(ctx, t, pc.op[0], semaq.APIPolicyAdd, semaq.PolicyAddRequest{PolicyRule: r}, nil); err != nil {
				t.Fatal(err)
			}
			defer func() {
				_ = apiCall(ctx, t, pc.op[0], semaq.APIPolicyDelete, semaq.PolicyNameRequest{Name: r.Name}, nil)
			}()
		}
		const key = "cluster-writer-key-0123456789"
		w := pc.op[2]
		for i, ch := range []string{"Write to a", "nn@exa", "mple.com now."} {
			if err := tokenRecord(ctx, w, "creq-t1", key, false, semaq.TokenChunk{Seq: uint64(i + 1), Offset: uint64(i), N: 1, Text: ch}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tokenRecord(ctx, w, "creq-t1", key, true, semaq.TokenChunk{Seq: 4, Offset: 3, Final: &semaq.TokenFinal{FinishReason: "stop"}}); err != nil {
			t.Fatal(err)
		}
		res := collectTokens(ctx, t, pc.sdk[0], "creq-t1")
		if res.Text != "Write to [EMAIL] now." || res.Final.FinishReason != "stop" {
			t.Fatalf("read through n1: %q, finish %q", res.Text, res.Final.FinishReason)
		}

		for i, ch := range []string{"The launch", " codes are 1234"} {
			if err := tokenRecord(ctx, w, "creq-t2", key, false, semaq.TokenChunk{Seq: uint64(i + 1), Offset: uint64(i), N: 1, Text: ch}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tokenRecord(ctx, w, "creq-t2", key, false, semaq.TokenChunk{Seq: 3, Offset: 2, N: 1, Text: " and more"}); !errors.Is(err, semaq.ErrPolicy) {
			t.Fatalf("a record after the stop: %v", err)
		}
		res = collectTokens(ctx, t, pc.sdk[1], "creq-t2")
		if res.Text != "The " || res.Final.FinishReason != semaq.FinishContentFilter {
			t.Fatalf("read through n2: %q, finish %q", res.Text, res.Final.FinishReason)
		}
	})

	t.Run("plugin uploaded on one node runs on every node", func(t *testing.T) {
		if err := pc.cache.wait(); err != nil {
			t.Fatal(err)
		}
		p := semaq.Plugin{Name: "cenrich", Stage: semaq.PluginStageIngress, Subjects: []string{"pdemo.plug.>"}, Timeout: time.Second}
		if _, err := uploadPlugin(ctx, t, pc.op[0], p, enrich, false); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = apiCall(ctx, t, pc.op[0], semaq.APIPluginDelete, semaq.PluginNameRequest{Name: "cenrich"}, nil)
		}()
		m := pc.publish(ctx, t, 2, "pdemo.plug.in", `{"model":"llama","q":"hi"}`)
		if m.Header.Get("X-Payload-Length") != "26" || m.Header.Get(semaq.HdrModel) != "llama" {
			t.Fatalf("published through n3 after the upload through n1: headers %v", m.Header)
		}
		if _, err := uploadPlugin(ctx, t, pc.op[1], p, noop, true); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if h := pc.publish(ctx, t, i, "pdemo.plug.in", `{"model":"llama","q":"hi"}`).Header; h.Get("X-Payload-Length") != "" {
				t.Fatalf("published through n%d after the replace through n2: the old version ran: %v", i+1, h)
			}
		}
		var list semaq.PluginListResponse
		for i := range 3 {
			if err := apiCall(ctx, t, pc.op[i], semaq.APIPluginList, struct{}{}, &list); err != nil {
				t.Fatal(err)
			}
			if len(list.Plugins) != 1 || list.Plugins[0].SHA256 != sha256Hex(noop) || list.Plugins[0].Error != "" {
				t.Fatalf("n%d lists %+v, want cenrich running noop's module", i+1, list.Plugins)
			}
		}
	})
}

// collectTokens reads request id's whole token stream through c.
func collectTokens(ctx context.Context, t *testing.T, c *client.Client, id string, opts ...client.TokenReadOption) *client.TokenResult {
	t.Helper()
	rd, err := c.ReadTokens(ctx, id, opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	res, err := rd.Collect(ctx)
	if err != nil {
		t.Fatalf("reading %s: %v", id, err)
	}
	return res
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
