// Package clienv is what a command group kept in a package of its own needs
// of the semaq command: its output streams, the --server flag with its
// credentials, and a client connected by them. The command tree in
// internal/cli implements Env and hands it to the group's constructor, so a
// group (semaq model, semaq queue class, ...) grows outside internal/cli
// without reaching into it.
package clienv

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/semaq/semaq/client"
)

// Env is the semaq command's environment. Its methods are called from the
// command's goroutine only.
type Env interface {
	// Stdout is where a command writes its result; Stderr, warnings.
	Stdout() io.Writer
	Stderr() io.Writer
	// AddServerFlag adds --server, the TLS flags and the credential flags
	// to a command that talks to a broker.
	AddServerFlag(cmd *cobra.Command)
	// WithClient connects to the broker the flags name, runs fn with the
	// command's context and the client, and closes the client. A broker
	// that does not answer, or refuses the credential, is explained in the
	// error.
	WithClient(cmd *cobra.Command, fn func(ctx context.Context, c *client.Client) error) error
}
