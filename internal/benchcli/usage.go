package benchcli

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
)

// usageError is a command called the wrong way: wrong arguments. Main
// prints the error, then how to call it (as the semaq command does).
type usageError struct {
	cmd *cobra.Command
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// write prints the one-line error, the command's usage line, its first
// example and where to read more.
func (e *usageError) write(w io.Writer, prefix string) {
	fmt.Fprintf(w, "%s: %s\n", prefix, oneLine(e.err.Error()))
	fmt.Fprintf(w, "Usage: %s\n", e.cmd.UseLine())
	if ex := firstExample(e.cmd.Example); ex != "" {
		fmt.Fprintf(w, "Example: %s\n", ex)
	}
	fmt.Fprintf(w, "Run '%s --help' for every flag.\n", e.cmd.CommandPath())
}

func firstExample(s string) string {
	for line := range strings.SplitSeq(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return ""
}

// explainUsage makes the argument errors of every command under root that
// takes arguments usage errors, printed with the command's usage. Flag
// errors, and stray words given to commands that take none, stay one line:
// they name what is wrong already.
func explainUsage(root *cobra.Command) {
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if args := c.Args; args != nil && !takesNoArgs(c, args) {
			c.Args = func(cmd *cobra.Command, a []string) error {
				if err := args(cmd, a); err != nil {
					return &usageError{cmd: cmd, err: err}
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

func takesNoArgs(c *cobra.Command, args cobra.PositionalArgs) bool {
	return args(c, nil) == nil && args(c, []string{"x"}) != nil
}
