package faults

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

// node is a fake route endpoint: it accepts connections, sends an INFO
// like a NATS route, and echoes every line after with its name.
func node(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				fmt.Fprintf(c, "INFO {\"server_name\":%q}\r\n", name)
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					fmt.Fprintf(c, "%s:%s", name, l)
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// dial connects to addr as node from: it reads the INFO, names itself and
// returns a reader of the answers.
func dial(t *testing.T, addr, from string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := bufio.NewReader(c)
	if l, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(l, "INFO ") {
		t.Fatalf("first line %q, %v", l, err)
	}
	fmt.Fprintf(c, "CONNECT {}\r\nINFO {\"server_name\":%q}\r\n", from)
	// The node echoes both lines.
	for range 2 {
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	return c, r
}

// roundTrip sends a line and waits up to wait for its echo; "" if none.
func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, line string, wait time.Duration) string {
	t.Helper()
	fmt.Fprintf(c, "%s\n", line)
	c.SetReadDeadline(time.Now().Add(wait))
	defer c.SetReadDeadline(time.Time{})
	l, err := r.ReadString('\n')
	if err != nil {
		return ""
	}
	return strings.TrimSpace(l)
}

func TestProxyPartitionHoldsThenHeals(t *testing.T) {
	p := NewProxy()
	defer p.Close()
	front, err := p.Front("b", node(t, "b"))
	if err != nil {
		t.Fatal(err)
	}
	fromA, ra := dial(t, front, "a")
	fromC, rc := dial(t, front, "c")
	if got := roundTrip(t, fromA, ra, "hello", 5*time.Second); got != "b:hello" {
		t.Fatalf("through the proxy: %q", got)
	}
	p.Partition([]string{"a"}, []string{"b", "c"})
	if !p.Blocked("a", "b") || !p.Blocked("b", "a") || p.Blocked("c", "b") {
		t.Fatal("partition rules not as cut")
	}
	if got := roundTrip(t, fromA, ra, "held", 300*time.Millisecond); got != "" {
		t.Fatalf("a reached b across the partition: %q", got)
	}
	if got := roundTrip(t, fromC, rc, "same side", 5*time.Second); got != "b:same side" {
		t.Fatalf("c, on b's side: %q", got)
	}
	// A new connection across the cut is refused once it names itself.
	c, err := net.Dial("tcp", front)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := r.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT {}\r\nINFO {\"server_name\":\"a\"}\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(r); err != nil || len(b) != 0 {
		t.Fatalf("new connection across the partition: read %q, %v; want closed", b, err)
	}
	p.Heal()
	// The held line flows, as TCP retransmits after a partition.
	fromA.SetReadDeadline(time.Now().Add(5 * time.Second))
	if l, err := ra.ReadString('\n'); err != nil || strings.TrimSpace(l) != "b:held" {
		t.Fatalf("after heal: %q, %v", l, err)
	}
}

func TestProxyDelay(t *testing.T) {
	p := NewProxy()
	defer p.Close()
	front, err := p.Front("b", node(t, "b"))
	if err != nil {
		t.Fatal(err)
	}
	c, r := dial(t, front, "a")
	const d = 300 * time.Millisecond
	p.Delay("a", "b", d)
	start := time.Now()
	if got := roundTrip(t, c, r, "slow", 5*time.Second); got != "b:slow" {
		t.Fatalf("delayed round trip: %q", got)
	}
	if took := time.Since(start); took < d {
		t.Fatalf("round trip took %s under a %s delay", took, d)
	}
	p.Heal()
	if got := roundTrip(t, c, r, "fast", 5*time.Second); got != "b:fast" {
		t.Fatalf("after heal: %q", got)
	}
	if p.Accepted() != 1 {
		t.Fatalf("%d connections accepted, want 1", p.Accepted())
	}
}

func TestProxyDropsUnnamedConnection(t *testing.T) {
	p := NewProxy()
	p.sniffTimeout = 200 * time.Millisecond
	defer p.Close()
	front, err := p.Front("b", node(t, "b"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", front)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "PING\r\n")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("connection that never named itself: %v after %q; want closed", err, b)
	}
	if strings.Contains(string(b), "b:PING") {
		t.Fatalf("bytes of an unnamed connector reached the node: %q", b)
	}
}
