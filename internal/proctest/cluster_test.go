//go:build unix

package proctest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// readyTimeout bounds a node's start and each wait for the cluster to be
// whole: a Raft election after a kill takes 4 to 9 s (nats-server's
// election timeout), and the machine may be loaded.
const readyTimeout = 90 * time.Second

// cluster is three `semaq serve` processes on loopback, routed to each
// other, named n1..n3.
type cluster struct {
	t     *testing.T
	nodes []*proc
	urls  []string // client URL of each node
}

// startCluster starts n nodes at once and returns when the cluster is whole
// (waitWhole). Every node is killed at the end of the test, and on failure
// the tail of each node's log is printed.
func startCluster(t *testing.T, n int) *cluster {
	t.Helper()
	bin := semaqBinary(t)
	c := &cluster{t: t}
	dir := t.TempDir() // before the cleanup below, which runs first: the logs are still there
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range c.nodes {
				t.Logf("---- %s (%s), SemaQ's warnings and errors, then the last lines:\n%s\n----\n%s",
					p.name, p.logPath, p.grep(`level=(WARN|ERROR) msg="[^A-Z]`), p.tail(60))
			}
		}
		for _, p := range c.nodes {
			p.kill(t)
		}
	})
	// Ports are picked free and released, so another program may take
	// one before the node binds it; a node that could not bind says so
	// and exits, and the whole start is tried again.
	for attempt := 1; ; attempt++ {
		err := c.start(bin, filepath.Join(dir, fmt.Sprint(attempt)), n)
		if err == nil {
			break
		}
		for _, p := range c.nodes {
			p.kill(t)
		}
		if attempt == 3 || !strings.Contains(err.Error(), "address already in use") {
			t.Fatal(err)
		}
		t.Logf("starting again: %v", err)
	}
	c.waitWhole(nil)
	return c
}

func (c *cluster) start(bin, dir string, n int) error {
	ports, err := freePorts(3 * n)
	if err != nil {
		return err
	}
	routes := make([]string, n)
	for i := range n {
		routes[i] = fmt.Sprintf("nats://127.0.0.1:%d", ports[2*n+i])
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	c.nodes, c.urls = make([]*proc, n), make([]string, n)
	for i := range n {
		name := fmt.Sprintf("n%d", i+1)
		c.urls[i] = fmt.Sprintf("nats://127.0.0.1:%d", ports[i])
		c.nodes[i] = &proc{
			name: name,
			bin:  bin,
			args: []string{"serve",
				"--data", filepath.Join(dir, name),
				"--listen", fmt.Sprintf("127.0.0.1:%d", ports[i]),
				"--http", fmt.Sprintf("127.0.0.1:%d", ports[n+i]),
				"--node", name,
				"--cluster-name", "proctest",
				"--cluster-listen", fmt.Sprintf("127.0.0.1:%d", ports[2*n+i]),
				"--routes", strings.Join(routes, ","),
			},
			logPath: filepath.Join(dir, name+".log"),
		}
	}
	for _, p := range c.nodes {
		p.start(c.t)
	}
	// A node's start waits for a majority, so all start at once.
	for _, p := range c.nodes {
		select {
		case <-p.ready:
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready:\n%s", p.name, p.tail(40))
		case <-time.After(readyTimeout):
			return fmt.Errorf("%s not ready after %s:\n%s", p.name, readyTimeout, p.tail(40))
		}
	}
	return nil
}

// freePorts picks n distinct free ports on 127.0.0.1.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// index is the index of the node named name, -1 if none.
func (c *cluster) index(name string) int {
	for i, p := range c.nodes {
		if p.name == name {
			return i
		}
	}
	return -1
}

// allURLs are the nodes' client URLs with node first, then the others, as
// a client that knows every node is given them.
func (c *cluster) allURLs(first int) string {
	urls := []string{c.urls[first]}
	for i, u := range c.urls {
		if i != first {
			urls = append(urls, u)
		}
	}
	return strings.Join(urls, ",")
}

// connect is an SDK client of node i that reconnects to the others.
func (c *cluster) connect(i int) *client.Client {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := client.Connect(ctx, c.allURLs(i), client.WithTimeout(5*time.Second),
		client.WithNATSOptions(nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond)))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(cl.Close)
	return cl
}

// status is the cluster status answered through any running node.
func (c *cluster) status(ctx context.Context) (*semaq.ClusterStatus, error) {
	for i, p := range c.nodes {
		if !p.running() {
			continue
		}
		cl, err := client.Connect(ctx, c.urls[i], client.WithNATSOptions(nats.NoReconnect()))
		if err != nil {
			continue
		}
		st, err := cl.ClusterStatus(ctx)
		cl.Close()
		if err == nil {
			return st, nil
		}
	}
	return nil, errors.New("no running node answered the cluster status")
}

// waitWhole waits until every node answers the cluster status, is current
// with the meta group, and every stream has a leader with every follower
// current and no lag — SemaQ's own streams at 3 replicas. check, if not
// nil, adds a condition on the status.
func (c *cluster) waitWhole(check func(*semaq.ClusterStatus) error) *semaq.ClusterStatus {
	c.t.Helper()
	var st *semaq.ClusterStatus
	eventually(c.t, readyTimeout, "the cluster to be whole", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var err error
		if st, err = c.status(ctx); err != nil {
			return err
		}
		if err := whole(st, len(c.nodes)); err != nil {
			return err
		}
		if check != nil {
			return check(st)
		}
		return nil
	})
	return st
}

// whole is nil when st shows n nodes, all current, and every stream led
// with its followers current.
func whole(st *semaq.ClusterStatus, n int) error {
	if st.MetaLeader == "" {
		return errors.New("no meta leader")
	}
	if len(st.Nodes) != n {
		return fmt.Errorf("%d nodes listed, want %d", len(st.Nodes), n)
	}
	for _, nd := range st.Nodes {
		if !nd.Connected || !nd.JetStreamCurrent || nd.Meta == nil || !nd.Meta.Current {
			return fmt.Errorf("node %s: connected %v, current %v, meta %+v", nd.Name, nd.Connected, nd.JetStreamCurrent, nd.Meta)
		}
	}
	for _, s := range st.Streams {
		if s.Own && s.Replicas < 3 {
			return fmt.Errorf("stream %s has %d replicas", s.Stream, s.Replicas)
		}
		if s.Leader == "" || len(s.Followers) != s.Replicas-1 {
			return fmt.Errorf("stream %s: leader %q, %d followers of %d replicas", s.Stream, s.Leader, len(s.Followers), s.Replicas)
		}
		for _, f := range s.Followers {
			if !f.Current || f.Offline || f.Lag != 0 {
				return fmt.Errorf("stream %s: follower %+v", s.Stream, f)
			}
		}
	}
	return nil
}

// streamLeader is the node leading stream, once it has a leader.
func (c *cluster) streamLeader(stream string) int {
	c.t.Helper()
	leader := -1
	eventually(c.t, readyTimeout, stream+" to have a leader", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := c.status(ctx)
		if err != nil {
			return err
		}
		for _, s := range st.Streams {
			if s.Stream == stream && s.Leader != "" {
				if leader = c.index(s.Leader); leader < 0 {
					return fmt.Errorf("leader %q is no node of the cluster", s.Leader)
				}
				return nil
			}
		}
		return errors.New("no leader")
	})
	return leader
}

// restart starts node i again on its data directory and ports and waits
// until it serves and the cluster is whole.
func (c *cluster) restart(i int) {
	c.t.Helper()
	p := c.nodes[i]
	p.start(c.t)
	p.waitStarted(c.t, readyTimeout)
	c.waitWhole(nil)
}

// eventually polls cond until it returns nil, failing the test with its
// last error when timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s: %v", timeout, what, err)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, not synchronising on time
	}
}
