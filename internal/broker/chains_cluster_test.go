package broker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// Session chains on a three-node cluster: publishers on every node race
// on one session of an R3 stream, and the chain is one, whole, in stream
// order; a strictly ordered session refuses on one node what another
// node's last accepted message rules out, which no node holds in memory.
func TestClusterSessionChains(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c0 := brokertest.Connect(t, c.Node(0))
	if _, err := c0.AddStream(ctx, semaq.StreamConfig{Name: "CHAIN", Subjects: []string{"chain.>"}, Replicas: 3, Provenance: semaq.ProvenanceSigned}); err != nil {
		t.Fatal(err)
	}
	if _, err := c0.AddStream(ctx, semaq.StreamConfig{Name: "ORD", Subjects: []string{"ord.>"}, Replicas: 3, SessionOrder: semaq.SessionOrderStrict}); err != nil {
		t.Fatal(err)
	}
	clients := make([]*client.Client, c.N())
	for i, s := range c.Nodes() {
		clients[i] = brokertest.Connect(t, s)
		c.Eventually(30*time.Second, fmt.Sprintf("node %d to serve ORD and CHAIN", i), func() error {
			if _, err := clients[i].Publish(ctx, "chain.warm", []byte("{}")); err != nil {
				return err
			}
			_, err := clients[i].Publish(ctx, "ord.warm", []byte("{}"))
			return err
		})
	}

	const per = 30
	var wg sync.WaitGroup
	errs := make(chan error, c.N())
	for i, cl := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range per {
				if _, err := cl.Publish(ctx, fmt.Sprintf("chain.n%d", i), []byte(fmt.Sprintf(`{"node":%d,"k":%d}`, i, k)), client.WithSession("shared")); err != nil {
					errs <- fmt.Errorf("node %d, message %d: %w", i, k, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	leader := c.StreamLeader("CHAIN")
	msgs := storedChain(t, c.Node(leader), "CHAIN", "", "shared")
	if len(msgs) != per*c.N() {
		t.Fatalf("%d messages of the shared session stored, want %d", len(msgs), per*c.N())
	}
	checkLinks(t, "CHAIN", msgs)
	// Each publisher's messages keep their order within the chain.
	next := make([]int, c.N())
	for _, m := range msgs {
		var node, k int
		if _, err := fmt.Sscanf(string(m.Data), `{"node":%d,"k":%d}`, &node, &k); err != nil {
			t.Fatal(err)
		}
		if k != next[node] {
			t.Fatalf("node %d's message %d stored where %d was due", node, k, next[node])
		}
		next[node]++
	}
	if h := provenanceHead(t, clients[(leader+1)%c.N()], "CHAIN", "", "shared"); h.Links != uint64(per*c.N()) || h.Hash != msgs[len(msgs)-1].Header.Get("AI-Hash") {
		t.Fatalf("head read through another node: %+v", h)
	}

	// Exported through any node, the chain verifies offline, signed by
	// the nodes whose ingress took its messages: the ingresses are one
	// queue group, so a message is taken, chained and signed by any node.
	rep, hdr := exportVerified(ctx, t, clients[(leader+2)%c.N()], "CHAIN", "", "shared")
	if rep.Links != uint64(per*c.N()) {
		t.Fatalf("%q: want %d links", rep, per*c.N())
	}
	nodes := map[string]bool{}
	for _, k := range hdr.Keys {
		nodes[k.Node] = true
	}
	if len(hdr.Keys) != c.N() || !nodes["n1"] || !nodes["n2"] || !nodes["n3"] {
		t.Fatalf("the export lists keys %+v, want n1's, n2's and n3's", hdr.Keys)
	}
	if len(rep.Signers) < 2 {
		t.Fatalf("links through three nodes signed by %v only", rep.SignerNodes)
	}

	pub := func(i, sec int) error {
		_, err := clients[i].Publish(ctx, "ord.t", []byte("{}"), client.WithSession("o"), client.WithHeader(semaq.HdrTimestamp, ts(sec)))
		return err
	}
	if err := pub(0, 10); err != nil {
		t.Fatal(err)
	}
	if err := pub(1, 5); !errors.Is(err, semaq.ErrSessionOrder) || !strings.Contains(err.Error(), "last accepted "+ts(10)) {
		t.Fatalf("node 1 after node 0's %s: %v", ts(10), err)
	}
	if err := pub(2, 11); err != nil {
		t.Fatal(err)
	}
	if err := pub(0, 11); !errors.Is(err, semaq.ErrSessionOrder) {
		t.Fatalf("node 0 after node 2's %s: %v", ts(11), err)
	}

	// Answers of a queue chaining into CHAIN: requests of the session
	// published through one node, served by a worker on another that does
	// not dispatch the queue (its relay learns the binding from the
	// dispatcher's node), each answer chained once, in order.
	if _, err := c0.AddQueue(ctx, semaq.QueueConfig{Name: "ASK", Subjects: []string{"ask.>"}, Replicas: 3, ChainAnswers: "chain.answers"}); err != nil {
		t.Fatal(err)
	}
	lead := queueLeader(t, c, clusterJS(t, c.Node(0)), "ASK")
	far := others(c, lead)
	pubC, workC := brokertest.Connect(t, far[0]), brokertest.Connect(t, far[1])
	const asks = 3
	for k := range asks {
		id := fmt.Sprintf("q-%d", k)
		c.Eventually(30*time.Second, "a far node's ingress to take "+id, func() error {
			_, err := pubC.Publish(ctx, "ask.q", []byte(`{"prompt":"?"}`), client.WithMsgID(id), client.WithSession("shared"))
			return err
		})
		waitQueued(t, workC, "ASK", 1)
		serveAnswer(ctx, t, workC, "ASK", id, []string{"answer", fmt.Sprintf(" %d", k)})
	}
	want := uint64(per*c.N() + asks)
	c.Eventually(30*time.Second, "the answers in the session's chain", func() error {
		if h := provenanceHead(t, clients[lead], "CHAIN", "", "shared"); h.Links != want {
			return fmt.Errorf("%d links", h.Links)
		}
		return nil
	})
	msgs = storedChain(t, c.Node(c.StreamLeader("CHAIN")), "CHAIN", "", "shared")
	checkLinks(t, "CHAIN", msgs)
	for k, m := range msgs[per*c.N():] {
		if of := m.Header.Get(semaq.HdrAnswerOf); of != fmt.Sprintf("q-%d", k) || !strings.Contains(string(m.Data), fmt.Sprintf(`"text":"answer %d"`, k)) {
			t.Fatalf("link %d: the answer of %q: %s", per*c.N()+k+1, of, m.Data)
		}
	}
	if rep, _ := exportVerified(ctx, t, pubC, "CHAIN", "", "shared"); rep.Links != want {
		t.Fatalf("%q: want %d links", rep, want)
	}
}
