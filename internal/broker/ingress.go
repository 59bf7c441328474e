package broker

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/semaq/semaq/internal/broker/ingress"
	"github.com/semaq/semaq/internal/broker/wire"
	"github.com/semaq/semaq/policy"
)

// The ingress's transports (Config.IngressTransport; ingress/wire.go).
const (
	IngressPipe = ingress.Pipe
	IngressTCP  = ingress.TCP
)

// policySteps are the ingress's policy steps: those the embedder gave
// (WithIngressPolicy), then those Config.Policy enables, made by the
// registry (WithPolicyRegistry, else policy.Default).
func (s *Server) policySteps() ([]policy.Step, error) {
	reg := s.policyReg
	if reg == nil {
		reg = policy.Default()
	}
	steps := slices.Clone(s.policy)
	for _, pc := range s.cfg.Policy {
		settings, err := pc.settingsJSON()
		if err != nil {
			return nil, err
		}
		st, err := reg.New(pc.Name, settings)
		if err != nil {
			return nil, fmt.Errorf("policy: %w", err)
		}
		steps = append(steps, st)
	}
	return steps, nil
}

// ingressDialTimeout bounds one dial of an ingress connection over TCP.
const ingressDialTimeout = 5 * time.Second

// ingressDialer logs the ingress's connections in as the internal user,
// over the configured transport.
func (s *Server) ingressDialer() (func(name string) (*wire.Conn, error), error) {
	if err := ingress.CheckTransport(s.cfg.IngressTransport, s.cfg.TLSCert != ""); err != nil {
		return nil, fmt.Errorf("ingress_transport: %w", err)
	}
	u := s.users.internal
	dial := s.ns.InProcessConn
	if s.cfg.IngressTransport == ingress.TCP {
		addr, err := s.loopbackClientAddr()
		if err != nil {
			return nil, fmt.Errorf("ingress_transport %s: %w", ingress.TCP, err)
		}
		dial = wire.TCPDial(addr, ingressDialTimeout)
	}
	return func(name string) (*wire.Conn, error) {
		return wire.Connect(wire.Config{Dial: dial, Name: name, Nkey: u.pub, Sign: u.kp.Sign,
			Log: s.log.With("component", "ingress")})
	}, nil
}

// loopbackClientAddr is the address this node's own connections dial to
// reach its client port: the listener's, with an unspecified host (every
// interface) made the loopback address.
func (s *Server) loopbackClientAddr() (string, error) {
	a, ok := s.ns.Addr().(*net.TCPAddr)
	if !ok || a == nil {
		return "", errors.New("the NATS server has no client listener")
	}
	ip := a.IP
	if ip == nil || ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
		if a.IP != nil && a.IP.To4() == nil {
			ip = net.IPv6loopback
		}
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(a.Port)), nil
}
