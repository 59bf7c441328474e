package broker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// A queue whose subjects overlap another stream's is refused with an error
// that names the other stream, whether it is a queue or not, and the
// subject they share: "subjects overlap with an existing stream" left the
// user guessing which.
func TestQueueOverlapNamesTheOtherStream(t *testing.T) {
	srv := brokertest.Start(t)
	c := brokertest.Connect(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addQueue(t, c, semaq.QueueConfig{Name: "INFER", Subjects: []string{"ai.infer.>"}})
	brokertest.AddStream(t, c, "CHAT", "chat.>")

	cases := []struct {
		name, subject, want string
	}{
		{"INFER_llama3", "ai.infer.llama3", "queue INFER_llama3: subject ai.infer.llama3 is already captured by queue INFER (pattern ai.infer.>)"},
		{"ALL_AI", "ai.>", "queue ALL_AI: subject ai.> overlaps queue INFER (pattern ai.infer.>)"},
		{"CHATQ", "chat.req", "queue CHATQ: subject chat.req is already captured by stream CHAT (pattern chat.>)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.AddQueue(ctx, semaq.QueueConfig{Name: tc.name, Subjects: []string{tc.subject}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("AddQueue = %v, want %q", err, tc.want)
			}
			if strings.Count(err.Error(), "queue "+tc.name+":") != 1 {
				t.Errorf("doubled prefix: %v", err)
			}
		})
	}
}

// A fetch with a subject filter takes only the requests published on
// subjects it matches: a worker of one model on a queue shared by several
// models (ai.infer.>) gets its model's requests and no other's, however
// long they wait (affinity would hand them over after AffinityWait).
func TestFetchSubjectFilter(t *testing.T) {
	srv := brokertest.Start(t)
	c := brokertest.Connect(t, srv)
	addQueue(t, c, semaq.QueueConfig{Name: "SHARED", Subjects: []string{"ai.infer.>"}, AffinityWait: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range []string{"ai.infer.mistral", "ai.infer.llama3", "ai.infer.mistral"} {
		if _, err := c.Publish(ctx, s, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	waitQueued(t, c, "SHARED", 3)

	jobs := fetch(t, c, "SHARED", client.FetchMax(8), client.FetchSubject("ai.infer.llama3"),
		client.FetchLabels(map[string]string{"model": "llama3"}))
	if len(jobs) != 1 || jobs[0].Subject != "ai.infer.llama3" {
		t.Fatalf("llama3 fetch got %d jobs %v", len(jobs), subjectsOf(jobs))
	}
	ackAll(t, jobs)
	// Nothing left for llama3: a waiting fetch ends empty, and the
	// mistral requests stay queued.
	jobs = fetch(t, c, "SHARED", client.FetchSubject("ai.infer.llama3"), client.FetchWait(50*time.Millisecond))
	if len(jobs) != 0 {
		t.Fatalf("llama3 fetch got %v", subjectsOf(jobs))
	}
	waitQueued(t, c, "SHARED", 2)

	// A parked fetch is served only by a request it matches.
	c2 := brokertest.Connect(t, srv) // another worker id: the queue counts it
	got := make(chan []*client.Job, 1)
	go func() {
		j, _ := c2.Fetch(ctx, "SHARED", client.FetchSubject("ai.infer.qwen"), client.FetchWait(5*time.Second))
		got <- j
	}()
	waitFor(t, "the qwen fetch parked", func() bool {
		qi, err := c.QueueInfo(ctx, "SHARED")
		return err == nil && qi.Status.Workers >= 2
	})
	if _, err := c.Publish(ctx, "ai.infer.qwen", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if j := <-got; len(j) != 1 || j[0].Subject != "ai.infer.qwen" {
		t.Fatalf("qwen fetch got %v", subjectsOf(j))
	} else {
		ackAll(t, j)
	}

	// Wildcards work; no filter takes anything.
	jobs = fetch(t, c, "SHARED", client.FetchMax(8), client.FetchSubject("ai.infer.*"))
	if len(jobs) != 2 {
		t.Fatalf("wildcard fetch got %v", subjectsOf(jobs))
	}
	ackAll(t, jobs)

	for _, bad := range []string{"ai infer", "ai..x", strings.Repeat("a", 300)} {
		if _, err := c.Fetch(ctx, "SHARED", client.FetchSubject(bad)); err == nil {
			t.Errorf("subject %q accepted", bad)
		}
	}
	_, err := c.Fetch(ctx, "SHARED", func(r *semaq.FetchRequest) error { r.Subject = "ai..x"; return nil })
	if !errors.Is(err, semaq.ErrBadRequest) {
		t.Errorf("broker took a bad subject filter: %v", err)
	}
}

func subjectsOf(jobs []*client.Job) []string {
	var out []string
	for _, j := range jobs {
		out = append(out, j.Subject)
	}
	return out
}

// TestStreamOverlapNamesTheOtherStream: a stream whose subjects another
// stream or queue captures is refused naming both and the subject.
func TestStreamOverlapNamesTheOtherStream(t *testing.T) {
	s := brokertest.Start(t)
	c := brokertest.Connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.AddQueue(ctx, semaq.QueueConfig{Name: "INFER", Subjects: []string{"ai.infer.>"}}); err != nil {
		t.Fatal(err)
	}
	_, err := c.AddStream(ctx, semaq.StreamConfig{Name: "AI", Subjects: []string{"ai.>"}})
	if err == nil || !strings.Contains(err.Error(), "stream AI") || !strings.Contains(err.Error(), "queue INFER") || !strings.Contains(err.Error(), "ai.infer.>") {
		t.Fatalf("overlapping stream: %v, want an error naming stream AI, queue INFER and the pattern", err)
	}
	_, err = c.AddStream(ctx, semaq.StreamConfig{Name: "AI2", Subjects: []string{"ai.infer.x"}})
	if err == nil || !strings.Contains(err.Error(), "already captured by queue INFER") {
		t.Fatalf("captured subject: %v", err)
	}
}
