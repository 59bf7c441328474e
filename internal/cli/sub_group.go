package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// groupOptions checks --group, --group-key and --member and adds their
// options.
func (fl *subFlags) groupOptions(cmd *cobra.Command, opts *[]client.SubscribeOption) error {
	f := cmd.Flags()
	if !f.Changed("group") {
		if f.Changed("group-key") || f.Changed("member") {
			return errors.New("--group-key and --member need --group")
		}
		return nil
	}
	if err := semaq.CheckConsumerName(fl.group); err != nil {
		return fmt.Errorf("--group: %w", err)
	}
	if f.Changed("durable") || f.Changed("filter") {
		return errors.New("--group is durable and unfiltered by itself; leave out --durable and --filter")
	}
	if k := cmd.Flag("key"); k != nil && k.Changed && !strings.HasPrefix(k.Value.String(), "sq_") {
		// --key was the group's key before --group-key: say so rather
		// than fail on a credential that is none.
		return fmt.Errorf("--key %q: --key is the key to authenticate with (sq_…); a key-shared group's key is --group-key", k.Value.String())
	}
	if f.Changed("group-key") {
		if strings.TrimSpace(fl.key) == "" {
			return errors.New("--group-key: the expression is empty")
		}
		*opts = append(*opts, client.KeyBy(fl.key))
	}
	if f.Changed("member") {
		if err := semaq.CheckConsumerName(fl.member); err != nil {
			return fmt.Errorf("--member: %w", err)
		}
		*opts = append(*opts, client.WithMember(fl.member))
	}
	return nil
}
