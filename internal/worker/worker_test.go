package worker

import (
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no upstream", Config{Models: []string{"m"}}, "--upstream is required"},
		{"no model", Config{Upstream: "sim"}, "at least one --model"},
		{"bad model", Config{Upstream: "sim", Models: []string{"a b"}}, "--model"},
		{"twice", Config{Upstream: "sim", Models: []string{"m", "m"}}, "given twice"},
		{"concurrency", Config{Upstream: "sim", Models: []string{"m"}, Concurrency: -1}, "--concurrency"},
		{"ack wait", Config{Upstream: "sim", Models: []string{"m"}, AckWait: 10}, "ack wait"},
		{"storage", Config{Upstream: "sim", Models: []string{"m"}, QueueStorage: "disk"}, "queue storage"},
		{"model label", Config{Upstream: "sim", Models: []string{"m"}, Labels: map[string]string{"model": "x"}}, "--model"},
		{"bad id", Config{Upstream: "sim", Models: []string{"m"}, ID: "a.b"}, "id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
	ok := Config{Upstream: "sim", Models: []string{"meta-llama/Llama-3.1-8B"}}
	if err := ok.Validate(); err != nil || ok.Concurrency != 4 || ok.QueueStorage != "memory" || !strings.HasPrefix(ok.ID, "worker-") {
		t.Fatalf("defaults: %+v %v", ok, err)
	}
}

func TestUpstreamURL(t *testing.T) {
	cases := map[string]string{
		"http://127.0.0.1:8000/v1":   "http://127.0.0.1:8000/v1/chat/completions",
		"http://127.0.0.1:8000/v1/":  "http://127.0.0.1:8000/v1/chat/completions",
		"http://127.0.0.1:11434":     "http://127.0.0.1:11434/v1/chat/completions",
		"https://api.openai.com/v1":  "https://api.openai.com/v1/chat/completions",
		"http://h/openai/deployment": "http://h/openai/deployment/chat/completions",
	}
	for in, want := range cases {
		u, err := newHTTPUpstream(in, "", nil)
		if err != nil || u.endpoint != want {
			t.Errorf("%s: %v %v, want %s", in, u, err, want)
		}
	}
	for _, bad := range []string{"localhost:8000", "ftp://x", "://", "http://"} {
		if _, err := newHTTPUpstream(bad, "", nil); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
