package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/broker/quota"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/node"
	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/internal/sim"
	"github.com/semaq/semaq/internal/worker"
)

// manualClock is the quotas' clock: it moves when the test says.
type manualClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *manualClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestGatewayQuota: a tenant over its requests per minute gets OpenAI's
// 429 (rate_limit_error, code rate_limit_exceeded) with the broker's
// Retry-After, while another tenant's key is served; past the
// Retry-After the tenant is served again.
func TestGatewayQuota(t *testing.T) {
	clk := &manualClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	cfg := broker.DefaultConfig()
	cfg.DataDir, cfg.Listen, cfg.HTTP = t.TempDir(), "127.0.0.1:0", "127.0.0.1:0"
	cfg.GatewayAPIKeys = map[string]string{"key-a": "acme", "key-b": "beta"}
	cfg.Quotas = quota.Config{Tenants: map[string]quota.Limits{"acme": {RPM: 1}}}
	srv, err := node.New(cfg, nil, broker.WithQuotaClock(clk.Now))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	e := &env{srv: srv, base: "http://" + srv.HTTPAddr(), c: brokertest.Connect(t, srv)}
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"sim-1"}, Sim: sim.Config{Tokens: 4, Seed: 1}})

	ask := func(key string) (*http.Response, string) {
		resp := e.post(t, ctx, chatBody("sim-1", "hello", false, ""), http.Header{"Authorization": {"Bearer " + key}})
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	if resp, body := ask("key-a"); resp.StatusCode != 200 {
		t.Fatalf("acme's first request: %d %s", resp.StatusCode, body)
	}
	resp, body := ask("key-a")
	var eb openai.ErrorBody
	if err := json.Unmarshal([]byte(body), &eb); err != nil || eb.Error == nil {
		t.Fatalf("acme's second request: %d %s", resp.StatusCode, body)
	}
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "60" ||
		eb.Error.Type != openai.TypeRateLimit || eb.Error.Code == nil || *eb.Error.Code != "rate_limit_exceeded" ||
		!strings.Contains(eb.Error.Message, "tenant acme is over its quota of 1 requests per minute (rpm)") {
		t.Fatalf("acme's second request: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	if resp, body := ask("key-b"); resp.StatusCode != 200 {
		t.Fatalf("beta, without a quota: %d %s", resp.StatusCode, body)
	}
	scrape(t, e.base, `semaq_quota_refusals_total{quota="rpm",scope="tenant",tenant="acme"} 1`)
	clk.Add(time.Minute)
	if resp, body := ask("key-a"); resp.StatusCode != 200 {
		t.Fatalf("acme after the Retry-After: %d %s", resp.StatusCode, body)
	}
}
