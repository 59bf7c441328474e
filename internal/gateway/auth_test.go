package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/openai"
	"github.com/semaq/semaq/internal/sim"
	"github.com/semaq/semaq/internal/worker"
	"github.com/semaq/semaq/semaq"
)

// With auth on the gateway takes the identity store's keys: the official
// request shape with a service key is answered by a worker; a bad key gets
// OpenAI's 401, a key without the model's subject a 403.
func TestGatewayWithAuth(t *testing.T) {
	srv := brokertest.Start(t, brokertest.WithAuth)
	adminKey := brokertest.AdminKey(t, srv)
	admin := brokertest.ConnectKey(t, srv, adminKey)
	e := &env{srv: srv, base: "http://" + srv.HTTPAddr(), c: admin}

	// The worker runs with the admin's key.
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"llama3"}, Sim: sim.Config{Tokens: 3, Seed: 1}}, client.WithKey(adminKey))

	add := func(r semaq.UserAddRequest) string { return e.addUser(t, r) }
	svc := add(semaq.UserAddRequest{Name: "app", Tenant: "acme", Role: semaq.RoleService, Subjects: []string{"ai.infer.>"}})
	other := add(semaq.UserAddRequest{Name: "other", Tenant: "acme", Role: semaq.RoleService, Subjects: []string{"svc.>"}})

	chat := func(key string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest("POST", e.base+"/v1/chat/completions",
			strings.NewReader(`{"model":"llama3","messages":[{"role":"user","content":"Say hi"}]}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set(semaq.HdrHTTPTenant, "someone-else") // ignored: the key's tenant counts
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	status, body := chat(svc)
	var cc openai.ChatCompletion
	if status != 200 || json.Unmarshal(body, &cc) != nil || len(cc.Choices) != 1 || cc.Choices[0].Message.Content == nil || *cc.Choices[0].Message.Content == "" {
		t.Fatalf("service key: %d %s", status, body)
	}

	var eb struct {
		Error struct {
			Type, Message string
			Code          *string
		} `json:"error"`
	}
	status, body = chat(svc[:len(svc)-4] + "AAAA")
	if status != 401 || json.Unmarshal(body, &eb) != nil || eb.Error.Code == nil || *eb.Error.Code != "invalid_api_key" ||
		eb.Error.Type != openai.TypeAuthentication {
		t.Fatalf("invalid key: %d %s, want OpenAI's 401 invalid_api_key", status, body)
	}
	status, body = chat(other)
	if status != 403 || !strings.Contains(string(body), "ai.infer.llama3") {
		t.Fatalf("key without the model's subject: %d %s, want 403 naming the subject", status, body)
	}

	req, _ := http.NewRequest("GET", e.base+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+svc)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/v1/models with a key: %d", resp.StatusCode)
	}
}
