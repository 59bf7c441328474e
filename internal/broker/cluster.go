package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"sort"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// MaxRoutes bounds the routes one node is configured with.
const MaxRoutes = 64

// nodeNameRE is what a node or cluster name may be: NATS puts both in
// subjects and log lines.
var nodeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// Clustered reports whether the node joins a cluster.
func (c *Config) Clustered() bool { return c.ClusterName != "" }

// checkCluster reports the first problem with the cluster settings, naming
// the setting.
func (c *Config) checkCluster() error {
	if c.Name != "" && !nodeNameRE.MatchString(c.Name) {
		return fmt.Errorf("name: %q is not a node name (1 to 64 letters, digits, '-' or '_', starting with a letter or digit)", c.Name)
	}
	if c.ClusterName == "" {
		switch {
		case c.ClusterListen != "":
			return errors.New("cluster_name: cluster_listen is set but cluster_name is not; name the cluster (--cluster-name) on every node")
		case len(c.Routes) > 0:
			return errors.New("cluster_name: routes are set but cluster_name is not; a node joins a cluster with cluster_name, cluster_listen and routes")
		}
		return nil
	}
	if !nodeNameRE.MatchString(c.ClusterName) {
		return fmt.Errorf("cluster_name: %q is not a cluster name (1 to 64 letters, digits, '-' or '_', starting with a letter or digit)", c.ClusterName)
	}
	if c.ClusterListen == "" {
		return errors.New("cluster_listen: cluster_name is set but cluster_listen is not; give the address other nodes reach this one on (--cluster-listen host:port)")
	}
	if _, _, err := splitHostPort(c.ClusterListen); err != nil {
		return fmt.Errorf("cluster_listen: %w", err)
	}
	if c.ClusterAdvertise != "" {
		if host, port, err := splitHostPort(c.ClusterAdvertise); err != nil || host == "" || port == 0 {
			return fmt.Errorf("cluster_advertise: %q is not host:port with a host and a port", c.ClusterAdvertise)
		}
	}
	if c.Name == "" {
		return errors.New("name: a clustered node needs a name unique in its cluster (--node n1): JetStream's replicas are placed by node name")
	}
	if len(c.Routes) == 0 {
		return errors.New("routes: a clustered node needs the cluster addresses of the other nodes (--routes nats://host:port,...)")
	}
	if len(c.Routes) > MaxRoutes {
		return fmt.Errorf("routes: %d routes, at most %d", len(c.Routes), MaxRoutes)
	}
	seen := make(map[string]bool, len(c.Routes))
	for _, r := range c.Routes {
		u, err := parseRoute(r)
		if err != nil {
			return fmt.Errorf("routes: %w", err)
		}
		if seen[u.Host] {
			return fmt.Errorf("routes: %s is listed twice", u.Host)
		}
		seen[u.Host] = true
	}
	return nil
}

// parseRoute checks one route: nats://host:port (nats-route:// and tls://
// are accepted as NATS spells them), nothing else.
func parseRoute(r string) (*url.URL, error) {
	u, err := url.Parse(r)
	if err != nil {
		return nil, fmt.Errorf("%q is not a route URL: want nats://host:port (%w)", r, err)
	}
	switch u.Scheme {
	case "nats", "nats-route", "tls":
	default:
		return nil, fmt.Errorf("%q is not a route URL: want nats://host:port", r)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%q carries credentials; routes take none (docs/cluster.md, Security)", r)
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("%q: a route is nats://host:port, with no path or query", r)
	}
	host, _, err := splitHostPort(u.Host)
	if err != nil {
		return nil, fmt.Errorf("route %q: %w", r, err)
	}
	if host == "" {
		return nil, fmt.Errorf("route %q names no host", r)
	}
	return u, nil
}

// checkClusterExposure applies the loopback rule to the cluster port: a
// route is a peer with every right, so another machine may reach the port
// only with insecure, or with auth and mutual TLS (auth authenticates
// clients, not routes; the cluster secret does, cluster_auth.go).
func (c *Config) checkClusterExposure() error {
	if c.Insecure || c.ClusterListen == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(c.ClusterListen)
	if err != nil || isLoopback(host) {
		return nil
	}
	if c.Auth && c.TLSClientCA != "" {
		return nil
	}
	if c.Auth {
		return fmt.Errorf("cluster_listen: %s is not a loopback address and routes are not authenticated: auth checks clients, "+
			"not the other nodes; set tls_cert, tls_key and tls_client_ca (--tls-client-ca) so routes are mutual TLS, with "+
			"the cluster secret (cluster_secret_file) proving they are nodes (docs/cluster.md, Security), keep --cluster-listen "+
			"on loopback, or set insecure: true (--insecure)", c.ClusterListen)
	}
	return fmt.Errorf("cluster_listen: %s is not a loopback address and no authentication is configured: anything that "+
		"can reach it could join the cluster as a node and read every message (docs/cluster.md, Security); keep "+
		"--cluster-listen on 127.0.0.1, ::1 or localhost, turn on auth: true (--auth) with mutual TLS "+
		"(tls_client_ca), or set insecure: true (--insecure) to listen there anyway", c.ClusterListen)
}

// setCluster makes opts join the cluster of c; with tlsFiles the routes
// are encrypted with what t serves (tls.go).
func (c *Config) setCluster(opts *server.Options, tlsFiles *tlsFiles, t *tlsState) error {
	if !c.Clustered() {
		return nil
	}
	host, port, err := splitHostPort(c.ClusterListen)
	if err != nil {
		return err
	}
	opts.Cluster.Name = c.ClusterName
	opts.Cluster.Host = host
	opts.Cluster.Port = port
	opts.Cluster.Advertise = c.ClusterAdvertise
	if port == 0 {
		opts.Cluster.Port = server.RANDOM_PORT
	}
	// Explicit routes are retried for as long as the node runs: nodes may
	// start in any order.
	opts.Routes = nil
	for _, r := range c.Routes {
		u, err := parseRoute(r)
		if err != nil {
			return err
		}
		opts.Routes = append(opts.Routes, u)
	}
	if tlsFiles != nil {
		t.setRoutes(opts)
	}
	return nil
}

// clusterWaitLog is how often a node waiting for its cluster says so.
const clusterWaitLog = 5 * time.Second

// waitJetStreamCluster returns once JetStream's meta group has a leader this
// node is current with: before that no stream or bucket can be made or
// opened. A node waits for as long as ctx allows, since the other nodes may
// start later; it says what it waits for every few seconds.
func (s *Server) waitJetStreamCluster(ctx context.Context) error {
	if !s.cfg.Clustered() {
		return nil
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	next := start.Add(clusterWaitLog)
	for {
		if s.ns.JetStreamIsCurrent() {
			return nil
		}
		if now := time.Now(); now.After(next) {
			next = now.Add(clusterWaitLog)
			s.log.Info("waiting for the cluster: JetStream needs a meta leader, elected by a majority of the nodes",
				"cluster", s.cfg.ClusterName, "routed_nodes", len(s.routedNodes()), "waited", now.Sub(start).Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("broker: cluster %s: no JetStream meta leader yet (%d other nodes routed): %w",
				s.cfg.ClusterName, len(s.routedNodes()), ctx.Err())
		case <-tick.C:
		}
	}
}

// routedNodes are the names of the nodes this one has a route to, sorted.
func (s *Server) routedNodes() []string {
	if s.ns == nil {
		return nil
	}
	rz, err := s.ns.Routez(nil)
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	var names []string
	for _, r := range rz.Routes {
		if r.RemoteName != "" && !seen[r.RemoteName] {
			seen[r.RemoteName] = true
			names = append(names, r.RemoteName)
		}
	}
	sort.Strings(names)
	return names
}

// ClusterAddr is the address of the cluster port, "" when the node is not
// clustered or not running.
func (s *Server) ClusterAddr() string {
	if s.ns == nil || !s.cfg.Clustered() {
		return ""
	}
	if a := s.ns.ClusterAddr(); a != nil {
		return a.String()
	}
	return ""
}
