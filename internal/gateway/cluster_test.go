package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	oa "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/internal/sim"
	"github.com/semaq/semaq/internal/worker"
	"github.com/semaq/semaq/semaq"
)

// modelsOf is what GET /v1/models of e lists.
func modelsOf(ctx context.Context, e *env) ([]string, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.base+"/v1/models", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var list openai.ModelList
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d: %v", resp.StatusCode, err)
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
	}
	slices.Sort(ids)
	return ids, nil
}

// agentsOf is the agent registry as e's node answers it.
func agentsOf(ctx context.Context, e *env) ([]string, error) {
	agents, err := e.c.Agents(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, a := range agents {
		ids = append(ids, a.ID+"="+fmt.Sprint(a.Intents))
	}
	slices.Sort(ids)
	return ids, nil
}

// On a cluster, the agent registry and GET /v1/models answer the same
// through every node, n3 included, which no worker is connected to; a
// completion asked through n3 is answered by the workers on n1 and n2; when
// a worker leaves, every node stops listing its model.
func TestClusterModelsAndAgentsEveryNode(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3)
	var envs []*env
	for _, s := range c.Nodes() {
		envs = append(envs, &env{srv: s, base: "http://" + s.HTTPAddr(), c: brokertest.Connect(t, s)})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	w1 := envs[0].startWorker(t, worker.Config{Upstream: "sim", Models: []string{"sim-1"}, Sim: sim.Config{Tokens: 12, Seed: 5}})
	envs[1].startWorker(t, worker.Config{Upstream: "sim", Models: []string{"sim-2"}, Sim: sim.Config{Tokens: 12, Seed: 5}})

	same := func(want []string) func() error {
		return func() error {
			var first []string
			for i, e := range envs {
				models, err := modelsOf(ctx, e)
				if err != nil {
					return fmt.Errorf("n%d: /v1/models: %w", i+1, err)
				}
				if !slices.Equal(models, want) {
					return fmt.Errorf("n%d lists models %v, want %v", i+1, models, want)
				}
				agents, err := agentsOf(ctx, e)
				if err != nil {
					return fmt.Errorf("n%d: agents: %w", i+1, err)
				}
				if i == 0 {
					first = agents
				} else if !slices.Equal(agents, first) {
					return fmt.Errorf("n%d lists agents %v, n1 %v", i+1, agents, first)
				}
			}
			if len(first) != len(want) {
				return fmt.Errorf("agents %v for models %v", first, want)
			}
			return nil
		}
	}
	c.Eventually(30*time.Second, "every node to list both models and the same agents", same([]string{"sim-1", "sim-2"}))

	// Through n3, which no worker is connected to.
	for _, model := range []string{"sim-1", "sim-2"} {
		var out openai.ChatCompletion
		c.Eventually(30*time.Second, "a completion of "+model+" through n3", func() error {
			pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			resp := envs[2].post(t, pctx, chatBody(model, "hello cluster", false, ""), nil)
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return json.NewDecoder(resp.Body).Decode(&out)
		})
		if want := sim.Answer("user: hello cluster", 12, 5); len(out.Choices) != 1 || out.Choices[0].Message.Content == nil || *out.Choices[0].Message.Content != want {
			t.Fatalf("%s through n3 answered %+v, want %q", model, out, want)
		}
	}

	// A conversation kept in a session, one turn through each node: each
	// turn sends its new message only, and the model sees every earlier
	// turn, whichever node kept it.
	var conv conversation
	for i, msg := range []string{"my name is Ada", "what is my name?", "spell it"} {
		oc := oa.NewClient(option.WithBaseURL(envs[i].base+"/v1/"), option.WithAPIKey("sk-test"), option.WithMaxRetries(0),
			option.WithHeader(semaq.HdrHTTPSession, "across"), option.WithHeader(semaq.HdrHTTPTenant, "acme"))
		out, err := oc.Chat.Completions.New(ctx, oa.ChatCompletionNewParams{Model: "sim-2",
			Messages: []oa.ChatCompletionMessageParamUnion{oa.UserMessage(msg)}})
		if err != nil {
			var apiErr *oa.Error
			if errors.As(err, &apiErr) {
				t.Fatalf("turn %d through n%d: %v: %s", i+1, i+1, err, apiErr.RawJSON())
			}
			t.Fatalf("turn %d through n%d: %v", i+1, i+1, err)
		}
		conv.add("user", msg)
		if want := sim.Answer(conv.prompt(), 12, 5); out.Choices[0].Message.Content != want {
			t.Fatalf("turn %d through n%d: %q, want %q: the model did not see\n%s", i+1, i+1, out.Choices[0].Message.Content, want, conv.prompt())
		}
		conv.add("assistant", out.Choices[0].Message.Content)
	}
	if s, err := envs[0].c.GetSession(ctx, semaq.SessionRef{ID: "across", Tenant: "acme"}, -1); err != nil || len(s.Rounds) != 3 || s.Revision != 3 {
		t.Fatalf("the session after three turns: %+v %v", s, err)
	}

	// The worker on n1 stops: it leaves the registry, seen from every node.
	w1.stop()
	<-w1.done
	c.Eventually(30*time.Second, "every node to list sim-2 alone", same([]string{"sim-2"}))
}
