package httpapi_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/semaq/semaq/internal/brokertest"
	"github.com/semaq/semaq/internal/httpapi"
)

// serveRaw serves h with NewServer(cfg) on a LimitListener of maxConns and
// returns its address.
func serveRaw(t *testing.T, h http.Handler, cfg httpapi.ServerConfig, maxConns int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := httpapi.NewServer(h, cfg)
	go func() { _ = hs.Serve(httpapi.LimitListener(ln, maxConns)) }()
	t.Cleanup(func() { _ = hs.Close() })
	return ln.Addr().String()
}

func dialRaw(t *testing.T, addr, req string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(15 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if req != "" {
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
	}
	return conn, bufio.NewReader(conn)
}

// TestConnectionCap: at the cap a new connection waits for a slot instead
// of taking a file descriptor; idle and half-sent connections are closed
// by their timeouts, so they cannot hold the slots for ever.
func TestConnectionCap(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	addr := serveRaw(t, h, httpapi.ServerConfig{IdleTimeout: 300 * time.Millisecond, ReadHeaderTimeout: 300 * time.Millisecond}, 2)
	get := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/", nil)
		resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	// Two connections hold the slots: one idle after a request, one that
	// sends half a header.
	idle, br := dialRaw(t, addr, "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("first request: %v", err)
	}
	half, _ := dialRaw(t, addr, "GET / HTTP/1.1\r\nHost: local")
	if err := get(200 * time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a third connection was served past the cap: %v", err)
	}
	// Both are closed by the server: the idle one by IdleTimeout, the half
	// one by ReadHeaderTimeout; then the slots are free.
	for _, c := range []net.Conn{idle, half} {
		if _, err := io.ReadAll(c); err != nil {
			t.Fatalf("connection not closed by the server: %v", err)
		}
	}
	if err := get(10 * time.Second); err != nil {
		t.Fatalf("after the slots freed: %v", err)
	}
}

// TestSlowBodies: a body that trickles is cut at BodyTimeout on every
// route, refused requests included, and the server answers others.
func TestSlowBodies(t *testing.T) {
	t.Parallel()
	srv := brokertest.Start(t)
	c := brokertest.Connect(t, srv)
	brokertest.AddStream(t, c, "AI", "ai.>")
	h := httpapi.New(httpapi.Options{Client: c, BodyTimeout: 300 * time.Millisecond})
	addr := serveRaw(t, h, httpapi.ServerConfig{}, 0)
	for _, tc := range []struct{ req, want string }{
		{"POST /api/v1/queues/Q/fetch HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"max\":", "408"},
		{"POST /api/v1/publish/ai.x HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\nabc", "408"},
		{"POST /api/v1/publish/ai.x HTTP/1.1\r\nHost: evil.example\r\nContent-Length: 100\r\n\r\nabc", "403"},
		{"POST /api/v1/durables HTTP/1.1\r\nHost: localhost\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\nabc", "415"},
	} {
		_, br := dialRaw(t, addr, tc.req)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%q: %v", tc.req, err)
		}
		resp.Body.Close()
		if got := resp.Status; !strings.HasPrefix(got, tc.want) {
			t.Errorf("%q: %s, want %s", tc.req, got, tc.want)
		}
	}
	_, br := dialRaw(t, addr, "POST /api/v1/publish/ai.x HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n\r\nok")
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("a whole body after the slow ones: %v %v", resp, err)
	}
}
