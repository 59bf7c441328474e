package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/worker"
	"github.com/semaq/semaq/semaq"
)

// With auth on, a worker with the worker role serves a queue its glob
// matches, and a service with the model's subject asks and reads the
// answer's token stream: the roles are enough for the inference path.
func TestWorkerRoleServesWithAuth(t *testing.T) {
	srv := brokertest.Start(t, brokertest.WithAuth)
	admin := brokertest.ConnectKey(t, srv, brokertest.AdminKey(t, srv))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const model = "m1"
	if _, err := admin.AddQueue(ctx, semaq.QueueConfig{Name: semaq.InferQueue(model), Subjects: []string{semaq.InferSubject(model)}}); err != nil {
		t.Fatal(err)
	}
	work, err := admin.AddUser(ctx, semaq.UserAddRequest{Name: "gpu-7", Role: semaq.RoleWorker, Queues: []string{"INFER_*"}})
	if err != nil {
		t.Fatal(err)
	}
	app, err := admin.AddUser(ctx, semaq.UserAddRequest{Name: "app", Tenant: "acme", Role: semaq.RoleService, Subjects: []string{"ai.infer.>"}})
	if err != nil {
		t.Fatal(err)
	}
	wc := brokertest.ConnectKey(t, srv, work.Key)
	w, err := worker.New(wc, worker.Config{Upstream: "sim", Models: []string{model}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- w.RunReady(wctx, func() { close(ready) }) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		done <- nil
		t.Fatalf("worker stopped: %v", err)
	}
	c := brokertest.ConnectKey(t, srv, app.Key)
	text, terr := ask(t, c, model, []byte(`{"model":"m1","messages":[{"role":"user","content":"hi"}]}`))
	if terr != nil || text == "" {
		t.Fatalf("answer %q, error %v", text, terr)
	}
}
