package gateway_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/sim"
	"github.com/semaq/semaq/internal/sse"
	"github.com/semaq/semaq/internal/worker"
)

func TestZZProbe(t *testing.T) {
	e := setup(t)
	e.startWorker(t, worker.Config{Upstream: "sim", Models: []string{"p"}, Sim: sim.Config{Tokens: 8}})
	ctx := context.Background()
	for i := range 30 {
		start := time.Now()
		resp := e.post(t, ctx, chatBody("p", "x", true, ""), nil)
		hdr := time.Since(start)
		r := sse.NewReader(resp.Body, 0)
		r.Next()
		first := time.Since(start)
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if i%5 == 0 {
			t.Logf("hdr %s first %s total %s", hdr, first, time.Since(start))
		}
	}
}
