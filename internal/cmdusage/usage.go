// Package cmdusage is how SemaQ's commands (semaq and semaq-bench) answer a
// command called with the wrong arguments: the one-line error, then the
// command's usage line, its first example and where to read more.
package cmdusage

import (
	"fmt"
	"io"
	"strings"

	"github.com/semaq/semaq/internal/editdist"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Error is a command called the wrong way: wrong arguments.
type Error struct {
	Cmd *cobra.Command
	Err error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Write prints the one-line error after prefix ("semaq"), the command's
// usage line, its first example and where to read more.
func (e *Error) Write(w io.Writer, prefix string) {
	fmt.Fprintf(w, "%s: %s\n", prefix, OneLine(e.Err.Error()))
	fmt.Fprintf(w, "Usage: %s\n", e.Cmd.UseLine())
	if ex := firstExample(e.Cmd.Example); ex != "" {
		fmt.Fprintf(w, "Example: %s\n", ex)
	}
	fmt.Fprintf(w, "Run '%s --help' for every flag.\n", e.Cmd.CommandPath())
}

// OneLine folds an error message onto one line.
func OneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func firstExample(s string) string {
	for line := range strings.SplitSeq(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			return line
		}
	}
	return ""
}

// Explain makes the argument errors of every command under root that takes
// arguments an *Error. It runs once the tree is built; a command's own
// validator stays in charge of the message (and of any error it wraps).
// Flag errors, and stray words given to commands that take none, stay one
// line: they name what is wrong already.
func Explain(root *cobra.Command) {
	root.SetFlagErrorFunc(suggestFlag)
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if args := c.Args; args != nil && !takesNoArgs(c, args) {
			c.Args = func(cmd *cobra.Command, a []string) error {
				if err := args(cmd, a); err != nil {
					return &Error{Cmd: cmd, Err: err}
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

// suggestFlag adds the nearest flag of the command to an unknown flag's
// error: "unknown flag: --modle (did you mean --model?)".
func suggestFlag(c *cobra.Command, err error) error {
	const prefix = "unknown flag: --"
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix) {
		return err
	}
	given := strings.TrimPrefix(msg, prefix)
	if i := strings.IndexByte(given, '='); i >= 0 {
		given = given[:i]
	}
	best, dist := "", 3 // at most two edits away
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		if d := editdist.Distance(given, f.Name); d < dist {
			best, dist = f.Name, d
		}
	})
	if best == "" {
		return err
	}
	return fmt.Errorf("%w (did you mean --%s?)", err, best)
}
