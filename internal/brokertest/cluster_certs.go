package brokertest

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"testing"
	"time"
)

// Node issues a node certificate for 127.0.0.1, ::1 and localhost that
// serves clients and, both ways, routes with mutual TLS: it allows server
// and client authentication.
func (ca *CA) Node(t testing.TB, name string) Pair {
	t.Helper()
	return ca.issue(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		NotAfter:    time.Now().Add(24 * time.Hour),
	})
}
