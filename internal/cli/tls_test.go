package cli

import (
	"bytes"
	"math/big"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/semaq/semaq/internal/broker"
	"github.com/semaq/semaq/internal/brokertest"
)

// waitLog waits until the child has logged a line containing want, n times
// in all.
func (c *child) waitLog(t *testing.T, want string, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for strings.Count(c.output(), want) < n {
		select {
		case <-c.done:
			t.Fatalf("semaq serve exited waiting for %q: %v\n%s", want, c.err, c.output())
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			t.Fatalf("semaq serve did not log %q\n%s", want, c.output())
		}
	}
}

// serial is the serial number of the certificate the NATS server at url
// presents to a new connection.
func serial(t *testing.T, url, ca string) *big.Int {
	t.Helper()
	nc, err := nats.Connect(url, nats.RootCAs(ca), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	st, err := nc.TLSConnectionState()
	if err != nil {
		t.Fatal(err)
	}
	return st.PeerCertificates[0].SerialNumber
}

// semaq serve with TLS; client commands with --tls-ca; SIGHUP reloads, and a
// bad file on SIGHUP leaves the node serving the old certificate.
func TestServeTLSAndSIGHUP(t *testing.T) {
	ca := brokertest.NewCA(t, "semaq test CA")
	dir := t.TempDir()
	first, second := ca.Server(t), ca.Server(t)
	certFile, keyFile := first.Write(t, dir)
	srv := startChild(t, "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--tls-cert", certFile, "--tls-key", keyFile)
	if !strings.HasPrefix(srv.url, "tls://") {
		t.Fatalf("ready line names %q, want tls://", srv.url)
	}

	mustSemaq(t, srv.url, "", "stream", "add", "TLS", "--subjects", "tls.>", "--tls-ca", ca.File)
	if out := mustSemaq(t, srv.url, "", "stream", "ls", "--tls-ca", ca.File); !strings.Contains(out, "TLS") {
		t.Fatalf("stream ls over TLS: %q", out)
	}
	mustFailSemaq(t, srv.url, "certificate signed by unknown authority", "stream", "ls")
	if got := serial(t, srv.url, ca.File); got.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatalf("serial %s, want %s", got, first.Cert.SerialNumber)
	}

	second.Write(t, dir)
	if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	srv.waitLog(t, "TLS certificates reloaded", 1)
	if got := serial(t, srv.url, ca.File); got.Cmp(second.Cert.SerialNumber) != 0 {
		t.Fatalf("after SIGHUP: serial %s, want the new %s", got, second.Cert.SerialNumber)
	}

	brokertest.WriteFile(t, certFile, []byte("not a certificate"))
	if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	srv.waitLog(t, "TLS reload failed", 1)
	if !strings.Contains(srv.output(), "tls_cert: "+certFile) {
		t.Fatalf("the failed reload does not name tls_cert:\n%s", srv.output())
	}
	if got := serial(t, srv.url, ca.File); got.Cmp(second.Cert.SerialNumber) != 0 {
		t.Fatalf("after a refused reload: serial %s, want %s still", got, second.Cert.SerialNumber)
	}
	mustSemaq(t, srv.url, "", "pub", "tls.a", "hello", "--tls-ca", ca.File)
}

func TestClientMutualTLSFlags(t *testing.T) {
	t.Parallel()
	ca := brokertest.NewCA(t, "semaq test CA")
	srvCert, srvKey := ca.Server(t).Write(t, t.TempDir())
	s := brokertest.Start(t, func(c *broker.Config) { c.TLSCert, c.TLSKey, c.TLSClientCA = srvCert, srvKey, ca.File })
	url := s.ClientURL()
	cert, key := ca.Client(t, "cli").Write(t, t.TempDir())

	mustSemaq(t, url, "", "stream", "ls", "--tls-ca", ca.File, "--tls-cert", cert, "--tls-key", key)
	mustFailSemaq(t, url, "tls", "stream", "ls", "--tls-ca", ca.File)
	mustFailSemaq(t, url, "--tls-cert and --tls-key go together", "stream", "ls", "--tls-ca", ca.File, "--tls-cert", cert)
	missing := filepath.Join(t.TempDir(), "missing.pem")
	mustFailSemaq(t, url, missing, "stream", "ls", "--tls-ca", missing)
}

// Every command that takes --server takes the TLS flags with it.
func TestServerFlagComesWithTLSFlags(t *testing.T) {
	t.Parallel()
	var n int
	var walk func(*cobra.Command)
	walk = func(cmd *cobra.Command) {
		if cmd.Flags().Lookup("server") != nil {
			n++
			for _, f := range []string{"tls-ca", "tls-cert", "tls-key"} {
				if cmd.Flags().Lookup(f) == nil {
					t.Errorf("%s has --server but not --%s", cmd.CommandPath(), f)
				}
			}
		}
		for _, c := range cmd.Commands() {
			walk(c)
		}
	}
	walk(newRoot(strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{}))
	if n < 10 {
		t.Fatalf("only %d commands take --server", n)
	}
}

// serve refuses bad TLS settings and a non-loopback address without
// --insecure, before listening.
func TestServeRefusesExposureAndBadTLS(t *testing.T) {
	t.Parallel()
	ca := brokertest.NewCA(t, "semaq test CA")
	cert, _ := ca.Server(t).Write(t, t.TempDir())
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"serve", "--data", t.TempDir(), "--listen", "0.0.0.0:4222"}, "listen: 0.0.0.0:4222 is not a loopback address"},
		{[]string{"serve", "--data", t.TempDir(), "--http", "[::]:8080"}, "--insecure"},
		{[]string{"serve", "--data", t.TempDir(), "--tls-cert", cert}, "tls_key: tls_cert is set but tls_key is not"},
		{[]string{"serve", "--data", t.TempDir(), "--tls-client-ca", ca.File}, "tls_client_ca: needs tls_cert"},
	} {
		var stdout, stderr bytes.Buffer
		if code := Main(tc.args, strings.NewReader(""), &stdout, &stderr); code == 0 {
			t.Errorf("%v: exit 0", tc.args)
			continue
		}
		if msg := stderr.String(); !strings.HasPrefix(msg, "semaq: ") || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, tc.says) {
			t.Errorf("%v: stderr %q is not one line saying %q", tc.args, msg, tc.says)
		}
	}
}
