package cli

import "github.com/spf13/cobra"

// Placeholder until bench.go lands; delete this file when it does.
func newBenchCmd(e *env) *cobra.Command { return &cobra.Command{Use: "bench"} }
