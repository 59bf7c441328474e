package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// A schema and a stream bound to it, added through one node, are enforced
// by every other node's ingress from the moment the add returns: the next
// publish anywhere sees them, with no wait.
func TestClusterSchemaEnforcedOnEveryNode(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	first := brokertest.Connect(t, c.Node(0))
	others := []*client.Client{brokertest.Connect(t, c.Node(1)), brokertest.Connect(t, c.Node(2))}
	const good = `{"model":"llama3","messages":[{"role":"user","content":"hi"}],"max_tokens":64}`
	const bad = `{"messages":[]}`
	// Several rounds: a race between the add and the other nodes would
	// show in one of them.
	for round := range 5 {
		subject, stream := fmt.Sprintf("req-%d", round), fmt.Sprintf("AI%d", round)
		if _, _, err := first.RegisterSchema(ctx, subject, requestSchema, client.WithSchemaType("JSON")); err != nil {
			t.Fatal(err)
		}
		if _, err := first.AddStream(ctx, semaq.StreamConfig{Name: stream, Subjects: []string{fmt.Sprintf("ai%d.>", round)},
			Schema: subject, Replicas: 3}); err != nil {
			t.Fatal(err)
		}
		for i, o := range others {
			subj := fmt.Sprintf("ai%d.req", round)
			if _, err := o.Publish(ctx, subj, []byte(bad)); !errors.Is(err, semaq.ErrSchema) {
				t.Fatalf("round %d, node %d: invalid payload right after the add: %v, want ErrSchema", round, i+2, err)
			}
			if _, err := o.Publish(ctx, subj, []byte(good)); err != nil {
				t.Fatalf("round %d, node %d: valid payload right after the add: %v", round, i+2, err)
			}
		}
		// A new version, registered through the first node, is what
		// every node enforces when the register returns: v2 drops the
		// minimum of max_tokens, so 0 passes now.
		v2 := strings.Replace(requestSchema, `"max_tokens": {"type": "integer", "minimum": 1}`, `"max_tokens": {"type": "integer"}`, 1)
		if _, _, err := first.RegisterSchema(ctx, subject, v2, client.WithSchemaType("JSON")); err != nil {
			t.Fatal(err)
		}
		for i, o := range others {
			zero := `{"model":"m","messages":[],"max_tokens":0}`
			if _, err := o.Publish(ctx, fmt.Sprintf("ai%d.req", round), []byte(zero)); err != nil {
				t.Fatalf("round %d, node %d: payload valid under v2 right after its register: %v", round, i+2, err)
			}
		}
	}
}

// A change returns naming the nodes that could not apply it.
func TestClusterSyncNamesLaggingNodes(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Right after the start the nodes may still be raising SemaQ's own
	// streams to 3 replicas, and a sync then waits for them.
	c.Eventually(30*time.Second, "a sync with no node lagging", func() error {
		if lag := broker.ClusterSync(ctx, c.Node(0)); len(lag) != 0 {
			return fmt.Errorf("lagging %v", lag)
		}
		return nil
	})
	// The answer to a change names the nodes that lag, over NATS and
	// over HTTP; none when every node applied it.
	nc, err := nats.Connect(c.Node(0).ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	register := func(subject string) (natsLag, httpLag string) {
		t.Helper()
		body, _ := json.Marshal(semaq.SchemaRegisterRequest{Subject: subject, Schema: requestSchema, SchemaType: "JSON"})
		var m *nats.Msg
		// Any node of the API's queue group may answer; n3, with its
		// registry stopped, refuses: ask until another node answers.
		for range 20 {
			if m, err = nc.Request(semaq.APISchemaRegister, body, 20*time.Second); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(m.Data), "the registry is closed") {
				break
			}
		}
		if strings.Contains(string(m.Data), `"error"`) {
			t.Fatalf("register %s over NATS: %s", subject, m.Data)
		}
		hb, _ := json.Marshal(map[string]string{"schema": requestSchema, "schemaType": "JSON"})
		resp, err := http.Post("http://"+c.Node(0).HTTPAddr()+"/subjects/"+subject+"-http/versions",
			"application/vnd.schemaregistry.v1+json", bytes.NewReader(hb))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"id"`) {
			t.Fatalf("register %s over HTTP: %s %s", subject, resp.Status, b)
		}
		return m.Header.Get(semaq.HdrClusterLagging), resp.Header.Get(semaq.HdrClusterLagging)
	}
	if natsLag, httpLag := register("healthy"); natsLag != "" || httpLag != "" {
		t.Fatalf("every node applied it, yet lagging %q over NATS, %q over HTTP", natsLag, httpLag)
	}
	if err := broker.CloseRegistry(c.Node(2)); err != nil {
		t.Fatal(err)
	}
	if lag := broker.ClusterSync(ctx, c.Node(0)); len(lag) != 1 || lag[0] != "n3" {
		t.Fatalf("with n3's registry stopped: lagging %v, want [n3]", lag)
	}
	if natsLag, httpLag := register("lagged"); natsLag != "n3" || httpLag != "n3" {
		t.Fatalf("with n3's registry stopped: lagging %q over NATS, %q over HTTP; want n3", natsLag, httpLag)
	}
	// The SDK tells its caller.
	heard := make(chan []string, 1)
	sdk, err := client.Connect(ctx, c.Node(0).ClientURL(), client.WithLagging(func(_ string, nodes []string) { heard <- nodes }))
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	for i := 0; len(heard) == 0 && i < 20; i++ {
		_, _, err := sdk.RegisterSchema(ctx, "lagged-sdk", requestSchema, client.WithSchemaType("JSON"))
		if err != nil && !strings.Contains(err.Error(), "the registry is closed") {
			t.Fatal(err)
		}
	}
	select {
	case nodes := <-heard:
		if len(nodes) != 1 || nodes[0] != "n3" {
			t.Fatalf("the SDK heard %v lagging, want [n3]", nodes)
		}
	default:
		t.Fatal("the SDK's lagging handler was never called")
	}
	// A node that is down is not waited for: it applies everything when
	// it comes back, before it serves.
	c.Stop(2)
	c.Eventually(30*time.Second, "n3 gone from the routes", func() error {
		if lag := broker.ClusterSync(ctx, c.Node(0)); len(lag) != 0 {
			return fmt.Errorf("lagging %v", lag)
		}
		return nil
	})
}

// A route rule added through one node routes the next publish on every
// other node; removed, it routes none.
func TestClusterRouteInEffectOnEveryNode(t *testing.T) {
	t.Parallel()
	c := brokertest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	first := brokertest.Connect(t, c.Node(0))
	others := []*client.Client{brokertest.Connect(t, c.Node(1)), brokertest.Connect(t, c.Node(2))}
	for _, st := range []semaq.StreamConfig{{Name: "AI", Subjects: []string{"ai.>"}}, {Name: "GPU", Subjects: []string{"gpu.>"}}} {
		if _, err := first.AddStream(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	for round := range 5 {
		name := fmt.Sprintf("r%d", round)
		if _, err := first.AddRoute(ctx, semaq.Route{Name: name, Subject: "ai.big", To: "gpu.big"}); err != nil {
			t.Fatal(err)
		}
		for i, o := range others {
			ack, err := o.Publish(ctx, "ai.big", []byte("x"))
			if err != nil || ack.Stream != "GPU" {
				t.Fatalf("round %d, node %d: right after the route add, stored in %+v (%v), want GPU", round, i+2, ack, err)
			}
		}
		if err := first.DeleteRoute(ctx, name); err != nil {
			t.Fatal(err)
		}
		for i, o := range others {
			ack, err := o.Publish(ctx, "ai.big", []byte("x"))
			if err != nil || ack.Stream != "AI" {
				t.Fatalf("round %d, node %d: right after the route delete, stored in %+v (%v), want AI", round, i+2, ack, err)
			}
		}
	}
}
