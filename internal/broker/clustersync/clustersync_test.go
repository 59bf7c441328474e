package clustersync_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/internal/broker/clustersync"
	"github.com/semaq/semaq/internal/broker/subsystem"
)

// node is one syncer on a shared NATS server, standing for a node of a
// cluster: it answers with apply's error.
type node struct {
	sy   *clustersync.Syncer
	mu   sync.Mutex
	reqs []clustersync.Request
}

func startNATS(t *testing.T) *server.Server {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(ns.Shutdown)
	return ns
}

func openNode(t *testing.T, ns *server.Server, name string, routed []string, apply error) *node {
	t.Helper()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	n := &node{}
	n.sy, err = clustersync.Open(context.Background(), clustersync.Deps{
		Conn:   nc,
		Node:   name,
		Routed: func() []string { return routed },
		Apply: func(_ context.Context, req clustersync.Request) error {
			n.mu.Lock()
			n.reqs = append(n.reqs, req)
			n.mu.Unlock()
			return apply
		},
		Interest: func(string) bool { return true },
		Gate:     subsystem.NewGate(name).Child("cluster-sync"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.sy.Answer(); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := n.sy.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return n
}

func TestSyncWaitsForEveryNode(t *testing.T) {
	ns := startNATS(t)
	n1 := openNode(t, ns, "n1", []string{"n2", "n3"}, nil)
	n2 := openNode(t, ns, "n2", []string{"n1", "n3"}, nil)
	n3 := openNode(t, ns, "n3", []string{"n1", "n2"}, errors.New("bucket unreachable"))
	req := clustersync.Request{Schemas: true, Routes: 7, Subjects: []string{"orders.*"}}
	lagging := n1.sy.Sync(context.Background(), req)
	if !slices.Equal(lagging, []string{"n3"}) {
		t.Fatalf("lagging %v, want [n3]: the node that could not apply the change", lagging)
	}
	for _, n := range []*node{n2, n3} {
		n.mu.Lock()
		got := n.reqs
		n.mu.Unlock()
		if len(got) != 1 || got[0].From != "n1" || !got[0].Schemas || got[0].Routes != 7 {
			t.Fatalf("requests applied %+v, want one from n1 with schemas and routes 7", got)
		}
	}
	n1.mu.Lock()
	defer n1.mu.Unlock()
	if len(n1.reqs) != 0 {
		t.Fatalf("the asking node applied its own request: %+v", n1.reqs)
	}
}

func TestNilSyncerIsANodeOutsideACluster(t *testing.T) {
	var sy *clustersync.Syncer
	if lagging := sy.Sync(context.Background(), clustersync.Request{Streams: true}); lagging != nil {
		t.Fatalf("Sync outside a cluster: %v", lagging)
	}
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	rec := httptest.NewRecorder()
	sy.HTTP(h).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/config", nil))
	if rec.Code != http.StatusTeapot {
		t.Fatalf("status %d, want the handler's own", rec.Code)
	}
}
