package broker_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// startTLS runs a broker serving pair on both ports, requiring client
// certificates from clientCA when it is not "".
func startTLS(t *testing.T, pair brokertest.Pair, clientCA string) (*broker.Server, string, string) {
	t.Helper()
	certFile, keyFile := pair.Write(t, t.TempDir())
	s := brokertest.Start(t, func(c *broker.Config) {
		c.TLSCert, c.TLSKey, c.TLSClientCA = certFile, keyFile, clientCA
	})
	return s, certFile, keyFile
}

// httpsClient is an HTTP client trusting roots, presenting certs.
func httpsClient(roots *x509.CertPool, certs ...tls.Certificate) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs},
	}}
}

func keyPair(t *testing.T, p brokertest.Pair) tls.Certificate {
	t.Helper()
	c, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// get fetches /healthz of the HTTPS door and returns the serial of the
// certificate the server presented.
func get(c *http.Client, s *broker.Server) (*big.Int, error) {
	resp, err := c.Get("https://" + s.HTTPAddr() + "/healthz")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, errors.New(resp.Status)
	}
	return resp.TLS.PeerCertificates[0].SerialNumber, nil
}

// natsSerial is the serial of the certificate nc's server presented.
func natsSerial(t *testing.T, nc *nats.Conn) *big.Int {
	t.Helper()
	st, err := nc.TLSConnectionState()
	if err != nil {
		t.Fatal(err)
	}
	return st.PeerCertificates[0].SerialNumber
}

func mustConnect(t *testing.T, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(url, append([]nats.Option{nats.Timeout(5 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func refused(t *testing.T, what string, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: accepted, want refused", what)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("%s: %v, want an error saying %q", what, err, want)
	}
}

func TestTLSBothPorts(t *testing.T) {
	t.Parallel()
	ca := brokertest.NewCA(t, "semaq test CA")
	pair := ca.Server(t)
	s, _, _ := startTLS(t, pair, "")
	url := s.ClientURL()
	if !strings.HasPrefix(url, "tls://") {
		t.Fatalf("ClientURL %q, want tls://", url)
	}

	// A stock nats.go client with the CA, through the whole broker: the
	// SDK over TLS, the ingress, JetStream's PubAck.
	nc := mustConnect(t, url, nats.RootCAs(ca.File))
	if got := natsSerial(t, nc); got.Cmp(pair.Cert.SerialNumber) != 0 {
		t.Fatalf("NATS served serial %s, want %s", got, pair.Cert.SerialNumber)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Connect(ctx, url, client.WithNATSOptions(nats.RootCAs(ca.File)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokertest.AddStream(t, c, "TLS", "tls.>")
	if _, err := c.Publish(ctx, "tls.a", []byte("x")); err != nil {
		t.Fatalf("publish over TLS: %v", err)
	}

	// A client that does not trust the CA.
	_, err = nats.Connect(url, nats.Timeout(5*time.Second))
	refused(t, "NATS without the CA", err, "certificate signed by unknown authority")
	_, err = nats.Connect(url, nats.Timeout(5*time.Second), nats.RootCAs(brokertest.NewCA(t, "other CA").File))
	refused(t, "NATS with another CA", err, "certificate signed by unknown authority")

	// Plain text on the TLS port: the server offers only TLS and closes
	// the connection at the first byte that is not a handshake.
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(url, "tls://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	info, err := r.ReadString('\n')
	if err != nil || !strings.Contains(info, `"tls_required":true`) {
		t.Fatalf("INFO %q (%v), want tls_required", info, err)
	}
	if _, err := io.WriteString(conn, "CONNECT {\"verbose\":false}\r\nPING\r\n"); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(r)
	if strings.Contains(string(rest), "PONG") {
		t.Fatalf("plain-text client got PONG on the TLS port: %q", rest)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("plain-text client: connection left open, want closed")
	}

	// HTTPS with the CA.
	if got, err := get(httpsClient(ca.Pool()), s); err != nil || got.Cmp(pair.Cert.SerialNumber) != 0 {
		t.Fatalf("HTTPS GET: serial %v, %v; want %s", got, err, pair.Cert.SerialNumber)
	}
	_, err = get(httpsClient(nil), s)
	refused(t, "HTTPS without the CA", err, "certificate signed by unknown authority")
	// Plain HTTP to the HTTPS port: Go's server answers 400, never a page.
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + s.HTTPAddr() + "/healthz")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "HTTPS") {
			t.Fatalf("plain HTTP to the HTTPS port: %s %q, want 400 naming HTTPS", resp.Status, body)
		}
	}
}

func TestMutualTLS(t *testing.T) {
	t.Parallel()
	ca := brokertest.NewCA(t, "semaq test CA")
	other := brokertest.NewCA(t, "another CA")
	s, _, _ := startTLS(t, ca.Server(t), ca.File)
	url := s.ClientURL()

	good := ca.Client(t, "worker")
	goodCert, goodKey := good.Write(t, t.TempDir())
	nc := mustConnect(t, url, nats.RootCAs(ca.File), nats.ClientCert(goodCert, goodKey))
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, err := get(httpsClient(ca.Pool(), keyPair(t, good)), s); err != nil {
		t.Fatalf("HTTPS with a client certificate: %v", err)
	}

	// Go's client leaves out a certificate the server's CA list does not
	// name; GetClientCertificate sends it anyway, as an attacker would.
	foreign := keyPair(t, other.Client(t, "intruder"))
	for _, tc := range []struct {
		name string
		cert *tls.Certificate
	}{
		{"no client certificate", &tls.Certificate{}},
		{"a certificate from another CA", &foreign},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &tls.Config{RootCAs: ca.Pool(), GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
				return tc.cert, nil
			}}
			_, err := nats.Connect(url, nats.Timeout(5*time.Second), nats.Secure(cfg.Clone()), nats.MaxReconnects(0))
			refused(t, "NATS", err, "tls")
			hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg.Clone()}}
			_, err = get(hc, s)
			refused(t, "HTTPS", err, "tls")
		})
	}
}

func TestReloadTLS(t *testing.T) {
	t.Parallel()
	ca := brokertest.NewCA(t, "semaq test CA")
	first, second := ca.Server(t), ca.Server(t)
	s, certFile, keyFile := startTLS(t, first, "")
	url := s.ClientURL()
	dir := filepath.Dir(certFile)

	old := mustConnect(t, url, nats.RootCAs(ca.File))
	sub, err := old.SubscribeSync("reload.>")
	if err != nil {
		t.Fatal(err)
	}
	oldHTTP := httpsClient(ca.Pool())
	if got, err := get(oldHTTP, s); err != nil || got.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatalf("before reload: HTTPS serial %v, %v", got, err)
	}

	second.Write(t, dir)
	if err := s.ReloadTLS(); err != nil {
		t.Fatalf("ReloadTLS: %v", err)
	}
	// New connections see the new certificate on both ports.
	nc := mustConnect(t, url, nats.RootCAs(ca.File))
	if got := natsSerial(t, nc); got.Cmp(second.Cert.SerialNumber) != 0 {
		t.Fatalf("NATS after reload: serial %s, want the new %s", got, second.Cert.SerialNumber)
	}
	if got, err := get(httpsClient(ca.Pool()), s); err != nil || got.Cmp(second.Cert.SerialNumber) != 0 {
		t.Fatalf("HTTPS after reload: serial %v, %v; want the new %s", got, err, second.Cert.SerialNumber)
	}
	// Open connections stay, on the certificate they were made with.
	if !old.IsConnected() || natsSerial(t, old).Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatal("the NATS connection made before the reload was not kept")
	}
	if err := nc.Publish("reload.x", []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.NextMsg(5 * time.Second); err != nil {
		t.Fatalf("old connection after reload: %v", err)
	}
	if got, err := get(oldHTTP, s); err != nil || got.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatalf("kept-alive HTTPS connection after reload: serial %v, %v; want the old %s", got, err, first.Cert.SerialNumber)
	}
	// The broker's own connections went through the reload too.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Connect(ctx, url, client.WithNATSOptions(nats.RootCAs(ca.File)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokertest.AddStream(t, c, "RELOAD", "stored.>")
	if _, err := c.Publish(ctx, "stored.a", []byte("x")); err != nil {
		t.Fatalf("publish after reload: %v", err)
	}

	// Bad files are refused and the certificate in service stays.
	third := ca.Server(t)
	for _, tc := range []struct {
		name      string
		cert, key []byte
		says      string
	}{
		{"a broken certificate", []byte("-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n"), second.KeyPEM, "tls_cert"},
		{"a key that does not match", third.CertPEM, second.KeyPEM, "tls_key"},
		{"an empty key file", second.CertPEM, nil, "tls_key"},
		{"an expired certificate", ca.Expired(t).CertPEM, second.KeyPEM, "expired"},
	} {
		brokertest.WriteFile(t, certFile, tc.cert)
		brokertest.WriteFile(t, keyFile, tc.key)
		err := s.ReloadTLS()
		refused(t, "ReloadTLS with "+tc.name, err, tc.says)
		if got := natsSerial(t, mustConnect(t, url, nats.RootCAs(ca.File))); got.Cmp(second.Cert.SerialNumber) != 0 {
			t.Fatalf("NATS after a refused reload (%s): serial %s, want %s", tc.name, got, second.Cert.SerialNumber)
		}
		if got, err := get(httpsClient(ca.Pool()), s); err != nil || got.Cmp(second.Cert.SerialNumber) != 0 {
			t.Fatalf("HTTPS after a refused reload (%s): serial %v, %v", tc.name, got, err)
		}
	}
}

func TestReloadTLSWithoutTLS(t *testing.T) {
	t.Parallel()
	s := brokertest.Start(t)
	if err := s.ReloadTLS(); !errors.Is(err, broker.ErrTLSNotConfigured) {
		t.Fatalf("ReloadTLS without TLS: %v, want ErrTLSNotConfigured", err)
	}
}

func TestTLSConfigErrors(t *testing.T) {
	t.Parallel()
	ca := brokertest.NewCA(t, "semaq test CA")
	dir := t.TempDir()
	pair := ca.Server(t)
	certFile, keyFile := pair.Write(t, dir)
	otherKey := filepath.Join(dir, "other-key.pem")
	brokertest.WriteFile(t, otherKey, ca.Server(t).KeyPEM)
	garbage := filepath.Join(dir, "garbage.pem")
	brokertest.WriteFile(t, garbage, []byte("not a PEM file\n"))
	expired := filepath.Join(dir, "expired.pem")
	brokertest.WriteFile(t, expired, ca.Expired(t).CertPEM)
	missing := filepath.Join(dir, "missing.pem")

	for _, tc := range []struct {
		name                string
		cert, key, clientCA string
		says                string
	}{
		{"cert without key", certFile, "", "", "tls_key: tls_cert is set but tls_key is not"},
		{"key without cert", "", keyFile, "", "tls_cert: tls_key is set but tls_cert is not"},
		{"client CA without cert", "", "", ca.File, "tls_client_ca: needs tls_cert and tls_key"},
		{"missing cert", missing, keyFile, "", "tls_cert: open " + missing},
		{"missing key", certFile, missing, "", "tls_key: open " + missing},
		{"missing client CA", certFile, keyFile, missing, "tls_client_ca: open " + missing},
		{"cert not PEM", garbage, keyFile, "", "tls_cert: " + garbage + ": holds no PEM certificate"},
		{"key not PEM", certFile, garbage, "", "tls_key: " + garbage + " holds no PEM private key"},
		{"key of another cert", certFile, otherKey, "", "tls_key: " + otherKey + " does not go with the certificate"},
		{"client CA not PEM", certFile, keyFile, garbage, "tls_client_ca: " + garbage + " holds no PEM certificate"},
		{"expired cert", expired, keyFile, "", "tls_cert: " + expired + ": the certificate expired"},
		{"unreadable cert", dir, keyFile, "", "tls_cert: read " + dir},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := broker.DefaultConfig()
			cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA = tc.cert, tc.key, tc.clientCA
			refused(t, "Validate", cfg.Validate(), tc.says)
		})
	}
	cfg := broker.DefaultConfig()
	cfg.TLSCert, cfg.TLSKey, cfg.TLSClientCA = certFile, keyFile, ca.File
	if err := cfg.Validate(); err != nil {
		t.Fatalf("good TLS files: %v", err)
	}
}

// With no authentication, only loopback addresses are served unless the
// configuration says insecure.
func TestNonLoopbackNeedsInsecure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		listen, http string
		refused      string // the setting named, "" for accepted
	}{
		{"127.0.0.1:4222", "127.0.0.1:8080", ""},
		{"127.9.9.9:0", "", ""},
		{"[::1]:4222", "[::1]:8080", ""},
		{"localhost:4222", "LOCALHOST:8080", ""},
		{"0.0.0.0:4222", "127.0.0.1:8080", "listen"},
		{":4222", "127.0.0.1:8080", "listen"},
		{"[::]:4222", "", "listen"},
		{"192.168.1.10:4222", "", "listen"},
		{"[::ffff:10.0.0.1]:4222", "", "listen"},
		{"broker.example.com:4222", "", "listen"},
		{"127.0.0.1:4222", "0.0.0.0:8080", "http"},
		{"127.0.0.1:4222", ":8080", "http"},
		{"127.0.0.1:4222", "10.1.2.3:8080", "http"},
	} {
		cfg := broker.DefaultConfig()
		cfg.Listen, cfg.HTTP = tc.listen, tc.http
		err := cfg.Validate()
		if tc.refused == "" {
			if err != nil {
				t.Errorf("listen %s http %s: %v, want accepted", tc.listen, tc.http, err)
			}
			continue
		}
		if err == nil || !strings.HasPrefix(err.Error(), tc.refused+": ") || !strings.Contains(err.Error(), "not a loopback address") ||
			!strings.Contains(err.Error(), "--insecure") {
			t.Errorf("listen %s http %s: %v, want refused naming %s and --insecure", tc.listen, tc.http, err, tc.refused)
		}
		cfg.Insecure = true
		if err := cfg.Validate(); err != nil {
			t.Errorf("listen %s http %s with insecure: %v, want accepted", tc.listen, tc.http, err)
		}
	}
}

// With auth on, both doors authenticate every client (the HTTP door by
// bearer key) and may listen anywhere; without it both keep the rule.
// The gateway's key map is refused with auth: keys are the store's.
func TestAuthLiftsTheLoopbackRule(t *testing.T) {
	t.Parallel()
	cfg := broker.DefaultConfig()
	cfg.Auth = true
	cfg.Listen, cfg.HTTP = "0.0.0.0:4222", "0.0.0.0:8080"
	if err := cfg.Validate(); err != nil {
		t.Fatalf("auth on, listen and http on 0.0.0.0: %v", err)
	}
	cfg.GatewayAPIKeys = map[string]string{"k": "acme"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "semaq user add") {
		t.Fatalf("auth on with gateway_api_keys: %v, want refused pointing at semaq user add", err)
	}
	cfg.GatewayAPIKeys, cfg.Auth = nil, false
	if err := cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), "listen: ") {
		t.Fatalf("auth off, listen 0.0.0.0: %v, want refused", err)
	}
	cfg.Listen = "127.0.0.1:4222"
	if err := cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), "http: ") {
		t.Fatalf("auth off, http 0.0.0.0: %v, want refused naming http", err)
	}
}

// With auth, a reload swaps certificates and nothing else: connections
// made with a key stay open, and the tenants' accounts keep their users'
// traffic flowing (a reload of the NATS server's options would close the
// first and forget the second).
func TestReloadTLSWithAuthKeepsUsersAndTenants(t *testing.T) {
	t.Parallel()
	ca := brokertest.NewCA(t, "semaq test CA")
	first, second := ca.Server(t), ca.Server(t)
	dir := t.TempDir()
	certFile, keyFile := first.Write(t, dir)
	s := brokertest.Start(t, brokertest.WithAuth, func(c *broker.Config) { c.TLSCert, c.TLSKey = certFile, keyFile })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	connect := func(key string) *client.Client {
		t.Helper()
		c, err := client.Connect(ctx, s.ClientURL(), client.WithKey(key), client.WithNATSOptions(nats.RootCAs(ca.File)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	admin := connect(brokertest.AdminKey(t, s))
	addKey := func(r semaq.UserAddRequest) string {
		t.Helper()
		res, err := admin.AddUser(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		return res.Key
	}
	pubKey := addKey(semaq.UserAddRequest{Name: "acme-app", Tenant: "acme", Role: semaq.RolePublisher, Subjects: []string{"acme.>"}})
	readKey := addKey(semaq.UserAddRequest{Name: "acme-reader", Tenant: "acme", Role: semaq.RoleReader, Subjects: []string{"acme.>"}})
	reader := connect(readKey)
	sub, err := reader.Conn().SubscribeSync("acme.news")
	if err != nil {
		t.Fatal(err)
	}
	if err := reader.Conn().Flush(); err != nil {
		t.Fatal(err)
	}

	second.Write(t, dir)
	if err := s.ReloadTLS(); err != nil {
		t.Fatalf("ReloadTLS: %v", err)
	}
	if !admin.Conn().IsConnected() || !reader.Conn().IsConnected() {
		t.Fatal("a connection made with a key was closed by the reload")
	}
	if _, err := admin.ServerInfo(ctx); err != nil {
		t.Fatalf("the admin's connection after the reload: %v", err)
	}
	// A publisher of the tenant connecting after the reload, on the new
	// certificate, reaches the subscriber made before it.
	pub := connect(pubKey)
	if got := natsSerial(t, pub.Conn()); got.Cmp(second.Cert.SerialNumber) != 0 {
		t.Fatalf("NATS after reload: serial %s, want the new %s", got, second.Cert.SerialNumber)
	}
	if err := pub.Conn().Publish("acme.news", []byte("after the reload")); err != nil {
		t.Fatal(err)
	}
	if m, err := sub.NextMsg(10 * time.Second); err != nil || string(m.Data) != "after the reload" {
		t.Fatalf("the tenant's core message after the reload: %v, %v", m, err)
	}
}
