package cli

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/url"
	"strings"
	"time"
)

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
