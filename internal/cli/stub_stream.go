package cli

import "github.com/spf13/cobra"

// Placeholder until stream.go lands; delete this file when it does.
func newStreamCmd(e *env) *cobra.Command { return &cobra.Command{Use: "stream"} }
