package brokertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/node"
	"github.com/semaq/semaq/internal/operator"
	"github.com/semaq/semaq/internal/plugin/plugintest"
)

// ClusterName is the name of the clusters StartCluster makes.
const ClusterName = "test"

// clusterReadyTimeout bounds a cluster's start and each wait for it to be
// whole again: a Raft election takes seconds (nats-server's election
// timeout is 4 to 9 s and cannot be shortened from outside the package).
const clusterReadyTimeout = 60 * time.Second

// Cluster is a cluster of nodes StartCluster made: each serves NATS and HTTP
// on 127.0.0.1 with a free port and routes to every other node. Its methods
// may be called from the test's goroutine only.
type Cluster struct {
	t     testing.TB
	cfgs  []broker.Config
	bopts []broker.Option  // every node's, beside its operator
	nodes []*broker.Server // nil: stopped
}

// StartCluster starts n nodes named n1..nN as one cluster and returns once
// JetStream's meta group has a leader and every node is current with it.
// Options adjust each node's configuration before it starts; its Name is
// already set, so an option may tell the nodes apart. Every node is stopped
// at the end of the test.
func StartCluster(t testing.TB, n int, opts ...func(*broker.Config)) *Cluster {
	t.Helper()
	return StartClusterWith(t, n, nil, opts...)
}

// StartClusterWith is StartCluster with brokerOpts given to every node,
// at every start (a subsystem added with broker.WithSubsystem).
func StartClusterWith(t testing.TB, n int, brokerOpts []broker.Option, opts ...func(*broker.Config)) *Cluster {
	t.Helper()
	if testing.Short() {
		// Elections take seconds, and a package has dozens of cluster
		// tests: -short (a first run) leaves them to the full suite.
		t.Skip("starts a cluster of nodes: runs without -short")
	}
	if n < 1 {
		t.Fatalf("brokertest: a cluster of %d nodes", n)
	}
	c := &Cluster{t: t, bopts: brokerOpts, nodes: make([]*broker.Server, n)}
	// A cluster port must be known before the nodes start, for the
	// others' routes: free ones are picked and released, and in the rare
	// case another process takes one in between, the start is tried again.
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		if err = c.start(n, opts); err == nil || !errors.Is(err, syscall.EADDRINUSE) {
			break
		}
		c.stopAll()
	}
	if err != nil {
		c.stopAll()
		t.Fatalf("brokertest: cluster: %v", err)
	}
	c.WaitReady()
	return c
}

func (c *Cluster) start(n int, opts []func(*broker.Config)) error {
	ports, err := freePorts(n)
	if err != nil {
		return err
	}
	routes := make([]string, n)
	for i, p := range ports {
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", p)
	}
	// Every node reads the same cluster secret (routes prove it).
	secret, err := ClusterSecretFile(c.t)
	if err != nil {
		return err
	}
	c.cfgs = make([]broker.Config, n)
	for i := range n {
		cfg := broker.DefaultConfig()
		cfg.DataDir = c.t.TempDir()
		cfg.Listen = "127.0.0.1:0"
		cfg.HTTP = "127.0.0.1:0"
		cfg.Name = fmt.Sprintf("n%d", i+1)
		cfg.ClusterName = ClusterName
		cfg.ClusterListen = fmt.Sprintf("127.0.0.1:%d", ports[i])
		cfg.Routes = routes // the node's own route is ignored by NATS
		cfg.ClusterSecretFile = secret
		cfg.PluginCacheDir = plugintest.CacheDir()
		// A stream reserves its max_bytes from every node's store, and a
		// package's tests share a cluster whose nodes share one disk: at
		// the default (1 GiB) a small disk runs out of reservations.
		cfg.StreamMaxBytes = 64 << 20
		for _, o := range opts {
			o(&cfg)
		}
		c.cfgs[i] = cfg
	}
	// After the data directories: cleanups run last first, and the nodes
	// must stop before their directories go.
	c.t.Cleanup(c.stopAll)
	// All at once: a node's start waits for a majority of the nodes.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.nodes[i], errs[i] = startNode(c.cfgs[i], c.bopts)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// ClusterSecretFile writes a fresh cluster secret, readable by its owner
// only, to a file of the test's and returns its path.
func ClusterSecretFile(t testing.TB) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	path := filepath.Join(t.TempDir(), "cluster.secret")
	return path, os.WriteFile(path, []byte(hex.EncodeToString(b)+"\n"), 0o600)
}

// startNode starts one node with an operator, for DialOperator.
func startNode(cfg broker.Config, brokerOpts []broker.Option) (*broker.Server, error) {
	op, err := operator.New()
	if err != nil {
		return nil, err
	}
	s, err := node.New(cfg, nil, append([]broker.Option{op.Option()}, brokerOpts...)...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		return nil, fmt.Errorf("node %s: %w", cfg.Name, err)
	}
	operators.Store(s, op)
	return s, nil
}

// handedOut are the cluster ports freePorts gave out in this process: a
// cluster keeps its ports across restarts of its nodes, so no other
// cluster of a parallel test may be given one of them.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// freePorts picks n free ports on 127.0.0.1, none given out before in this
// process.
func freePorts(n int) ([]int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries == 100*n {
			return nil, fmt.Errorf("brokertest: no free port in %d tries", tries)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		port := ln.Addr().(*net.TCPAddr).Port
		if handedOut.ports[port] {
			continue
		}
		handedOut.ports[port] = true
		ports = append(ports, port)
	}
	return ports, nil
}

// N is the number of nodes, stopped ones included.
func (c *Cluster) N() int { return len(c.nodes) }

// Node is node i (0-based: node "n1" is Node(0)); nil while it is stopped.
func (c *Cluster) Node(i int) *broker.Server { return c.nodes[i] }

// Nodes are the running nodes.
func (c *Cluster) Nodes() []*broker.Server {
	var out []*broker.Server
	for _, s := range c.nodes {
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}

// Index is the index of the node named name, -1 if there is none.
func (c *Cluster) Index(name string) int {
	for i, cfg := range c.cfgs {
		if cfg.Name == name {
			return i
		}
	}
	return -1
}

// URLs are the client URLs of the running nodes, comma-separated, as
// nats.Connect takes them.
func (c *Cluster) URLs() string {
	var urls []string
	for _, s := range c.Nodes() {
		urls = append(urls, s.ClientURL())
	}
	return strings.Join(urls, ",")
}

// Stop shuts node i down gracefully; the others keep running.
func (c *Cluster) Stop(i int) {
	c.t.Helper()
	s := c.nodes[i]
	if s == nil {
		return
	}
	c.nodes[i] = nil
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		c.t.Logf("brokertest: stop %s: %v", c.cfgs[i].Name, err)
	}
	operators.Delete(s)
}

// Restart starts node i again, stopped by Stop, on its data directory and
// cluster port, and waits until the cluster is whole.
func (c *Cluster) Restart(i int) *broker.Server {
	c.t.Helper()
	if c.nodes[i] != nil {
		c.t.Fatalf("brokertest: restart %s: it is running", c.cfgs[i].Name)
	}
	s, err := startNode(c.cfgs[i], c.bopts)
	if err != nil {
		c.t.Fatalf("brokertest: restart: %v", err)
	}
	c.nodes[i] = s
	c.WaitReady()
	return s
}

func (c *Cluster) stopAll() {
	var wg sync.WaitGroup
	for i, s := range c.nodes {
		if s == nil {
			continue
		}
		c.nodes[i] = nil
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = s.Shutdown(ctx)
			operators.Delete(s)
		}()
	}
	wg.Wait()
}

// ownStreams are SemaQ's own buckets and streams (KV_SQ_USERS with auth).
var ownStreams = []string{"KV_SQ_SCHEMAS", "KV_SQ_ROUTES", "KV_SQ_AGENTS", "KV_SQ_USERS", "SQ_DLQ", "SQ_TOKENS"}

// WaitReady waits until JetStream's meta group has a leader, every running
// node is current with it, and the leader sees every running node as a
// current peer; with 3 or more nodes running, also until SemaQ's own
// streams have 3 replicas and a leader each, so a test does not race the
// nodes raising them.
func (c *Cluster) WaitReady() {
	c.t.Helper()
	c.waitMeta()
	running := c.Nodes()
	if len(running) < 3 {
		return
	}
	c.Eventually(clusterReadyTimeout, "SemaQ's own streams at 3 replicas with a leader", func() error {
		// Each node reports the streams it holds a replica of.
		seen := map[string]server.StreamDetail{}
		for _, s := range running {
			jsz, err := s.NATSServer().Jsz(&server.JSzOptions{Account: server.DEFAULT_GLOBAL_ACCOUNT, Streams: true, Config: true})
			if err != nil {
				return err
			}
			for _, a := range jsz.AccountDetails {
				for _, sd := range a.Streams {
					if _, ok := seen[sd.Name]; !ok || sd.Cluster != nil && sd.Cluster.Leader != "" {
						seen[sd.Name] = sd
					}
				}
			}
		}
		for _, name := range ownStreams {
			sd, ok := seen[name]
			if !ok {
				continue // not made (KV_SQ_USERS without auth)
			}
			if sd.Config == nil || sd.Config.Replicas < 3 || sd.Cluster == nil || sd.Cluster.Leader == "" {
				return fmt.Errorf("%s: config %v, cluster %+v", name, sd.Config != nil && sd.Config.Replicas >= 3, sd.Cluster)
			}
		}
		return nil
	})
}

// waitMeta waits for the meta group (WaitReady).
func (c *Cluster) waitMeta() {
	c.t.Helper()
	c.Eventually(clusterReadyTimeout, "the cluster to be whole", func() error {
		running := c.Nodes()
		var leader *server.Server
		for _, s := range running {
			ns := s.NATSServer()
			if !ns.JetStreamIsCurrent() {
				return fmt.Errorf("%s is not current with the meta group", ns.Name())
			}
			if ns.JetStreamIsLeader() {
				leader = ns
			}
		}
		if leader == nil {
			return errors.New("no meta leader among the running nodes")
		}
		jsz, err := leader.Jsz(nil)
		if err != nil || jsz.Meta == nil {
			return fmt.Errorf("meta group of %s: %v", leader.Name(), err)
		}
		current := 1 // the leader
		for _, p := range jsz.Meta.Replicas {
			if p.Current && !p.Offline {
				current++
			}
		}
		if current < len(running) {
			return fmt.Errorf("meta leader %s sees %d current peers of %d running nodes", leader.Name(), current, len(running))
		}
		return nil
	})
}

// MetaLeader is the index of the node leading JetStream's meta group, -1
// when no running node does.
func (c *Cluster) MetaLeader() int {
	for i, s := range c.nodes {
		if s != nil && s.NATSServer().JetStreamIsLeader() {
			return i
		}
	}
	return -1
}

// StreamLeader is the index of the running node leading stream's Raft
// group, -1 when none does (an R1 stream's node is its leader).
func (c *Cluster) StreamLeader(stream string) int {
	for i, s := range c.nodes {
		if s != nil && s.NATSServer().JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}

// ConsumerLeader is the index of the running node leading a consumer's
// Raft group, -1 when none does.
func (c *Cluster) ConsumerLeader(stream, consumer string) int {
	for i, s := range c.nodes {
		if s != nil && s.NATSServer().JetStreamIsConsumerLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream, consumer) {
			return i
		}
	}
	return -1
}

// Eventually polls cond until it returns nil, failing the test with its
// last error when timeout passes.
func (c *Cluster) Eventually(timeout time.Duration, what string, cond func() error) {
	c.t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		select {
		case <-deadline.C:
			c.t.Fatalf("brokertest: waited %s for %s: %v", timeout, what, err)
		case <-tick.C:
		}
	}
}
