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

// An upstream's message that already says "upstream" (another SemaQ
// gateway behind the worker, a proxy) is not prefixed a second time.
func TestUpstreamMessagesNotDoubled(t *testing.T) {
	h, err := newHTTPUpstream("http://127.0.0.1:8000/v1", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ got, want string }{
		{h.public(0, "upstream error: status 500"), "upstream error: status 500"},
		{h.public(0, "Upstream error: the model server failed"), "Upstream error: the model server failed"},
		{h.public(0, "context too long"), "upstream error: context too long"},
		{h.public(502, "upstream error: status 500"), "upstream error: status 502: upstream error: status 500"},
		{(&UpstreamError{Message: "upstream: connection refused"}).Error(), "upstream: connection refused"},
		{(&UpstreamError{Status: 200, Message: "upstream error: boom"}).Error(), "upstream error: boom"},
		{(&UpstreamError{Message: "dial tcp: refused"}).Error(), "upstream: dial tcp: refused"},
	} {
		if tc.got != tc.want {
			t.Errorf("%q, want %q", tc.got, tc.want)
		}
	}
}
