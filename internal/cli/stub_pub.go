package cli

import "github.com/spf13/cobra"

// Placeholder until pub.go lands; delete this file when it does.
func newPubCmd(e *env) *cobra.Command { return &cobra.Command{Use: "pub"} }
