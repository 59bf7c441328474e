package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

func TestAgentAnnounceLs(t *testing.T) {
	t.Parallel()
	url := brokertest.Start(t).ClientURL()
	if out := mustSemaq(t, url, "", "agent", "ls"); strings.TrimSpace(out) != "No agents." {
		t.Fatalf("ls with no agents: %q", out)
	}

	// announce runs until interrupted: cancelling its context is SIGINT.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout := newSignalWriter("announced")
	var stderr bytes.Buffer
	root := newRoot(strings.NewReader(""), stdout, &stderr)
	root.SetArgs([]string{"agent", "announce", "summarizer-1", "--intent", "summarize,classify",
		"--capability", "model=llama3", "--capability", "lang=en", "--subject", "ai.tasks.>", "--ttl", "10s", "--server", url})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	select {
	case <-stdout.ready:
	case err := <-done:
		t.Fatalf("announce ended before announcing: %v; stderr: %s", err, stderr.String())
	}
	if want := "Agent summarizer-1 announced for classify,summarize (ttl 10s)"; !strings.Contains(stdout.String(), want) {
		t.Fatalf("announce printed %q, want %q", stdout.String(), want)
	}

	out := mustSemaq(t, url, "", "agent", "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "CAPABILITIES") {
		t.Fatalf("ls:\n%s", out)
	}
	for _, want := range []string{"summarizer-1", "classify,summarize", "lang=en,model=llama3", "ai.tasks.>", "10s"} {
		if !strings.Contains(lines[1], want) {
			t.Errorf("ls row %q lacks %q", lines[1], want)
		}
	}
	var agents []semaq.AgentInfo
	if err := json.Unmarshal([]byte(mustSemaq(t, url, "", "agent", "ls", "--json")), &agents); err != nil {
		t.Fatal(err)
	}
	if len(agents) != 1 || agents[0].ID != "summarizer-1" || agents[0].Capabilities["model"] != "llama3" ||
		len(agents[0].Intents) != 2 || agents[0].Subject != "ai.tasks.>" {
		t.Fatalf("ls --json = %+v", agents)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("announce after interrupt: %v; stderr: %s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "Agent summarizer-1 left") {
		t.Fatalf("announce did not report leaving: %q", stdout.String())
	}
	if out := mustSemaq(t, url, "", "agent", "ls"); strings.TrimSpace(out) != "No agents." {
		t.Fatalf("ls after leave: %q", out)
	}
}

func TestAgentAnnounceErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no intent", []string{"agent", "announce", "a1"}, "intent"},
		{"bad capability", []string{"agent", "announce", "a1", "--intent", "x", "--capability", "model"}, `--capability "model": want KEY=VALUE`},
		{"empty capability key", []string{"agent", "announce", "a1", "--intent", "x", "--capability", "=v"}, "--capability"},
		{"ttl too short", []string{"agent", "announce", "a1", "--intent", "x", "--ttl", "1ms"}, "ttl"},
		{"no id", []string{"agent", "announce", "--intent", "x"}, "arg"},
		{"ls args", []string{"agent", "ls", "extra"}, "unknown command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mustFailSemaq(t, unreachableURL, tc.want, tc.args...)
		})
	}
}
