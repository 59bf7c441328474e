//go:build unix

package proctest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// SemaQ's own state on a cluster (docs/cluster.md): a queue made without
// replicas (as a worker makes one), its lease store and the audit records
// are on every node of a three-node cluster, so killing any one node
// (SIGKILL, each in turn, started again before the next) loses no queued
// job, no lease and no audit record, and the other two go on serving
// them while it is down.
func TestProcessOwnStateSurvivesEachNodeKill(t *testing.T) {
	needProcesses(t)
	const jobs, held = 20, 5
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	admin := c.connect(0)
	if _, err := admin.AddQueue(ctx, semaq.QueueConfig{Name: "JOBS", Subjects: []string{"jobs.>"}, AckWait: 5 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	for i := range jobs {
		if _, err := admin.Publish(ctx, "jobs.x", []byte(`{}`), client.WithMsgID(fmt.Sprintf("j%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	worker := c.connect(1)
	taken, err := worker.Fetch(ctx, "JOBS", client.FetchMax(held))
	if err != nil || len(taken) != held {
		t.Fatalf("fetch: %d jobs, %v; want %d", len(taken), err, held)
	}
	for _, name := range []string{"A1", "A2", "A3"} {
		if _, err := admin.AddStream(ctx, semaq.StreamConfig{Name: name, Subjects: []string{"a." + name + ".>"}}); err != nil {
			t.Fatal(err)
		}
	}
	records := func(cl *client.Client) (int, error) {
		r, err := cl.Audit(ctx, semaq.AuditListRequest{Limit: semaq.AuditListMax})
		if err != nil {
			return 0, err
		}
		return len(r.Records), nil
	}
	want, err := records(admin)
	if err != nil || want < 4 {
		t.Fatalf("audit records before the kills: %d, %v; want the queue's and three streams'", want, err)
	}

	for i := range c.nodes {
		c.nodes[i].kill(t)
		t.Logf("killed %s", c.nodes[i].name)
		cl := c.connect((i + 1) % len(c.nodes))
		eventually(t, readyTimeout, fmt.Sprintf("the queue, its leases and the audit without %s", c.nodes[i].name), func() error {
			qi, err := cl.QueueInfo(ctx, "JOBS")
			if err != nil {
				return err
			}
			if st := qi.Status; st.Queued != jobs-held || st.Held != held {
				return fmt.Errorf("queued %d, held %d; want %d and %d", st.Queued, st.Held, jobs-held, held)
			}
			n, err := records(cl)
			if err != nil {
				return err
			}
			if n < want {
				return fmt.Errorf("%d audit records, want %d", n, want)
			}
			return nil
		})
		c.nodes[i].start(t)
		c.nodes[i].waitStarted(t, readyTimeout)
		c.waitWhole(nil)
	}
	// Every lease outlived every loss: the held jobs' answers are taken.
	for _, j := range taken {
		if err := j.Ack(ctx); err != nil {
			t.Fatalf("ack of %s after the kills: %v", j.ID, err)
		}
	}
	eventually(t, readyTimeout, "the acked jobs gone", func() error {
		qi, err := admin.QueueInfo(ctx, "JOBS")
		if err != nil {
			return err
		}
		if st := qi.Status; st.Queued != jobs-held || st.Held != 0 {
			return fmt.Errorf("queued %d, held %d; want %d and 0", st.Queued, st.Held, jobs-held)
		}
		return nil
	})
}
