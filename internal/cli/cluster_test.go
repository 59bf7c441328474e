package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// Each cluster flag of serve reaches the configuration: a missing or bad
// one is named.
func TestServeClusterFlags(t *testing.T) {
	t.Parallel()
	base := []string{"serve", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--http", ""}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--cluster-listen", "127.0.0.1:0"}, "cluster_name: cluster_listen is set but cluster_name is not"},
		{[]string{"--cluster-name", "prod", "--cluster-listen", "127.0.0.1:0"}, "name: a clustered node needs a name"},
		{[]string{"--cluster-name", "prod", "--cluster-listen", "127.0.0.1:0", "--node", "n1"}, "routes: a clustered node needs"},
		{[]string{"--cluster-name", "prod", "--cluster-listen", "127.0.0.1:0", "--node", "n1", "--routes", "127.0.0.1:6223"}, "is not a route URL"},
		{[]string{"--cluster-name", "prod", "--cluster-listen", "0.0.0.0:6222", "--node", "n1", "--routes", "nats://10.0.0.2:6222"}, "cluster_listen: 0.0.0.0:6222 is not a loopback address"},
	} {
		args := append(append([]string{}, base...), tc.args...)
		var stdout, stderr bytes.Buffer
		if code := Main(args, strings.NewReader(""), &stdout, &stderr); code == 0 {
			t.Fatalf("%v: exit 0", args)
		}
		if msg := stderr.String(); !strings.HasPrefix(msg, "semaq: ") || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, tc.says) {
			t.Errorf("%v: stderr %q is not one line saying %q", tc.args, msg, tc.says)
		}
	}
}

// stream info names a replicated stream's leader and followers; cluster
// status lists the nodes, the meta leader and the streams.
func TestClusterStatusCommand(t *testing.T) {
	c := brokertest.StartCluster(t, 3)
	url := c.Node(0).ClientURL()
	mustSemaq(t, url, "", "stream", "add", "AI", "--subjects", "ai.>", "--replicas", "3")
	// A follower may be an operation behind right after the add: wait
	// for both to be current.
	var info, leader string
	c.Eventually(30*time.Second, "stream info with both followers current", func() error {
		info = mustSemaq(t, url, "", "stream", "info", "AI")
		if !strings.Contains(strings.Join(strings.Fields(info), " "), "Replicas: 3") {
			t.Fatalf("stream info:\n%s", info)
		}
		leader = ""
		for _, line := range strings.Split(info, "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "Leader:" {
				leader = f[1]
			}
		}
		if c.Index(leader) < 0 || !strings.Contains(info, "Followers:") || strings.Count(info, "(current)") != 2 {
			return fmt.Errorf("stream info names leader %q:\n%s", leader, info)
		}
		return nil
	})

	// A node's view of the meta group flickers as heartbeats come and go:
	// wait for a settled status.
	c.Eventually(30*time.Second, "every node connected and current", func() error {
		out := mustSemaq(t, url, "", "cluster", "status")
		lines := strings.Split(out, "\n")
		if !strings.HasPrefix(lines[0], "Cluster test (answered by n") || !strings.Contains(out, "Meta leader:") {
			t.Fatalf("cluster status:\n%s", out)
		}
		for _, n := range []string{"n1", "n2", "n3"} {
			found := false
			for _, l := range lines {
				if f := strings.Fields(l); len(f) > 5 && f[0] == n && f[1] == "yes" && f[4] == "interval" && f[5] == "current" {
					found = true
				}
			}
			if !found {
				return fmt.Errorf("no connected, current row for %s:\n%s", n, out)
			}
		}
		for _, l := range lines {
			if f := strings.Fields(l); len(f) >= 3 && f[0] == "AI" && f[1] == "3" && f[2] == leader {
				return nil
			}
		}
		return fmt.Errorf("no row AI 3 %s:\n%s", leader, out)
	})
	var st semaq.ClusterStatus
	if err := json.Unmarshal([]byte(mustSemaq(t, url, "", "cluster", "status", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if st.Name != "test" || len(st.Nodes) != 3 || st.MetaLeader == "" || st.Replicas != 3 {
		t.Fatalf("cluster status --json: %+v", st)
	}
}

// The example configurations of docs/cluster.md load and describe three
// distinct nodes of one cluster with the same routes, none on a single
// node's default ports or data directory.
func TestClusterExampleConfigs(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob(filepath.Join("..", "..", "examples", "cluster", "*.yaml"))
	if err != nil || len(files) != 3 {
		t.Fatalf("examples/cluster: %v %v, want 3 files", files, err)
	}
	names, ports := map[string]bool{}, map[string]bool{}
	var routes string
	for _, f := range files {
		cfg := broker.DefaultConfig()
		if err := broker.LoadConfigFile(f, &cfg); err != nil {
			t.Fatal(err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if cfg.ClusterName != "prod" || names[cfg.Name] || ports[cfg.Listen] || ports[cfg.HTTP] || ports[cfg.ClusterListen] {
			t.Fatalf("%s: %+v repeats another node's name or address", f, cfg)
		}
		def := broker.DefaultConfig()
		if cfg.Listen == def.Listen || cfg.HTTP == def.HTTP || filepath.Clean(cfg.DataDir) == filepath.Clean(def.DataDir) ||
			strings.HasPrefix(filepath.Clean(cfg.DataDir), filepath.Clean(def.DataDir)+string(filepath.Separator)) {
			t.Fatalf("%s: %s, %s, %s collide with a single node's defaults", f, cfg.Listen, cfg.HTTP, cfg.DataDir)
		}
		names[cfg.Name], ports[cfg.Listen], ports[cfg.HTTP], ports[cfg.ClusterListen] = true, true, true, true
		if r := strings.Join(cfg.Routes, ","); routes != "" && r != routes {
			t.Fatalf("%s: routes %s differ from %s", f, r, routes)
		} else {
			routes = r
		}
		if !strings.Contains(routes, cfg.ClusterListen) {
			t.Fatalf("%s: its cluster address %s is not in the routes %s", f, cfg.ClusterListen, routes)
		}
	}
}

// semaq cluster secret prints a new 256-bit secret each time, in a form
// --cluster-secret-file takes.
func TestClusterSecretCommand(t *testing.T) {
	secret := func() string {
		var out, errOut bytes.Buffer
		if code := Main([]string{"cluster", "secret"}, strings.NewReader(""), &out, &errOut); code != 0 {
			t.Fatalf("semaq cluster secret: exit %d: %s", code, errOut.String())
		}
		return strings.TrimSpace(out.String())
	}
	a, b := secret(), secret()
	if len(a) != 64 || strings.Trim(a, "0123456789abcdef") != "" || a == b {
		t.Fatalf("cluster secret printed %q then %q, want two different 64-digit hex secrets", a, b)
	}
}

// After a node's loss the status says what SemaQ's own streams have (R3,
// kept) beside what one made now would get, and what is degraded.
func TestClusterStatusAfterANodeLoss(t *testing.T) {
	t.Parallel()
	st := &semaq.ClusterStatus{Name: "prod", AnsweredBy: "n1", MetaLeader: "n1", Replicas: 1,
		Nodes: []semaq.ClusterNode{{Name: "n1", Connected: true}, {Name: "n2", Connected: true}, {Name: "n3"}},
		Streams: []semaq.StreamClusterStatus{
			{Stream: "KV_SQ_SCHEMAS", Replicas: 3, Own: true, StreamCluster: semaq.StreamCluster{Leader: "n1",
				Followers: []semaq.PeerStatus{{Name: "n2", Current: true}, {Name: "n3", Offline: true}}}},
			{Stream: "AI", Replicas: 3, StreamCluster: semaq.StreamCluster{}},
		}}
	var out strings.Builder
	if err := writeClusterStatus(&out, st); err != nil {
		t.Fatal(err)
	}
	s := strings.Join(strings.Fields(out.String()), " ")
	for _, want := range []string{
		"SemaQ's own streams: R3 (one made now would be R1: this node reaches 2 nodes)",
		"DEGRADED: node n3 is not connected",
		"DEGRADED: stream KV_SQ_SCHEMAS: 2 of 3 replicas up (n3 offline)",
		"DEGRADED: stream AI has no leader (electing, or too few replicas up)",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("status lacks %q:\n%s", want, out.String())
		}
	}
}
