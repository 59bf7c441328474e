package cli

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// usageError is a command called the wrong way: wrong arguments or an
// unknown or malformed flag. Main prints the error, then how to call it.
type usageError struct {
	cmd *cobra.Command
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// write prints the one-line error, the command's usage line, its first
// example and where to read more.
func (e *usageError) write(w io.Writer) {
	fmt.Fprintf(w, "semaq: %s\n", oneLine(e.err.Error()))
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
// takes arguments usage errors, printed with the command's usage. It runs
// once the tree is built; a command's own validator stays in charge of the
// message and the exit code. Flag errors, and stray words given to commands
// that take none, stay one line: they name what is wrong already.
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

// serverAddr is the host:port of the first URL of --server, "" when it
// cannot be read.
func serverAddr(server string) string {
	first, _, _ := strings.Cut(server, ",")
	first = strings.TrimSpace(first)
	if !strings.Contains(first, "://") {
		first = "nats://" + first
	}
	u, err := url.Parse(first)
	if err != nil || u.Hostname() == "" {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = "4222"
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// answersHTTP reports whether addr speaks HTTP. A NATS server greets with
// INFO before the client says anything; an HTTP server waits, then answers
// a line it cannot parse with a status line.
func answersHTTP(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	dl, _ := ctx.Deadline()
	_ = conn.SetDeadline(dl)
	if _, err := io.WriteString(conn, "PING\r\n\r\n"); err != nil {
		return false
	}
	line, _ := bufio.NewReader(io.LimitReader(conn, 256)).ReadString('\n')
	return strings.HasPrefix(line, "HTTP/")
}
