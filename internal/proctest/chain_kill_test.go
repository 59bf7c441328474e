//go:build unix

package proctest

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/provenance"
	"github.com/semaq/semaq/semaq"
)

// A session's chain through a SIGKILL of the node leading its stream: two
// publishers on two nodes feed one session of a signed R3 stream, each
// message with a Nats-Msg-Id and published again until acknowledged; the
// leader is killed and started again. Afterwards the session exported
// through the restarted node verifies offline against the nodes' keys, and
// holds every acknowledged message exactly once.
func TestProcessChainSurvivesLeaderKill(t *testing.T) {
	needProcesses(t)
	const per, killAt = 300, 100
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, err := c.connect(0).AddStream(ctx, semaq.StreamConfig{Name: "CH", Subjects: []string{"ch.>"}, Replicas: 3, Provenance: semaq.ProvenanceSigned}); err != nil {
		t.Fatal(err)
	}
	leader := c.streamLeader("CH")
	var (
		mu    sync.Mutex
		acked = map[string]bool{}
		wg    sync.WaitGroup
	)
	for w := range 2 {
		node := (leader + 1 + w) % 3
		cl := c.connect(node)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range per {
				id := fmt.Sprintf("w%d-%d", w, i)
				for ctx.Err() == nil {
					m := nats.NewMsg(fmt.Sprintf("ch.w%d", w))
					m.Data = []byte(id)
					m.Header.Set(semaq.HdrSession, "s")
					m.Header.Set(semaq.HdrMsgID, id)
					// Each publish has its own deadline: a message taken by
					// the killed node's ingress is never answered.
					pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
					_, err := cl.PublishMsg(pctx, m)
					pcancel()
					if err == nil {
						break
					}
					time.Sleep(20 * time.Millisecond) // a publisher's retry pace, not synchronisation
				}
				mu.Lock()
				acked[id] = true
				mu.Unlock()
			}
		}()
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	eventually(t, time.Minute, fmt.Sprintf("%d acknowledged publishes", killAt), func() error {
		if n := count(); n < killAt {
			return fmt.Errorf("%d so far", n)
		}
		return nil
	})
	c.nodes[leader].kill(t)
	t.Logf("killed %s, the leader of CH, after %d acknowledged publishes", c.nodes[leader].name, count())
	c.restart(leader)
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatalf("publishing: %v (%d acknowledged)", ctx.Err(), count())
	}

	rep, links := exportChain(ctx, t, c.connect(leader), "CH", "s", 2*per)
	t.Logf("%s", rep)
	seen := map[string]int{}
	for _, data := range links {
		seen[string(data)]++
	}
	for id := range acked {
		if seen[id] != 1 {
			t.Errorf("acknowledged message %s is in the chain %d times", id, seen[id])
		}
	}
	if len(seen) != 2*per {
		t.Fatalf("%d distinct messages in the chain, want %d", len(seen), 2*per)
	}
}

// exportChain exports session's chain of stream through cl once it holds
// want links, verifies it offline against the nodes' keys, and returns the
// report and the links' payloads in chain order.
func exportChain(ctx context.Context, t *testing.T, cl *client.Client, stream, session string, want uint64) (*provenance.Report, [][]byte) {
	t.Helper()
	var buf bytes.Buffer
	eventually(t, time.Minute, fmt.Sprintf("an export of %d links of session %s", want, session), func() error {
		buf.Reset()
		head, err := cl.ExportProvenance(ctx, stream, "", session, &buf)
		if err != nil {
			return err
		}
		if head.Links != want {
			return fmt.Errorf("%d links, want %d", head.Links, want)
		}
		return nil
	})
	keys, err := cl.ProvenanceKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var trusted []ed25519.PublicKey
	for _, k := range keys {
		trusted = append(trusted, ed25519.PublicKey(k.PublicKey))
	}
	rep, err := provenance.Verify(bytes.NewReader(buf.Bytes()), provenance.VerifyOptions{TrustedKeys: trusted})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("the chain: %s", rep)
	}
	rd, err := provenance.NewReader(bytes.NewReader(buf.Bytes()), provenance.ReaderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var links [][]byte
	for {
		l, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return rep, links
		}
		if err != nil {
			t.Fatal(err)
		}
		links = append(links, l.Data)
	}
}
