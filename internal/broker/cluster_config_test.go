package broker_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
)

// Bad cluster settings are refused with the setting named and what to do.
func TestClusterConfigErrors(t *testing.T) {
	t.Parallel()
	ca := brokertest.NewCA(t, "semaq test CA")
	certFile, keyFile := ca.Node(t, "n1").Write(t, t.TempDir())
	good := func(c *broker.Config) {
		c.Name, c.ClusterName, c.ClusterListen = "n1", "prod", "127.0.0.1:6222"
		c.Routes = []string{"nats://127.0.0.1:6222", "nats://127.0.0.1:6223", "nats://127.0.0.1:6224"}
	}
	secret, err := brokertest.ClusterSecretFile(t)
	if err != nil {
		t.Fatal(err)
	}
	many := make([]string, broker.MaxRoutes+1)
	for i := range many {
		many[i] = fmt.Sprintf("nats://127.0.0.1:%d", 7000+i)
	}
	for _, tc := range []struct {
		name string
		set  func(*broker.Config)
		says string // "" for accepted
	}{
		{"a three-node member", func(c *broker.Config) {}, ""},
		{"listen without name", func(c *broker.Config) { c.ClusterName = "" }, "cluster_name: cluster_listen is set but cluster_name is not"},
		{"routes without name", func(c *broker.Config) { c.ClusterName, c.ClusterListen = "", "" }, "cluster_name: routes are set"},
		{"name without listen", func(c *broker.Config) { c.ClusterListen = "" }, "cluster_listen: cluster_name is set but cluster_listen is not"},
		{"listen not host:port", func(c *broker.Config) { c.ClusterListen = "6222" }, "cluster_listen: \"6222\" is not host:port"},
		{"advertise behind a proxy", func(c *broker.Config) { c.ClusterAdvertise = "127.0.0.1:7622" }, ""},
		{"advertise without port", func(c *broker.Config) { c.ClusterAdvertise = "127.0.0.1" }, "cluster_advertise: \"127.0.0.1\" is not host:port"},
		{"advertise port 0", func(c *broker.Config) { c.ClusterAdvertise = "127.0.0.1:0" }, "cluster_advertise: \"127.0.0.1:0\" is not host:port"},
		{"no node name", func(c *broker.Config) { c.Name = "" }, "name: a clustered node needs a name unique in its cluster (--node"},
		{"node name with a space", func(c *broker.Config) { c.Name = "node 1" }, "name: \"node 1\" is not a node name"},
		{"node name with a dot", func(c *broker.Config) { c.Name = "n.1" }, "name: \"n.1\" is not a node name"},
		{"cluster name with a wildcard", func(c *broker.Config) { c.ClusterName = "prod>" }, "cluster_name: \"prod>\" is not a cluster name"},
		{"no routes", func(c *broker.Config) { c.Routes = nil }, "routes: a clustered node needs the cluster addresses"},
		{"route not a URL", func(c *broker.Config) { c.Routes = []string{"127.0.0.1:6223"} }, "routes: \"127.0.0.1:6223\" is not a route URL"},
		{"route of another scheme", func(c *broker.Config) { c.Routes = []string{"http://127.0.0.1:6223"} }, "is not a route URL: want nats://host:port"},
		{"route without port", func(c *broker.Config) { c.Routes = []string{"nats://127.0.0.1"} }, "is not host:port"},
		{"route without host", func(c *broker.Config) { c.Routes = []string{"nats://:6223"} }, "names no host"},
		{"route with a path", func(c *broker.Config) { c.Routes = []string{"nats://127.0.0.1:6223/x"} }, "no path or query"},
		{"route with credentials", func(c *broker.Config) { c.Routes = []string{"nats://u:p@127.0.0.1:6223"} }, "carries credentials"},
		{"route twice", func(c *broker.Config) { c.Routes = []string{"nats://127.0.0.1:6223", "nats-route://127.0.0.1:6223"} }, "127.0.0.1:6223 is listed twice"},
		{"too many routes", func(c *broker.Config) { c.Routes = many }, "routes: 65 routes, at most 64"},
		{"cluster port off loopback", func(c *broker.Config) { c.ClusterListen = "0.0.0.0:6222" }, "cluster_listen: 0.0.0.0:6222 is not a loopback address and no authentication"},
		{"off loopback with insecure", func(c *broker.Config) { c.ClusterListen, c.Insecure = "0.0.0.0:6222", true }, ""},
		{"off loopback with auth but no client CA", func(c *broker.Config) {
			c.ClusterListen, c.Auth = "10.0.0.1:6222", true
		}, "cluster_listen: 10.0.0.1:6222 is not a loopback address and routes are not authenticated"},
		{"off loopback with auth and mutual TLS but no cluster secret", func(c *broker.Config) {
			c.ClusterListen, c.Auth = "10.0.0.1:6222", true
			c.TLSCert, c.TLSKey, c.TLSClientCA = certFile, keyFile, ca.File
		}, "cluster_secret_file: a clustered node with auth needs the cluster's secret"},
		{"off loopback with auth, mutual TLS and the cluster secret", func(c *broker.Config) {
			c.ClusterListen, c.Auth = "10.0.0.1:6222", true
			c.TLSCert, c.TLSKey, c.TLSClientCA = certFile, keyFile, ca.File
			c.ClusterSecretFile = secret
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := broker.DefaultConfig()
			good(&cfg)
			tc.set(&cfg)
			err := cfg.Validate()
			if tc.says == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("Validate = %v, want an error saying %q", err, tc.says)
			}
		})
	}
}
