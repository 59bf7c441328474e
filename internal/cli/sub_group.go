package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/semaq"
)

// groupOptions checks --group, --key and --member and adds their options.
func (fl *subFlags) groupOptions(cmd *cobra.Command, opts *[]client.SubscribeOption) error {
	f := cmd.Flags()
	if !f.Changed("group") {
		if f.Changed("key") || f.Changed("member") {
			return errors.New("--key and --member need --group")
		}
		return nil
	}
	if err := semaq.CheckConsumerName(fl.group); err != nil {
		return fmt.Errorf("--group: %w", err)
	}
	if f.Changed("durable") || f.Changed("filter") {
		return errors.New("--group is durable and unfiltered by itself; leave out --durable and --filter")
	}
	if f.Changed("key") {
		if strings.TrimSpace(fl.key) == "" {
			return errors.New("--key: the expression is empty")
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
