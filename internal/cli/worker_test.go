package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/sim"
)

func TestWorkerBadFlags(t *testing.T) {
	mustFailSemaq(t, unreachableURL, "--upstream is required", "worker", "--model", "m")
	mustFailSemaq(t, unreachableURL, "at least one --model", "worker", "--upstream", "sim")
	mustFailSemaq(t, unreachableURL, "want KEY=VALUE", "worker", "--upstream", "sim", "--model", "m", "--label", "gpu")
	mustFailSemaq(t, unreachableURL, "SEMAQ_TEST_UNSET_KEY", "worker", "--upstream", "http://127.0.0.1:1/v1", "--model", "m", "--api-key-env", "SEMAQ_TEST_UNSET_KEY")
	mustFailSemaq(t, unreachableURL, "not an http(s) URL", "worker", "--upstream", "localhost:8000", "--model", "m")
}

// `semaq worker --upstream sim` behind a broker answers completions on the
// broker's HTTP port, streamed and not.
func TestWorkerCommandServesGateway(t *testing.T) {
	srv := brokertest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	var stderr bytes.Buffer
	root := newRoot(strings.NewReader(""), io.Discard, &stderr)
	root.SetArgs([]string{"worker", "--server", srv.ClientURL(), "--upstream", "sim", "--model", "cli-sim", "--sim-tokens", "6", "--sim-seed", "4"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("worker: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("worker did not stop within 10s of its interrupt")
		}
	})

	base := "http://" + srv.HTTPAddr()
	post := func(stream bool) (int, string) {
		body := `{"model":"cli-sim","messages":[{"role":"user","content":"cli"}],"stream":` + map[bool]string{true: "true", false: "false"}[stream] + `}`
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	// The worker announces itself shortly after it starts.
	deadline := time.Now().Add(10 * time.Second)
	status, body := post(false)
	for status == http.StatusNotFound && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		status, body = post(false)
	}
	want := sim.Answer("user: cli", 6, 4)
	var out struct {
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
	}
	if status != 200 || json.Unmarshal([]byte(body), &out) != nil || out.Choices[0].Message.Content != want {
		t.Fatalf("non-streamed: %d %s; stderr %s", status, body, stderr.String())
	}
	status, body = post(true)
	if status != 200 || !strings.HasSuffix(body, "data: [DONE]\n\n") || !strings.Contains(body, `"content":"sum=`) {
		t.Fatalf("streamed: %d %s", status, body)
	}
}

func TestBenchTokensTiny(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tokens.json")
	r := runBench("tokens", "--tokens", "2000", "--streams", "4", "--stream-tokens", "20", "--rate", "50",
		"--duration", "400ms", "--answer-tokens", "3", "--json", file, "--quiet")
	if r.code != 0 {
		t.Fatalf("exit %d, stderr: %s", r.code, r.stderr)
	}
	for _, want := range []string{"one stream", "concurrent", "through the gateway", "overhead", "goals"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("table lacks %q:\n%s", want, r.stdout)
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Scenario string `json:"scenario"`
		Single   struct {
			Semaq float64 `json:"semaq_tokens_per_s"`
			Raw   float64 `json:"jetstream_tokens_per_s"`
		} `json:"single_stream"`
		Gateway struct {
			Requests int64 `json:"requests"`
			Errors   int64 `json:"errors"`
		} `json:"gateway"`
	}
	if err := json.Unmarshal(b, &rep); err != nil || rep.Scenario != "tokens" || rep.Single.Semaq <= 0 || rep.Single.Raw <= 0 ||
		rep.Gateway.Requests != 20 || rep.Gateway.Errors != 0 {
		t.Fatalf("report %+v %v", rep, err)
	}
	if r := runBench("tokens", "--streams", "0"); r.code == 0 || !strings.Contains(r.stderr, "--streams 0") {
		t.Fatalf("--streams 0: %+v", r)
	}
}

// `semaq worker --upstream sim` without --sim-tps streams at 50 tokens/s,
// so a streamed answer arrives token by token as a real model's does
// (with no pacing it came in one burst and streaming looked broken); a
// dead upstream stops the worker at once, saying which.
func TestWorkerCommandDefaults(t *testing.T) {
	srv := brokertest.Start(t)
	mustFailSemaq(t, srv.ClientURL(), "upstream http://127.0.0.1:1/v1 does not answer GET /models",
		"worker", "--upstream", "http://127.0.0.1:1/v1", "--model", "m")

	ctx, cancel := context.WithCancel(context.Background())
	var stderr bytes.Buffer
	root := newRoot(strings.NewReader(""), io.Discard, &stderr)
	root.SetArgs([]string{"worker", "--server", srv.ClientURL(), "--upstream", "sim", "--model", "paced", "--sim-tokens", "11"})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	})
	base := "http://" + srv.HTTPAddr()
	body := `{"model":"paced","messages":[{"role":"user","content":"x"}],"stream":true}`
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Post(base+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode == http.StatusNotFound && time.Now().Before(deadline) {
			resp.Body.Close()
			time.Sleep(20 * time.Millisecond) // polling until the worker is announced
			continue
		}
		// Ten tokens after the first at 50/s take at least 200ms.
		start := time.Now()
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if took := time.Since(start); resp.StatusCode != 200 || took < 190*time.Millisecond {
			t.Fatalf("status %d in %s (want paced at 50 tokens/s): %s", resp.StatusCode, took, b)
		}
		break
	}
}
