package worker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
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

// With auth on, a worker given a request another worker left mid-stream
// ends the stream with worker_lost: a worker may ask how far any
// tenant's stream got (the status API), though it may not read it, so the
// requesting tenant's reader gets the tokens so far and then that error.
func TestWorkerEndsALostStreamWithAuth(t *testing.T) {
	srv := brokertest.Start(t, brokertest.WithAuth)
	admin := brokertest.ConnectKey(t, srv, brokertest.AdminKey(t, srv))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const model = "m2"
	if _, err := admin.AddQueue(ctx, semaq.QueueConfig{Name: semaq.InferQueue(model), Subjects: []string{semaq.InferSubject(model)},
		AckWait: time.Second}); err != nil {
		t.Fatal(err)
	}
	work, err := admin.AddUser(ctx, semaq.UserAddRequest{Name: "gpu-8", Role: semaq.RoleWorker, Queues: []string{"INFER_*"}})
	if err != nil {
		t.Fatal(err)
	}
	app, err := admin.AddUser(ctx, semaq.UserAddRequest{Name: "app", Tenant: "acme", Role: semaq.RolePublisher, Subjects: []string{"ai.infer.>"}})
	if err != nil {
		t.Fatal(err)
	}
	c := brokertest.ConnectKey(t, srv, app.Key)
	const id = "chatcmpl-lost-1"
	if _, err := c.Publish(ctx, semaq.InferSubject(model), []byte(`{"model":"m2","messages":[{"role":"user","content":"hi"}]}`),
		client.WithModel(model), client.WithMsgID(id)); err != nil {
		t.Fatal(err)
	}
	// The first worker streams two tokens and goes without a word.
	first := brokertest.ConnectKey(t, srv, work.Key)
	jobs, err := first.Fetch(ctx, semaq.InferQueue(model), client.FetchWait(10*time.Second)) // indexed a moment after its ack
	if err != nil || len(jobs) != 1 {
		t.Fatalf("fetch: %d jobs, %v", len(jobs), err)
	}
	tw, err := jobs[0].OpenTokenStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"Hel", "lo"} {
		if err := tw.Write(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	for {
		st, err := c.TokenStatus(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Offset == 2 {
			break // both tokens stored
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the first worker's tokens were not stored: %+v", st)
		case <-time.After(5 * time.Millisecond): // polling the store, not synchronising
		}
	}
	first.Close()

	wc := brokertest.ConnectKey(t, srv, work.Key)
	w, err := worker.New(wc, worker.Config{Upstream: "sim", Models: []string{model}})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("worker: %v", err)
		}
	}()
	rd, err := c.ReadTokens(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	res, err := rd.Collect(ctx)
	if !errors.Is(err, &semaq.TokenError{Code: semaq.TokenErrWorkerLost}) {
		t.Fatalf("reader: %+v, %v; want the tokens so far, then worker_lost", res, err)
	}
	if st := w.Stats(); st.Lost != 1 {
		t.Fatalf("worker stats %+v, want one lost stream", st)
	}
}

// A worker key cannot make its model's queue: the worker says what an
// admin must run instead of the NATS server's refusal alone.
func TestWorkerWithoutItsQueueSaysWhatToDo(t *testing.T) {
	srv := brokertest.Start(t, brokertest.WithAuth)
	admin := brokertest.ConnectKey(t, srv, brokertest.AdminKey(t, srv))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	work, err := admin.AddUser(ctx, semaq.UserAddRequest{Name: "gpu-8", Role: semaq.RoleWorker, Queues: []string{"INFER_*"}})
	if err != nil {
		t.Fatal(err)
	}
	w, err := worker.New(brokertest.ConnectKey(t, srv, work.Key), worker.Config{Upstream: "sim", Models: []string{"llama3"}})
	if err != nil {
		t.Fatal(err)
	}
	err = w.RunReady(ctx, func() { t.Error("the worker got ready without a queue") })
	want := "an admin must run `semaq queue add INFER_llama3 --subjects " + semaq.InferSubject("llama3") + "`"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("worker without its queue: %v, want %q", err, want)
	}
}
