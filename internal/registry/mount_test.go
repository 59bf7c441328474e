package registry

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestRoutesOnSharedMux mounts the registry beside other endpoints, as the
// broker's HTTP front door does: unknown registry paths still answer in
// Confluent's error shape, so Confluent clients can report them.
func TestRoutesOnSharedMux(t *testing.T) {
	r, _ := newRegistry(t)
	mux := http.NewServeMux()
	r.Routes(mux)
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "front door 404", http.StatusNotFound)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, tc := range []struct {
		method, path string
		status       int
		code         int
	}{
		{"GET", "/subjects/a-value/metadata?key=owner", 404, 40400},
		{"GET", "/schemas/guids/0b5c3a1e", 404, 40400},
		{"PATCH", "/subjects/a/versions", 405, 40500},
		{"GET", "/elsewhere", 404, 0},
	} {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s %s: status %d, want %d (%s)", tc.method, tc.path, resp.StatusCode, tc.status, body)
			continue
		}
		var e struct {
			ErrorCode int `json:"error_code"`
		}
		_ = json.Unmarshal(body, &e)
		if tc.code != 0 && e.ErrorCode != tc.status {
			t.Errorf("%s %s: body %s is not Confluent's error shape", tc.method, tc.path, body)
		}
		if tc.code == 0 && e.ErrorCode != 0 {
			t.Errorf("%s %s: the registry answered a path outside its own: %s", tc.method, tc.path, body)
		}
	}
	resp, err := http.Get(srv.URL + "/contexts")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "[\".\"]\n" && string(body) != "[\".\"]" {
		t.Errorf("GET /contexts = %d %q", resp.StatusCode, body)
	}
}
