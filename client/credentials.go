package client

import (
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/semaq/semaq/semaq"
)

// Credentials that do not carry the user's name: an nkey, or a TLS client
// certificate (docs/security.md, How the NATS door authenticates). The
// broker lets a user listen on its own inbox only, _INBOX_<name>, so a
// client authenticating that way says whom it connects as with WithUser.

// WithUser names the user this client connects as, for credentials that
// do not carry the name (WithNkeySeed, a TLS client certificate given
// with WithNATSOptions(nats.ClientCert(...))): the client's reply inbox
// becomes _INBOX_<name>, and the broker refuses the connection when the
// credential is not that user's. An empty name adds nothing. With WithKey
// it must name the key's user.
func WithUser(name string) Option {
	return func(o *connectOptions) error {
		if name == "" {
			return nil
		}
		if semaq.CheckName(name) != nil {
			return fmt.Errorf("client: WithUser: %q is not a user name (letters, digits, '_' and '-', at most 64)", name)
		}
		o.user = name
		return nil
	}
}

// WithNkeySeed authenticates with the nkey whose seed (SU…) is in file,
// for a user added with `semaq user add NAME --nkey U…`: the client signs
// the server's nonce with it. The seed is read when connecting and at
// each reconnect, not kept in memory. Give the user's name with WithUser.
// An empty path adds nothing.
func WithNkeySeed(file string) Option {
	return func(o *connectOptions) error {
		if file == "" {
			return nil
		}
		opt, err := nats.NkeyOptionFromSeed(file)
		if err != nil {
			return fmt.Errorf("client: WithNkeySeed: %s: not a file holding a user's nkey seed (SU…): %w", file, err)
		}
		o.natsOpts = append(o.natsOpts, opt)
		o.nkey = true
		return nil
	}
}

// checkCredentials checks the credential options together and adds the
// user's inbox and name.
func (o *connectOptions) checkCredentials() error {
	switch {
	case o.nkey && o.keyUser != "":
		return errors.New("client: WithNkeySeed and WithKey: give one credential")
	case o.nkey && o.user == "":
		return errors.New("client: WithNkeySeed needs WithUser(name): the broker lets a user listen on its own inbox only")
	case o.user != "" && o.keyUser != "" && o.user != o.keyUser:
		return fmt.Errorf("client: WithUser(%q) and a key of user %q", o.user, o.keyUser)
	case o.user != "" && o.keyUser == "":
		// Sent as the connect's user name: the broker checks it against
		// the nkey's or certificate's user.
		o.natsOpts = append(o.natsOpts, nats.UserInfo(o.user, ""), nats.CustomInboxPrefix(semaq.UserInboxPrefix+o.user))
	}
	return nil
}
