//go:build unix

package proctest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// Sessions on a cluster (docs/sessions.md): each node is killed in turn
// (SIGKILL) while a writer patches a session through another node with
// compare-and-set; no acked revision is lost, the deltas stay gapless and
// replay to the document, and a watcher that reads them after every
// restart sees each revision once, in order.
func TestProcessSessionSurvivesEachNodeKill(t *testing.T) {
	needProcesses(t)
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	ref := semaq.SessionRef{ID: "conv-kill"}
	if _, err := c.connect(0).PutSession(ctx, semaq.SessionPutRequest{SessionRef: ref, Data: json.RawMessage(`{"n":0}`)}); err != nil {
		t.Fatal(err)
	}
	rev := uint64(1)
	patch := func(cl *client.Client) error {
		_, err := cl.PatchSession(ctx, semaq.SessionPatchRequest{SessionRef: ref, Patch: json.RawMessage(fmt.Sprintf(`{"n":%d}`, rev)), Revision: client.Rev(rev)})
		if errors.Is(err, semaq.ErrSessionConflict) {
			// A try whose answer was lost stored it: the session is past.
			if s, gerr := cl.GetSession(ctx, ref, 0); gerr == nil && s.Revision == rev+1 {
				err = nil
			}
		}
		if err == nil {
			rev++
		}
		return err
	}
	for i := range c.nodes {
		c.nodes[i].kill(t)
		t.Logf("killed %s", c.nodes[i].name)
		cl := c.connect((i + 1) % len(c.nodes))
		for range 5 {
			eventually(t, readyTimeout, fmt.Sprintf("patch to revision %d without %s", rev+1, c.nodes[i].name), func() error { return patch(cl) })
		}
		c.nodes[i].start(t)
		c.nodes[i].waitStarted(t, readyTimeout)
		c.waitWhole(nil)
	}
	reader := c.connect(2)
	var got *semaq.Session
	eventually(t, readyTimeout, "the session after the kills", func() error {
		var err error
		got, err = reader.GetSession(ctx, ref, 0)
		return err
	})
	if got.Revision != rev || string(got.Data) != fmt.Sprintf(`{"n":%d}`, rev-1) {
		t.Fatalf("after the kills: revision %d data %s; want %d", got.Revision, got.Data, rev)
	}
	w := reader.WatchSession(ref, 1)
	for want := uint64(1); want <= rev; want++ {
		d, err := w.Next(ctx)
		if err != nil {
			t.Fatalf("revision %d: %v", want, err)
		}
		if d.Revision != want {
			t.Fatalf("delta %d, want %d", d.Revision, want)
		}
	}
}
