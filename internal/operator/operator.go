// Package operator makes the operator login of a program that embeds a
// SemaQ node and must reach JetStream below the semantic layer: the
// benchmark's raw JetStream baseline, tests that inspect storage
// (broker.WithOperator). The key pair lives in the embedding process; the
// node learns only the public key.
package operator

import (
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/semaq/semaq/internal/broker"
)

// Operator is one operator key pair.
type Operator struct {
	kp  nkeys.KeyPair
	pub string
}

// New makes a key pair.
func New() (*Operator, error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, fmt.Errorf("operator: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("operator: %w", err)
	}
	return &Operator{kp: kp, pub: pub}, nil
}

// Option admits the operator on a node made with it.
func (o *Operator) Option() broker.Option { return broker.WithOperator(o.pub) }

// Connect opens a connection to url as the operator.
func (o *Operator) Connect(url string, opts ...nats.Option) (*nats.Conn, error) {
	return nats.Connect(url, append([]nats.Option{nats.Nkey(o.pub, o.Sign)}, opts...)...)
}

// PublicKey is the operator's nkey, for a client that logs in with its own
// protocol code (wire.Config.Nkey).
func (o *Operator) PublicKey() string { return o.pub }

// Sign signs a server's login nonce with the operator's private key, which
// never leaves the Operator (wire.Config.Sign).
func (o *Operator) Sign(nonce []byte) ([]byte, error) { return o.kp.Sign(nonce) }
