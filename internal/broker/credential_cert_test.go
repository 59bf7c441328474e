package broker_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509/pkix"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/semaq"
)

// certEnv is a node with auth on serving TLS, verifying client
// certificates against ca when clientCA.
type certEnv struct {
	t     *testing.T
	s     *broker.Server
	ca    *brokertest.CA
	admin *client.Client
	box   []nats.Option // TLS with a certificate mapped to no user
}

func newCertEnv(t *testing.T, clientCA bool) *certEnv {
	t.Helper()
	ca := brokertest.NewCA(t, "semaq test CA")
	certFile, keyFile := ca.Server(t).Write(t, t.TempDir())
	s := brokertest.Start(t, brokertest.WithAuth, func(c *broker.Config) {
		c.TLSCert, c.TLSKey = certFile, keyFile
		if clientCA {
			c.TLSClientCA = ca.File
		}
	})
	e := &certEnv{t: t, s: s, ca: ca, box: e2eTLS(t, ca, ca.Client(t, "admin-box"))}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin, err := client.Connect(ctx, s.ClientURL(), client.WithKey(brokertest.AdminKey(t, s)), client.WithNATSOptions(e.box...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(admin.Close)
	e.admin = admin
	return e
}

// e2eTLS are the NATS options trusting ca and presenting pair.
func e2eTLS(t *testing.T, ca *brokertest.CA, pair brokertest.Pair) []nats.Option {
	t.Helper()
	cert, key := pair.Write(t, t.TempDir())
	return []nats.Option{nats.RootCAs(ca.File), nats.ClientCert(cert, key), nats.MaxReconnects(0), nats.Timeout(5 * time.Second)}
}

func (e *certEnv) dial(opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect(e.s.ClientURL(), opts...)
}

func TestCertUser(t *testing.T) {
	e := newCertEnv(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	brokertest.AddStream(t, e.admin, "ORD", "orders.>")
	resp, err := e.admin.AddUser(ctx, semaq.UserAddRequest{Name: "etl", Tenant: "acme", Role: semaq.RolePublisher,
		Subjects: []string{"orders.>"}, CertSubject: "cn=etl, o=acme"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Key != "" || len(resp.User.Keys) != 0 || resp.User.CertSubject != "CN=etl,O=acme" {
		t.Fatalf("add: %+v, want the canonical subject and no key", resp)
	}
	etl := e2eTLS(t, e.ca, e.ca.ClientSubject(t, pkix.Name{CommonName: "etl", Organization: []string{"acme"}}))

	// No key: the certificate is the user, with its role and tenant.
	c, err := client.Connect(ctx, e.s.ClientURL(), client.WithUser("etl"), client.WithNATSOptions(etl...))
	if err != nil {
		t.Fatalf("connect with the certificate: %v", err)
	}
	defer c.Close()
	ack, err := c.Publish(ctx, "orders.acme.1", []byte(`{"n":1}`))
	if err != nil {
		t.Fatalf("publish on its subject: %v", err)
	}
	op, err := brokertest.DialOperator(e.s, e.box...)
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close()
	env := &tenantEnv{t: t, op: op, admin: e.admin}
	if got := env.stored(ack.Sequence).Header.Get(semaq.HdrTenant); got != "acme" {
		t.Fatalf("stored tenant %q, want acme", got)
	}
	if _, err := c.Publish(ctx, "orders.acme.2", []byte(`{}`), client.WithTenant("globex")); !errors.Is(err, semaq.ErrForbidden) {
		t.Fatalf("another tenant named: %v, want ErrForbidden", err)
	}
	errOpt, errs := permErrs()
	probe, err := e.dial(append(etl, errOpt)...)
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	if err := probe.Publish(semaq.APIUserList, nil); err != nil {
		t.Fatal(err)
	}
	_ = probe.Flush()
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "Permissions Violation") {
			t.Fatalf("user list by a publisher: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("a publisher by certificate reaches the user API")
	}

	// Refused: a certificate of the CA mapped to no one, a subject that
	// differs in case or in order, another user's name.
	for name, subject := range map[string]pkix.Name{
		"unmapped":  {CommonName: "stranger", Organization: []string{"acme"}},
		"case":      {CommonName: "ETL", Organization: []string{"acme"}},
		"extra RDN": {CommonName: "etl", Organization: []string{"acme"}, Country: []string{"DE"}},
	} {
		_, err := e.dial(e2eTLS(t, e.ca, e.ca.ClientSubject(t, subject))...)
		authRefused(t, name, err)
	}
	_, err = e.dial(append(etl, nats.UserInfo("admin", ""))...)
	authRefused(t, "the certificate under another user's name", err)
	// A certificate of another CA, however it is named, ends at TLS.
	other := brokertest.NewCA(t, "another CA")
	forged := keyPair(t, other.ClientSubject(t, pkix.Name{CommonName: "etl", Organization: []string{"acme"}}))
	cfg := &tls.Config{RootCAs: e.ca.Pool(), GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &forged, nil
	}}
	_, err = e.dial(nats.Secure(cfg), nats.MaxReconnects(0), nats.Timeout(5*time.Second))
	refused(t, "a certificate of another CA", err, "tls")

	// A key beside a certificate wins: the certificate then authenticated
	// the channel only.
	withKey, err := client.Connect(ctx, e.s.ClientURL(), client.WithKey(brokertest.AdminKey(t, e.s)), client.WithNATSOptions(etl...))
	if err != nil {
		t.Fatal(err)
	}
	defer withKey.Close()
	if _, err := withKey.Users(ctx); err != nil {
		t.Fatalf("admin key with etl's certificate: %v, want the admin's rights", err)
	}

	// Plain text to the TLS port, with a good key: closed, never served.
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(e.s.ClientURL(), "tls://"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(conn, `CONNECT {"verbose":false,"auth_token":"`+brokertest.AdminKey(t, e.s)+"\"}\r\nPING\r\n")
	rest, err := io.ReadAll(r)
	var ne net.Error
	if strings.Contains(string(rest), "PONG") || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("plain text on the TLS port: %q %v, want the connection closed", rest, err)
	}

	// Removal closes the connection and refuses the certificate after.
	closed := make(chan struct{})
	nc, err := e.dial(append(etl, nats.ClosedHandler(func(*nats.Conn) { close(closed) }))...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	rm, err := e.admin.RemoveUser(ctx, "etl")
	if err != nil || rm.Closed != 3 {
		t.Fatalf("rm: %+v %v, want 3 connections closed", rm, err)
	}
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("the removed user's connection is still open")
	}
	_, err = e.dial(etl...)
	authRefused(t, "certificate of a removed user", err)
}

// Without tls_client_ca the server asks for no certificate: one sent
// anyway is not verified, and names no one.
func TestCertUserNeedsVerification(t *testing.T) {
	e := newCertEnv(t, false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.admin.AddUser(ctx, semaq.UserAddRequest{Name: "etl", Role: semaq.RoleAdmin, CertSubject: "CN=etl"}); err != nil {
		t.Fatal(err)
	}
	pair := keyPair(t, e.ca.Client(t, "etl"))
	cfg := &tls.Config{RootCAs: e.ca.Pool(), GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &pair, nil }}
	_, err := e.dial(nats.Secure(cfg), nats.MaxReconnects(0), nats.Timeout(5*time.Second))
	authRefused(t, "an unverified certificate", err)
	for _, bad := range []struct{ subject, want string }{
		{"CN=", "empty value"},
		{strings.Repeat("OU=x,", 250), "longer than 1024"},
		{"CN=etl", "already the credential of user etl"},
	} {
		_, err := e.admin.AddUser(ctx, semaq.UserAddRequest{Name: "etl2", Role: semaq.RoleAdmin, CertSubject: bad.subject})
		if !errors.Is(err, semaq.ErrBadRequest) || !strings.Contains(err.Error(), bad.want) {
			t.Fatalf("cert subject %.20q: %v, want a refusal saying %q", bad.subject, err, bad.want)
		}
	}
}
