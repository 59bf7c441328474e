package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/broker/quota"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/internal/sim"
	"github.com/semaq/semaq/internal/worker"
	"github.com/semaq/semaq/semaq"
)

// TestGatewayQuota: a tenant over its requests per minute gets OpenAI's
// 429 (rate_limit_error, code rate_limit_exceeded) with the broker's
// Retry-After, while another tenant's key is served; past the
// Retry-After the tenant is served again.
func TestGatewayQuota(t *testing.T) {
	clk := brokertest.NewStepClock()
	srv := startQuotaNode(t, clk, func(cfg *broker.Config) {
		cfg.GatewayAPIKeys = map[string]string{"key-a": "acme", "key-b": "beta"}
		cfg.Quotas = quota.Config{Tenants: map[string]quota.Limits{"acme": {RPM: 1}}}
	})
	e := &env{srv: srv, base: "http://" + srv.HTTPAddr(), c: brokertest.Connect(t, srv)}
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"sim-1"}, Sim: sim.Config{Tokens: 4, Seed: 1}})
	ask := func(key string) (*http.Response, string) { return askModel(t, e, "sim-1", key) }

	if resp, body := ask("key-a"); resp.StatusCode != 200 {
		t.Fatalf("acme's first request: %d %s", resp.StatusCode, body)
	}
	resp, body := ask("key-a")
	wantRateLimited(t, resp, body, "60", "tenant acme is over its quota of 1 request per minute (rpm)")
	if resp, body := ask("key-b"); resp.StatusCode != 200 {
		t.Fatalf("beta, without a quota: %d %s", resp.StatusCode, body)
	}
	scrape(t, e.base, `semaq_quota_refusals_total{quota="rpm",scope="tenant",tenant="acme"} 1`)
	clk.Add(time.Minute)
	if resp, body := ask("key-a"); resp.StatusCode != 200 {
		t.Fatalf("acme after the Retry-After: %d %s", resp.StatusCode, body)
	}
}

// startQuotaNode runs a node whose quotas read clk.
func startQuotaNode(t *testing.T, clk *brokertest.StepClock, cfgFn func(*broker.Config)) *broker.Server {
	t.Helper()
	return brokertest.StartWith(t, []broker.Option{broker.WithQuotaClock(clk.Now)}, cfgFn)
}

// askModel sends one chat completion with key and returns the answer.
func askModel(t *testing.T, e *env, model, key string) (*http.Response, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp := e.post(t, ctx, chatBody(model, "hello", false, ""), http.Header{"Authorization": {"Bearer " + key}})
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// wantRateLimited asserts OpenAI's 429 for a quota: rate_limit_error,
// rate_limit_exceeded, the Retry-After ("": any), a message saying says.
func wantRateLimited(t *testing.T, resp *http.Response, body, retryAfter, says string) {
	t.Helper()
	var eb openai.ErrorBody
	if err := json.Unmarshal([]byte(body), &eb); err != nil || eb.Error == nil {
		t.Fatalf("%d %s, want OpenAI's error shape", resp.StatusCode, body)
	}
	ra := resp.Header.Get("Retry-After")
	if resp.StatusCode != http.StatusTooManyRequests || ra == "" || retryAfter != "" && ra != retryAfter ||
		eb.Error.Type != openai.TypeRateLimit || eb.Error.Code == nil || *eb.Error.Code != "rate_limit_exceeded" ||
		!strings.Contains(eb.Error.Message, says) {
		t.Fatalf("%d Retry-After %q %s, want 429 rate_limit_exceeded after %s saying %q", resp.StatusCode,
			resp.Header.Get("Retry-After"), body, retryAfter, says)
	}
}

// TestGatewayKeyQuota: with auth on, a key's user with a quota of its own
// is refused past it with OpenAI's 429, while another key of the same
// tenant is served.
func TestGatewayKeyQuota(t *testing.T) {
	clk := brokertest.NewStepClock()
	srv := startQuotaNode(t, clk, func(cfg *broker.Config) { cfg.Auth = true })
	adminKey := brokertest.AdminKey(t, srv)
	admin := brokertest.ConnectKey(t, srv, adminKey)
	e := &env{srv: srv, base: "http://" + srv.HTTPAddr(), c: admin}

	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"llama3"}, Sim: sim.Config{Tokens: 3, Seed: 1}}, client.WithKey(adminKey))
	add := func(r semaq.UserAddRequest) string { return e.addUser(t, r) }
	metered := add(semaq.UserAddRequest{Name: "metered", Tenant: "acme", Role: semaq.RoleService, Subjects: []string{"ai.infer.>"}, RPM: 1})
	free := add(semaq.UserAddRequest{Name: "free", Tenant: "acme", Role: semaq.RoleService, Subjects: []string{"ai.infer.>"}})

	if resp, body := askModel(t, e, "llama3", metered); resp.StatusCode != 200 {
		t.Fatalf("first request: %d %s", resp.StatusCode, body)
	}
	resp, body := askModel(t, e, "llama3", metered)
	wantRateLimited(t, resp, body, "60", "user metered (tenant acme) is over its quota of 1 request per minute (rpm)")
	if resp, body := askModel(t, e, "llama3", free); resp.StatusCode != 200 {
		t.Fatalf("another key of the tenant: %d %s", resp.StatusCode, body)
	}
	clk.Add(time.Minute)
	if resp, body := askModel(t, e, "llama3", metered); resp.StatusCode != 200 {
		t.Fatalf("after the Retry-After: %d %s", resp.StatusCode, body)
	}
}

// TestGatewayTokenQuota: the tokens per minute count a request's prompt
// at admission and the completion its worker reports when it acks, so a
// tenant whose answers used up the minute is refused with
// rate_limit_exceeded until the debt is waited out.
func TestGatewayTokenQuota(t *testing.T) {
	clk := brokertest.NewStepClock()
	srv := startQuotaNode(t, clk, func(cfg *broker.Config) {
		cfg.GatewayAPIKeys = map[string]string{"key-a": "acme"}
		cfg.Quotas = quota.Config{Tenants: map[string]quota.Limits{"acme": {TPM: 40}}}
	})
	e := &env{srv: srv, base: "http://" + srv.HTTPAddr(), c: brokertest.Connect(t, srv)}
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"sim-1"}, Sim: sim.Config{Tokens: 40, Seed: 1}})

	if resp, body := askModel(t, e, "sim-1", "key-a"); resp.StatusCode != 200 {
		t.Fatalf("first request: %d %s", resp.StatusCode, body)
	}
	// The worker acks after the answer: wait for the queue to count it.
	waitFor(t, func() bool {
		info, err := e.c.QueueInfo(context.Background(), semaq.InferQueue("sim-1"))
		return err == nil && info.Status.Counters.OutputToks == 40
	})
	resp, body := askModel(t, e, "sim-1", "key-a")
	wantRateLimited(t, resp, body, "", "tenant acme is over its quota of 40 tokens per minute (tpm)")
}
