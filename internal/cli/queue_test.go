package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

func TestQueueCommands(t *testing.T) {
	srv := brokertest.Start(t)
	url := srv.ClientURL()
	out := mustSemaq(t, url, "", "queue", "add", "INFER", "--subjects", "ai.infer.>", "--max-messages", "100", "--ack-wait", "2s")
	if !strings.Contains(out, "Queue INFER added on ai.infer.>") {
		t.Fatalf("queue add: %q", out)
	}
	mustSemaq(t, url, "", "pub", "ai.infer.llama", `{"prompt":"bulk"}`, "--priority", "bulk", "--msg-id", "r1", "--tenant", "acme")
	mustSemaq(t, url, "", "pub", "ai.infer.llama", `{"prompt":"now"}`, "--priority", "critical", "--msg-id", "r2", "--prompt-tokens", "50")
	mustSemaq(t, url, "", "pub", "ai.infer.llama", `{"prompt":"gone"}`, "--msg-id", "r3", "-H", "AI-Cancel-Token=token-of-request-r3")

	mustFailSemaq(t, url, "needs the cancel token", "cancel", "INFER", "r3")
	out = mustSemaq(t, url, "", "cancel", "INFER", "r3", "--token", "token-of-request-r3")
	if !strings.Contains(out, "Request r3 (seq 3) removed from queue INFER") {
		t.Fatalf("cancel: %q", out)
	}
	mustFailSemaq(t, url, "holds no request", "cancel", "INFER", "r3")

	var st semaq.QueueInfo
	waitFor(t, "two requests queued", func() bool {
		r := runSemaq(t, url, "", "queue", "status", "INFER", "--json")
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &st) == nil && st.Status.Queued == 2
	})
	out = mustSemaq(t, url, "", "queue", "status", "INFER")
	for _, want := range []string{"queued 2", "by tenant:", "acme", "recommended"} {
		if !strings.Contains(out, want) {
			t.Fatalf("queue status lacks %q:\n%s", want, out)
		}
	}
	out = mustSemaq(t, url, "", "queue", "ls")
	if !strings.Contains(out, "INFER") || !strings.Contains(out, "ai.infer.>") {
		t.Fatalf("queue ls: %q", out)
	}

	// The critical request comes first, then the bulk one; --ack answers them.
	out = mustSemaq(t, url, "", "work", "fetch", "INFER", "--max", "5", "--ack", "--json", "--label", "model=llama3")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("fetch printed %d lines: %q", len(lines), out)
	}
	var first struct {
		ID         string `json:"id"`
		Tokens     int64  `json:"tokens"`
		Data       string `json:"data"`
		AckSubject string `json:"ack_subject"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || first.ID != "r2" || first.Tokens != 50 || first.Data != `{"prompt":"now"}` || first.AckSubject == "" {
		t.Fatalf("first job = %+v (%v)", first, err)
	}
	waitFor(t, "queue drained", func() bool {
		r := runSemaq(t, url, "", "queue", "status", "INFER", "--json")
		return r.code == 0 && json.Unmarshal([]byte(r.stdout), &st) == nil && st.Status.Queued == 0 && st.Status.Held == 0
	})
	if st.Status.Counters.Acked != 2 || st.Status.Counters.Cancelled != 1 {
		t.Fatalf("counters = %+v", st.Status.Counters)
	}
	r := runSemaq(t, url, "", "work", "fetch", "INFER")
	if r.code != 0 || !strings.Contains(r.stderr, "No requests.") {
		t.Fatalf("empty fetch: %+v", r)
	}

	mustFailSemaq(t, url, "--label \"model\": want KEY=VALUE", "work", "fetch", "INFER", "--label", "model")
	mustFailSemaq(t, url, "queue NOPE not found", "work", "fetch", "NOPE")
	mustFailSemaq(t, url, "ack wait", "queue", "add", "X", "--subjects", "x.>", "--ack-wait", "1ms")
	mustFailSemaq(t, url, "already exists", "queue", "add", "INFER", "--subjects", "other.>")
	mustSemaq(t, url, "", "queue", "rm", "INFER")
	mustFailSemaq(t, url, "queue INFER not found", "queue", "status", "INFER")
}

// waitFor polls cond until it holds, failing the test after 15 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition, not synchronising on time
	}
}
