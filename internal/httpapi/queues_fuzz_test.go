package httpapi

import (
	"errors"
	"testing"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/httpx"
	"github.com/semaq/semaq/semaq"
)

func FuzzQueueFetchBody(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"max":8,"max_tokens":4096,"wait_ms":5000,"labels":{"model":"llama3"}}`,
		`{"worker":"gpu-1"}`, `{"worker":"bad name"}`, `{"max":-1}`, `{"max":2000}`, `{"wait_ms":-1}`, `{"x":1}`, `[]`, `{"max":1} {}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		opts, err := parseHTTPFetch(body)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		// Whatever the front door accepts, the SDK's options accept too.
		var req semaq.FetchRequest
		for _, o := range opts {
			if err := o(&req); err != nil {
				t.Fatalf("accepted body %q gives a failing option: %v", body, err)
			}
		}
		if err := req.Check(); err != nil {
			t.Fatalf("accepted body %q: %v", body, err)
		}
	})
}

// parseHTTPFetch reads a fetch body as queueFetch does (decodeBody, then
// fetchOptions). An empty body is a fetch of one job without waiting.
func parseHTTPFetch(body []byte) ([]client.FetchOption, error) {
	var f httpFetch
	if err := httpx.UnmarshalStrict(body, &f); err != nil && !errors.Is(err, httpx.ErrEmpty) {
		return nil, err
	}
	return fetchOptions(f)
}
