package cli

import "github.com/spf13/cobra"

// Placeholder until sub.go lands; delete this file when it does.
func newSubCmd(e *env) *cobra.Command { return &cobra.Command{Use: "sub"} }
