package cli

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/identity"
)

// addCredentialFlags adds --nkey-seed and --auth-user beside --key: the
// credentials of users without a key (docs/security.md).
func (e *env) addCredentialFlags(f *pflag.FlagSet) {
	if f.Lookup("nkey-seed") == nil {
		f.StringVar(&e.nkeySeed, "nkey-seed", "", "`FILE` holding the nkey seed (SU...) of a user added with --nkey; default $SEMAQ_NKEY_SEED; needs --auth-user")
	}
	if f.Lookup("auth-user") == nil {
		f.StringVar(&e.user, "auth-user", "", "the user `NAME` to connect as, with --nkey-seed or a --tls-cert mapped to a user; default $SEMAQ_USER")
	}
}

// credentials are the client options of --key, --nkey-seed and --auth-user.
// A flag wins over the variables: --key or --nkey-seed given, $SEMAQ_KEY
// and $SEMAQ_NKEY_SEED are not read; otherwise $SEMAQ_KEY, then
// $SEMAQ_NKEY_SEED. $SEMAQ_USER is read for a connection without a key.
// Two credentials given as flags are refused by the client.
func (e *env) credentials() ([]client.Option, error) {
	key, seed, user := e.key, e.nkeySeed, e.user
	if key == "" && seed == "" {
		if key = os.Getenv("SEMAQ_KEY"); key == "" {
			seed = os.Getenv("SEMAQ_NKEY_SEED")
		}
	}
	if user == "" && key == "" {
		user = os.Getenv("SEMAQ_USER")
	}
	if seed != "" && key == "" && user == "" {
		return nil, errors.New("--nkey-seed needs --auth-user NAME (or $SEMAQ_USER): the broker lets a user listen on its own inbox only")
	}
	if key != "" {
		if _, err := identity.ParseKey(key); err != nil {
			from := "--key"
			if e.key == "" {
				from = "$SEMAQ_KEY"
			}
			return nil, fmt.Errorf("%s: not a SemaQ key (sq_<name>_<id>_<secret>, as semaq user add prints it)", from)
		}
	}
	return []client.Option{client.WithKey(key), client.WithNkeySeed(seed), client.WithUser(user)}, nil
}
