package broker_test

import (
	"context"
	"crypto/tls"
	"net/url"
	"testing"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
)

// routeRefusals is how many routes s refused for reason (route_settings,
// route_secret), from its metrics.
func routeRefusals(t *testing.T, s *broker.Server, reason string) float64 {
	t.Helper()
	return counterOf(t, s, "semaq_auth_failures_total", "reason", reason)
}

// counterOf reads the counter name{label=value} of s's metrics (0 when it
// has not counted yet).
func counterOf(t *testing.T, s *broker.Server, name, label, value string) float64 {
	t.Helper()
	mfs, err := s.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// The attack of a client certificate holder on a cluster with auth and
// mutual TLS: their own nats-server, presenting a client certificate of the
// cluster's CA, connects to a node's cluster port as a route. Before route
// credentials it was admitted and read every account. Now it is refused
// whatever it claims to be, and so is a real SemaQ node whose auth setting
// differs from the cluster's.
func TestClusterRefusesRoutesWithoutNodeCredentials(t *testing.T) {
	t.Parallel()
	ca := brokertest.NewCA(t, "semaq cluster CA")
	certFile, keyFile := ca.Node(t, "node").Write(t, t.TempDir())
	secret, err := brokertest.ClusterSecretFile(t)
	if err != nil {
		t.Fatal(err)
	}
	c := brokertest.StartCluster(t, 3, func(cfg *broker.Config) {
		cfg.Auth = true
		cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA = certFile, keyFile, ca.File
		cfg.ClusterSecretFile = secret
	})
	target := c.Node(0)

	mallory := ca.Client(t, "mallory")
	cert, err := tls.X509KeyPair(mallory.CertPEM, mallory.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		user   *url.Userinfo
		reason string
	}{
		{"plain nats-server", nil, "route_settings"},
		// The user name is no secret (it is the settings, in the clear);
		// the password is an HMAC under the cluster's secret.
		{"guessed node credentials", url.UserPassword("semaq-node/auth=on,tls=mutual,secret=on", "00ff"), "route_secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := routeRefusals(t, target, tc.reason)
			route := &url.URL{Scheme: "nats", Host: target.ClusterAddr(), User: tc.user}
			rogue, err := server.NewServer(&server.Options{
				ServerName: "mallory", Host: "127.0.0.1", Port: server.RANDOM_PORT, NoSigs: true, NoLog: true,
				Cluster: server.ClusterOpts{
					Name: brokertest.ClusterName, Host: "127.0.0.1", Port: server.RANDOM_PORT,
					TLSConfig:  &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12},
					TLSTimeout: 5,
				},
				Routes: []*url.URL{route},
			})
			if err != nil {
				t.Fatal(err)
			}
			go rogue.Start()
			t.Cleanup(rogue.Shutdown)
			// Refused, and refused again on each of its next attempts: a
			// route the node had admitted would be kept, not retried. (The
			// rogue's own route count is no proof either way: it lists its
			// attempt until the node closes it.)
			waitFor(t, "three "+tc.reason+" refusals of the rogue route", func() bool { return routeRefusals(t, target, tc.reason) >= before+3 })
		})
	}

	t.Run("node with auth off", func(t *testing.T) {
		before := routeRefusals(t, target, "route_settings")
		cfg := broker.DefaultConfig()
		cfg.DataDir = t.TempDir()
		cfg.Listen, cfg.HTTP = "127.0.0.1:0", ""
		cfg.Name, cfg.ClusterName, cfg.ClusterListen = "n4", brokertest.ClusterName, "127.0.0.1:0"
		cfg.Routes = []string{"nats://" + target.ClusterAddr()}
		cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA = certFile, keyFile, ca.File
		cfg.ClusterSecretFile = secret // the secret, but not the cluster's auth
		n4, err := broker.New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		started := make(chan error, 1)
		go func() { started <- n4.Start(ctx) }()
		waitFor(t, "the auth-off node's route refused", func() bool { return routeRefusals(t, target, "route_settings") > before })
		cancel()
		if err := <-started; err == nil {
			_ = n4.Shutdown(context.Background())
			t.Fatal("a node with auth off joined a cluster with auth on")
		}
	})
}
