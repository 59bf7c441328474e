package broker

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"runtime"
	"strings"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/semaq/semaq/internal/metrics"
	"github.com/semaq/semaq/internal/quietlog"
)

// Routes authenticate as nodes (docs/cluster.md, Security). A route is a
// peer with every right over every account, so what it presents must be
// something no client holds: a client certificate is not (every client of a
// mutual-TLS cluster has one of the CA the routes are verified against).
// Every node of a cluster reads the same secret file, like the cookie of an
// Erlang cluster, and proves it on each route with an HMAC of its security
// settings under the secret; the node accepting a route checks that proof
// itself (the NATS server's custom router authentication), so a route from
// anything without the secret, or from a node whose auth or TLS settings
// differ, is refused with a log line naming why.

const (
	// routeUserPrefix starts the user name a node presents on its routes;
	// the rest is its security settings, in the clear, so a refusal can
	// name what differs.
	routeUserPrefix = "semaq-node/"
	// routeProofContext separates this use of the secret from any other.
	routeProofContext = "semaq route v1\x00"
	// MinClusterSecret and maxClusterSecret bound a secret file's text.
	MinClusterSecret = 32
	maxClusterSecret = 4096
)

// readClusterSecret reads and checks the cluster secret file.
func readClusterSecret(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cluster_secret_file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("cluster_secret_file: %s is not a regular file", path)
	}
	if fi.Size() > maxClusterSecret {
		return nil, fmt.Errorf("cluster_secret_file: %s holds %d bytes, at most %d", path, fi.Size(), maxClusterSecret)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("cluster_secret_file: %s is readable by other users (mode %04o): whoever reads it can join the cluster as a node; chmod 600 %s",
			path, fi.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cluster_secret_file: %w", err)
	}
	secret := []byte(strings.TrimSpace(string(b)))
	if len(secret) < MinClusterSecret {
		return nil, fmt.Errorf("cluster_secret_file: %s holds %d characters, at least %d are needed (generate one with: semaq cluster secret > %s)",
			path, len(secret), MinClusterSecret, path)
	}
	return secret, nil
}

// checkClusterSecret applies the secret's rules to the configuration.
func (c *Config) checkClusterSecret() error {
	if c.ClusterSecretFile == "" {
		if c.Clustered() && c.Auth {
			return errors.New("cluster_secret_file: a clustered node with auth needs the cluster's secret: routes prove they " +
				"belong to the cluster with it, since client certificates cannot (anyone holding one could join as a node). " +
				"Generate it once with `semaq cluster secret > cluster.secret`, give every node the same file (mode 600) " +
				"with --cluster-secret-file (docs/cluster.md, Security)")
		}
		return nil
	}
	if !c.Clustered() {
		return errors.New("cluster_secret_file: set, but the node is not clustered (cluster_name); remove it or join a cluster")
	}
	_, err := readClusterSecret(c.ClusterSecretFile)
	return err
}

// routeSettings are the settings every node of a cluster must share, as
// the node presents them on its routes.
func (c *Config) routeSettings() string {
	onOff := func(b bool) string {
		if b {
			return "on"
		}
		return "off"
	}
	tlsMode := "off"
	switch {
	case c.TLSCert != "" && c.TLSClientCA != "":
		tlsMode = "mutual"
	case c.TLSCert != "":
		tlsMode = "server"
	}
	return "auth=" + onOff(c.Auth) + ",tls=" + tlsMode + ",secret=" + onOff(c.ClusterSecretFile != "")
}

// routeCredentials are the user and password a node presents on its
// routes: its settings, and their HMAC under the secret ("" without one).
func routeCredentials(settings string, secret []byte) (user, password string) {
	user = routeUserPrefix + settings
	if len(secret) == 0 {
		return user, ""
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(routeProofContext))
	mac.Write([]byte(settings))
	return user, hex.EncodeToString(mac.Sum(nil))
}

// routeGuard is the node's router authentication: it admits a route that
// presents this node's settings and proves the secret. Safe for concurrent
// use.
type routeGuard struct {
	user, password string
	settings       string
	log            *slog.Logger
	metrics        *metrics.Metrics

	quiet quietlog.Gate // a flood of refusals logs once a second
}

var _ server.Authentication = (*routeGuard)(nil)

// Check implements server.Authentication for routes.
func (g *routeGuard) Check(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	var peerUser, peerPass string
	if o != nil {
		peerUser, peerPass = o.Username, o.Password
	}
	if peerUser != g.user {
		g.refuse(c, "settings", routeMismatch(g.settings, peerUser))
		return false
	}
	if subtle.ConstantTimeCompare([]byte(peerPass), []byte(g.password)) != 1 {
		g.refuse(c, "secret", "it does not hold this cluster's secret (cluster_secret_file differs)")
		return false
	}
	return true
}

func (g *routeGuard) refuse(c server.ClientAuthentication, reason, why string) {
	g.metrics.AuthFailure("route_" + reason)
	remote := ""
	if a := c.RemoteAddress(); a != nil {
		remote = a.String()
	}
	if g.quiet.Open(reason) {
		g.log.Warn("cluster: route refused: "+why, "remote", remote, "this_node", g.settings)
	}
}

// guardRoutes makes the node present its route credentials on every route
// it solicits (configured and learned) and check them on every route it
// accepts.
func (s *Server) guardRoutes(opts *server.Options) error {
	if !s.cfg.Clustered() {
		return nil
	}
	var secret []byte
	if s.cfg.ClusterSecretFile != "" {
		var err error
		if secret, err = readClusterSecret(s.cfg.ClusterSecretFile); err != nil {
			return err
		}
	}
	settings := s.cfg.routeSettings()
	user, password := routeCredentials(settings, secret)
	// The NATS server presents these on the routes it learns from others
	// and tells connecting routes that authentication is required.
	opts.Cluster.Username, opts.Cluster.Password = user, password
	for _, u := range opts.Routes {
		u.User = url.UserPassword(user, password)
	}
	opts.CustomRouterAuthentication = &routeGuard{
		user: user, password: password, settings: settings,
		log: s.log, metrics: s.metrics,
	}
	return nil
}

// routeMismatch names what differs between this node's settings and what a
// peer presented.
func routeMismatch(mine, peerUser string) string {
	theirs, ok := strings.CutPrefix(peerUser, routeUserPrefix)
	if !ok {
		return "it is not a SemaQ node of this cluster (a plain NATS server, or a client certificate without node credentials)"
	}
	have := map[string]string{}
	for _, kv := range strings.Split(mine, ",") {
		k, v, _ := strings.Cut(kv, "=")
		have[k] = v
	}
	var diffs []string
	for _, kv := range strings.Split(theirs, ",") {
		k, v, _ := strings.Cut(kv, "=")
		if w, ok := have[k]; !ok || w != v {
			diffs = append(diffs, fmt.Sprintf("%s=%s there, %s=%s here", k, v, k, w))
		}
	}
	if len(diffs) == 0 {
		diffs = append(diffs, fmt.Sprintf("it presents %q", theirs))
	}
	return "its settings differ from this node's (" + strings.Join(diffs, "; ") + "): give every node the same auth, TLS and cluster secret"
}
