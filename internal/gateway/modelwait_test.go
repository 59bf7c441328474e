package gateway_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/gateway"
	"github.com/semaq/semaq/internal/worker"
)

// A request for a model whose worker is starting waits for it to announce
// itself (gateway_model_wait) instead of a 404: `semaq worker … &` then
// a request works as pasted.
func TestRequestWaitsForAStartingWorker(t *testing.T) {
	t.Parallel()
	e := setupWait(t, gateway.DefaultModelWait)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	answered := make(chan int, 1)
	go func() {
		resp := e.post(t, ctx, chatBody("late", "hi", false, ""), nil)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"late"}})
	if code := <-answered; code != http.StatusOK {
		t.Fatalf("a request made while its worker started: %d, want 200", code)
	}
}
