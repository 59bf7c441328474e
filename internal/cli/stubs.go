package cli

import "github.com/spf13/cobra"

// Placeholders replaced by pub.go, sub.go, stream.go and bench.go.
func newPubCmd(e *env) *cobra.Command    { return &cobra.Command{Use: "pub"} }
func newSubCmd(e *env) *cobra.Command    { return &cobra.Command{Use: "sub"} }
func newStreamCmd(e *env) *cobra.Command { return &cobra.Command{Use: "stream"} }
func newBenchCmd(e *env) *cobra.Command  { return &cobra.Command{Use: "bench"} }
