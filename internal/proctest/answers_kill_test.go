//go:build unix

package proctest

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// Answers chained through a SIGKILL of the node leading SQ_TOKENS (where
// the durable consumer of terminal records lives): a publisher on one node
// sends the requests of one session to a queue that chains its answers, a
// worker on another answers each with a token stream; the third node is
// killed mid-way and started again. Afterwards every request whose stream
// ended has its answer in the session's chain exactly once, no other has
// one, and the exported chain verifies against the nodes' keys.
func TestProcessAnswersSurviveNodeKill(t *testing.T) {
	needProcesses(t)
	const n, killAt = 60, 20
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	admin := c.connect(0)
	if _, err := admin.AddStream(ctx, semaq.StreamConfig{Name: "AG", Subjects: []string{"ag.>"}, Replicas: 3, Provenance: semaq.ProvenanceSigned}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AddQueue(ctx, semaq.QueueConfig{Name: "ASK", Subjects: []string{"ask.>"}, Replicas: 3,
		AckWait: 2 * time.Second, MaxDeliver: 3, ChainAnswers: "ag.answers"}); err != nil {
		t.Fatal(err)
	}
	victim := c.streamLeader(semaq.TokenStream)
	pubNode, workNode := (victim+1)%3, (victim+2)%3
	pub, work := c.connect(pubNode), c.connect(workNode)

	var answered sync.Map // request id -> true once its job is acked
	count := func() int {
		k := 0
		answered.Range(func(any, any) bool { k++; return true })
		return k
	}
	published := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer close(published)
		for i := range n {
			id := fmt.Sprintf("q-%d", i)
			for ctx.Err() == nil {
				pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
				_, err := pub.Publish(pctx, "ask.q", []byte(`{"prompt":"?"}`), client.WithMsgID(id), client.WithSession("s"))
				pcancel()
				if err == nil {
					break
				}
				time.Sleep(20 * time.Millisecond) // a publisher's retry pace, not synchronisation
			}
		}
	}()
	go func() {
		defer wg.Done()
		idle := 0
		for ctx.Err() == nil {
			fctx, fcancel := context.WithTimeout(ctx, 5*time.Second)
			jobs, err := work.Fetch(fctx, "ASK", client.FetchMax(1), client.FetchWait(time.Second))
			fcancel()
			if err == nil && len(jobs) == 0 {
				select {
				case <-published:
					if idle++; idle >= 5 {
						return // published, and nothing left to serve
					}
				default:
				}
			}
			for _, j := range jobs {
				idle = 0
				// A job whose stream could not be written (the node went
				// away under it) is left to its redelivery.
				jctx, jcancel := context.WithTimeout(ctx, 20*time.Second)
				if serve(jctx, j) == nil {
					answered.Store(j.ID, true)
				}
				jcancel()
			}
		}
	}()
	eventually(t, time.Minute, fmt.Sprintf("%d answered requests", killAt), func() error {
		if k := count(); k < killAt {
			return fmt.Errorf("%d so far", k)
		}
		return nil
	})
	c.nodes[victim].kill(t)
	t.Logf("killed %s, the leader of %s, after %d answered requests", c.nodes[victim].name, semaq.TokenStream, count())
	c.restart(victim)
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("serving: %v (%d answered)", ctx.Err(), count())
	}

	// The requests whose streams ended: each must have its answer.
	ended := map[string]bool{}
	for i := range n {
		id := fmt.Sprintf("q-%d", i)
		st, err := admin.TokenStatus(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Ended {
			ended[id] = true
		}
	}
	if len(ended) < count() {
		t.Fatalf("%d streams ended, but %d requests were answered", len(ended), count())
	}
	rep, links := exportChain(ctx, t, c.connect(victim), "AG", "s", uint64(len(ended)))
	t.Logf("%s; %d of %d requests answered by the worker, %d streams ended", rep, count(), n, len(ended))
	seen := map[string]int{}
	for i, data := range links {
		var rec semaq.AnswerRecord
		if err := json.Unmarshal(data, &rec); err != nil || rec.Text != "answer to "+rec.RequestID {
			t.Fatalf("link %d: %s (%v)", i+1, data, err)
		}
		seen[rec.RequestID]++
	}
	for id := range ended {
		if seen[id] != 1 {
			t.Errorf("request %s's stream ended; its answer is in the chain %d times", id, seen[id])
		}
	}
	for id := range seen {
		if !ended[id] {
			t.Errorf("request %s has an answer in the chain, but its stream did not end", id)
		}
	}
}

// serve answers job j with a token stream and acks it.
func serve(ctx context.Context, j *client.Job) error {
	w, err := j.OpenTokenStream(ctx)
	if err != nil {
		return err
	}
	if err := w.Write(ctx, "answer to "+j.ID); err != nil {
		return err
	}
	if err := w.Close(ctx, semaq.TokenFinal{FinishReason: "stop"}); err != nil {
		return err
	}
	return j.Ack(ctx)
}
