package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/internal/sim"
	"github.com/semaq/semaq/internal/worker"
	"github.com/semaq/semaq/semaq"
)

// The OpenAI door follows the model registry (docs/models.md): a request
// is served by a worker of the active version, a promotion moves the next
// request to the new version's worker, and GET /v1/models says which
// version serves each registered model.
func TestGatewayFollowsModelRegistry(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, v := range []string{"v1", "v2"} {
		if _, err := e.c.ModelRegister(ctx, semaq.ModelRegisterRequest{ModelRef: semaq.ModelRef{Model: "sim-m", Version: v}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.c.ModelPromote(ctx, semaq.ModelPromoteRequest{ModelRef: semaq.ModelRef{Model: "sim-m", Version: "v1"}, Force: true}); err != nil {
		t.Fatal(err)
	}
	// Each version's worker answers in its own words (its seed).
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"sim-m"}, Version: "v1", ID: "w-v1", Sim: sim.Config{Tokens: 8, Seed: 1}})
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"sim-m"}, Version: "v2", ID: "w-v2", Sim: sim.Config{Tokens: 8, Seed: 2}})
	answer := func() string {
		resp := e.post(t, ctx, chatBody("sim-m", "which version", false, ""), nil)
		defer resp.Body.Close()
		var out openai.ChatCompletion
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&out) != nil || len(out.Choices) == 0 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return *out.Choices[0].Message.Content
	}
	listed := func() openai.Model {
		resp, err := http.Get(e.base + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var l openai.ModelList
		if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
			t.Fatal(err)
		}
		for _, m := range l.Data {
			if m.ID == "sim-m" {
				return m
			}
		}
		t.Fatalf("GET /v1/models does not list sim-m: %+v", l.Data)
		return openai.Model{}
	}
	v1, v2 := sim.Answer("user: which version", 8, 1), sim.Answer("user: which version", 8, 2)
	for range 3 {
		if got := answer(); got != v1 {
			t.Fatalf("with v1 active the answer is %q, want v1's %q", got, v1)
		}
	}
	if m := listed(); m.ActiveVersion != "v1" {
		t.Fatalf("/v1/models: %+v", m)
	}
	if _, err := e.c.ModelPromote(ctx, semaq.ModelPromoteRequest{ModelRef: semaq.ModelRef{Model: "sim-m", Version: "v2"}, Force: true}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if got := answer(); got != v2 {
			t.Fatalf("after the promotion the answer is %q, want v2's %q", got, v2)
		}
	}
	if m := listed(); m.ActiveVersion != "v2" {
		t.Fatalf("/v1/models after the promotion: %+v", m)
	}
	resp, err := http.Get(e.base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range []string{`semaq_model_requests_total{model="sim-m",version="v1"} 3`, `semaq_model_requests_total{model="sim-m",version="v2"} 3`} {
		if !strings.Contains(string(body), line) {
			t.Errorf("/metrics lacks %s", line)
		}
	}
}
