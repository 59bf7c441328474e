package broker_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// A token stream being written when the writer's node dies (docs/cluster.md):
// SQ_TOKENS is replicated, so what was stored stays; the worker reconnects
// to another node, whose relay knows the job's binding, and either
// continues the stream or, if its writer lost records on the way, ends it
// with an error record after the last stored one. A reader on another node
// gets the whole answer or that error — never a gap, never silence.
func TestClusterTokenStreamWritersNodeLost(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	admin := brokertest.Connect(t, c.Node(0))
	if _, err := admin.AddQueue(ctx, semaq.QueueConfig{Name: "LQ", Subjects: []string{"ask.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	js := clusterJS(t, c.Node(0))
	lead := queueLeader(t, c, js, "LQ")
	far := others(c, lead)
	doomed := c.Index(far[0].Config().Name)
	workC, readC := brokertest.Connect(t, far[0]), brokertest.Connect(t, far[1])

	const id = "survive-1"
	c.Eventually(30*time.Second, "the ingress to take "+id, func() error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := readC.Publish(ctx, "ask.x", []byte(`{}`), client.WithMsgID(id), client.WithTenant("acme"))
		return err
	})
	rd, err := readC.ReadTokens(ctx, id, client.ForTenant("acme"), client.WithGapTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	waitQueued(t, workC, "LQ", 1)
	jobs := fetch(t, workC, "LQ")
	if len(jobs) != 1 {
		t.Fatalf("fetched %d jobs", len(jobs))
	}
	job := jobs[0]
	w, err := job.OpenTokenStream(ctx, client.WithWriteWindow(1))
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	for _, tok := range []string{"a", "b", "c"} {
		if err := w.Write(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	for got.Len() < 3 {
		ch, err := rd.Next(ctx)
		if err != nil {
			t.Fatalf("reading the first tokens: %v", err)
		}
		got.WriteString(ch.Text)
	}

	c.Stop(doomed)

	// The worker goes on through whichever node its connection reaches.
	werr := func() error {
		for _, tok := range []string{"d", "e"} {
			if err := w.Write(ctx, tok); err != nil {
				return err
			}
		}
		return w.Close(ctx, semaq.TokenFinal{FinishReason: "stop"})
	}()
	if werr != nil {
		t.Logf("writer after its node stopped: %v; ending the stream with an error", werr)
		c.Eventually(60*time.Second, "the worker to end its stream through another node", func() error {
			actx, acancel := context.WithTimeout(ctx, 5*time.Second)
			defer acancel()
			return job.AbortTokenStream(actx, &semaq.TokenError{Code: "worker_lost", Message: "the writer's node stopped"})
		})
	}

	for {
		ch, err := rd.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if werr != nil && errors.Is(err, semaq.ErrTokenAborted) {
				t.Logf("stream ended with the writer's error after %q", got.String())
				return
			}
			t.Fatalf("reader after %q: %v; want the rest of the answer or the writer's error", got.String(), err)
		}
		got.WriteString(ch.Text)
	}
	if werr != nil {
		t.Fatalf("the writer failed (%v) but the stream ended normally with %q", werr, got.String())
	}
	if got.String() != "abcde" {
		t.Fatalf("read %q, want %q", got.String(), "abcde")
	}
}
