package broker

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ErrTLSNotConfigured is ReloadTLS's answer on a node that serves no TLS.
var ErrTLSNotConfigured = errors.New("broker: TLS is not configured (tls_cert, tls_key)")

// natsTLSTimeout bounds a NATS client's TLS handshake.
const natsTLSTimeout = 2 * time.Second

// tlsFiles is what tls_cert, tls_key and tls_client_ca hold, read and checked.
type tlsFiles struct {
	cert      tls.Certificate
	clientCAs *x509.CertPool // nil: no client certificate is asked for
}

// loadTLS reads the TLS files of c; nil without TLS. Errors name the setting.
func (c *Config) loadTLS() (*tlsFiles, error) {
	switch {
	case c.TLSCert == "" && c.TLSKey == "":
		if c.TLSClientCA != "" {
			return nil, errors.New("tls_client_ca: needs tls_cert and tls_key (client certificates are checked in the TLS handshake)")
		}
		return nil, nil
	case c.TLSKey == "":
		return nil, errors.New("tls_key: tls_cert is set but tls_key is not; set both or neither")
	case c.TLSCert == "":
		return nil, errors.New("tls_cert: tls_key is set but tls_cert is not; set both or neither")
	}
	certPEM, err := os.ReadFile(c.TLSCert)
	if err != nil {
		return nil, fmt.Errorf("tls_cert: %w", err)
	}
	leaf, err := firstCertificate(certPEM)
	if err != nil {
		return nil, fmt.Errorf("tls_cert: %s: %w", c.TLSCert, err)
	}
	if time.Now().After(leaf.NotAfter) {
		return nil, fmt.Errorf("tls_cert: %s: the certificate expired at %s", c.TLSCert, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	keyPEM, err := os.ReadFile(c.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("tls_key: %w", err)
	}
	if !hasPEM(keyPEM, "PRIVATE KEY") {
		return nil, fmt.Errorf("tls_key: %s holds no PEM private key", c.TLSKey)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("tls_key: %s does not go with the certificate of tls_cert %s: %w", c.TLSKey, c.TLSCert, err)
	}
	f := &tlsFiles{cert: cert}
	if c.TLSClientCA != "" {
		caPEM, err := os.ReadFile(c.TLSClientCA)
		if err != nil {
			return nil, fmt.Errorf("tls_client_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(caPEM) {
			return nil, fmt.Errorf("tls_client_ca: %s holds no PEM certificate", c.TLSClientCA)
		}
		f.clientCAs = pool
	}
	return f, nil
}

// firstCertificate parses the first certificate of a PEM file: the one
// served, its chain after it.
func firstCertificate(b []byte) (*x509.Certificate, error) {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return nil, errors.New("holds no PEM certificate")
		}
		if block.Type == "CERTIFICATE" {
			cert, err := x509.ParseCertificate(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("bad certificate: %w", err)
			}
			return cert, nil
		}
	}
}

// hasPEM reports whether b holds a PEM block whose type ends in suffix.
func hasPEM(b []byte, suffix string) bool {
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			return false
		}
		if strings.HasSuffix(block.Type, suffix) {
			return true
		}
	}
}

// config is the TLS configuration of one port; nextProtos are its ALPN
// protocols.
func (f *tlsFiles) config(nextProtos ...string) *tls.Config {
	c := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{f.cert},
		NextProtos:   nextProtos,
	}
	if f.clientCAs != nil {
		c.ClientCAs = f.clientCAs
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c
}

// setNATS makes the client port of opts serve t's certificates with
// nats-server's own TLS: every handshake takes the configuration current at
// that moment (ReloadTLS), so a reload never goes through the NATS server's
// own reload, which would close every connection made with a key and forget
// the accounts the node made (docs/security.md).
func (t *tlsState) setNATS(opts *server.Options) {
	cur := t.cur.Load()
	opts.TLSConfig = &tls.Config{
		MinVersion: tls.VersionTLS12,
		// What nats-server reads of the configuration itself (the
		// certificate's expiry in /varz) is the first one's.
		Certificates: cur.nats.Certificates,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return t.cur.Load().nats, nil
		},
	}
	opts.TLSVerify = cur.clientCAs
	opts.TLSTimeout = natsTLSTimeout.Seconds()
}

// routeTLSTimeout bounds a route's TLS handshake: across hosts it may take
// longer than a client's.
const routeTLSTimeout = 5 * time.Second

// routeConfig is the TLS of the cluster port, both ways: a node accepting a
// route serves its certificate and, with tls_client_ca, requires one of that
// CA from the other node; a node soliciting a route presents its certificate
// and verifies the other's against tls_client_ca (the system roots without
// it). With mutual TLS the certificate must allow both server and client
// authentication (docs/cluster.md, Security).
func (f *tlsFiles) routeConfig() *tls.Config {
	c := f.config()
	if f.clientCAs != nil {
		c.RootCAs = f.clientCAs
	}
	return c
}

// setRoutes makes the cluster port of opts serve t's certificates: an
// accepted route's handshake takes the configuration current at that
// moment, a solicited one presents the current certificate. The CAs a
// soliciting node checks the other's certificate against are the ones it
// started with (nats-server copies that part of the configuration).
func (t *tlsState) setRoutes(opts *server.Options) {
	cur := t.cur.Load()
	c := cur.route.Clone()
	c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		return t.cur.Load().route, nil
	}
	c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &t.cur.Load().route.Certificates[0], nil
	}
	opts.Cluster.TLSConfig = c
	opts.Cluster.TLSTimeout = routeTLSTimeout.Seconds()
}

// tlsServing is what a node serves: one configuration per port.
type tlsServing struct {
	nats, route, http *tls.Config
	clientCAs         bool // client certificates are asked for
}

// tlsState is the TLS of a running node: what ReloadTLS swaps. Open
// connections keep the certificate they were made with.
type tlsState struct {
	mu  sync.Mutex // serialises reloads
	cur atomic.Pointer[tlsServing]
}

// serve makes f what every new handshake takes.
func (t *tlsState) serve(f *tlsFiles) {
	t.cur.Store(&tlsServing{nats: f.config(), route: f.routeConfig(), http: f.httpConfig(), clientCAs: f.clientCAs != nil})
}

// httpConfig serves HTTP/1.1 only: the front door's connection cap and
// per-connection deadlines bound requests because each connection carries
// one at a time, which HTTP/2's streams would not.
func (f *tlsFiles) httpConfig() *tls.Config { return f.config("http/1.1") }

// httpListener is the configuration of the HTTPS listener, nil without
// TLS: every handshake takes the configuration current at that moment.
func (t *tlsState) httpListener() *tls.Config {
	if t.cur.Load() == nil {
		return nil
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return t.cur.Load().http, nil
		},
	}
}

// ReloadTLS reads tls_cert, tls_key and tls_client_ca again and serves them
// to new connections on the NATS and HTTP ports and new routes; open
// connections stay as they are, and nothing else of the node changes (the
// NATS server is not reloaded). Files that do not pass the checks of
// Validate are refused with an error and the certificates in service stay.
// semaq serve calls it on SIGHUP.
func (s *Server) ReloadTLS() error {
	s.tls.mu.Lock()
	defer s.tls.mu.Unlock()
	cur := s.tls.cur.Load()
	if cur == nil {
		return ErrTLSNotConfigured
	}
	if s.ns == nil || !s.ns.Running() {
		return errors.New("broker: tls reload: the NATS server is not running")
	}
	f, err := s.cfg.loadTLS()
	if err != nil {
		return fmt.Errorf("broker: tls reload refused: %w", err)
	}
	if f == nil {
		return ErrTLSNotConfigured
	}
	if (f.clientCAs != nil) != cur.clientCAs {
		// The settings are the node's start's: only files change.
		return errors.New("broker: tls reload refused: tls_client_ca was added or removed; that takes a restart")
	}
	s.tls.serve(f)
	return nil
}

// checkExposure refuses a client or HTTP port on a non-loopback address
// unless Insecure: with no authentication every client is the public user
// (docs/security.md), which is fine on one machine only. With Auth, both
// doors authenticate every client (the HTTP door by bearer key) and may
// listen anywhere.
func (c *Config) checkExposure() error {
	if c.Insecure {
		return nil
	}
	for _, p := range []struct{ key, flag, addr string }{{"listen", "--listen", c.Listen}, {"http", "--http", c.HTTP}} {
		if p.addr == "" || c.Auth {
			continue
		}
		host, _, err := net.SplitHostPort(p.addr)
		if err != nil || isLoopback(host) {
			continue // a bad address is reported on its own
		}
		hint := ", turn on auth: true (--auth)"
		return fmt.Errorf("%s: %s is not a loopback address and no authentication is configured: every client that "+
			"can reach it would be the public user, able to read other clients' traffic (docs/security.md); "+
			"keep %s on 127.0.0.1, ::1 or localhost%s, or set insecure: true (--insecure) to listen there anyway",
			p.key, p.addr, p.flag, hint)
	}
	return nil
}

// isLoopback reports whether host names only this machine. Other host
// names are not resolved: what they resolve to can change.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
