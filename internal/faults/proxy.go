package faults

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"regexp"
	"sync"
	"time"
)

// Proxy stands in front of every node's cluster port: each node advertises
// its front (broker cluster_advertise) and lists the fronts as its routes,
// so every route connection, configured or learned, passes through it. A
// route's connector names itself in its INFO ("server_name"), which the
// proxy reads to know which link a connection is; then the link's rules
// apply:
//
//   - blocked: an established connection goes silent in that direction
//     (nothing is read or written, as packets dropped: the sender's buffers
//     fill and NATS notices by its pings or write deadline, or the bytes flow
//     again at Heal, as TCP would retransmit them); a new connection is
//     closed once named (a refused connection).
//   - delayed: every chunk is written its delay after it was read, in order.
//
// All methods are safe for concurrent use.
type Proxy struct {
	mu      sync.Mutex
	cond    *sync.Cond // signalled when a rule changes or the proxy closes
	blocked map[Link]bool
	delay   map[Link]time.Duration
	conns   map[*pconn]struct{}
	lns     []net.Listener
	closed  bool
	wg      sync.WaitGroup
	// SniffTimeout bounds the wait for a connector to name itself.
	sniffTimeout time.Duration
	accepted     int
}

// Link is one direction between two nodes.
type Link struct{ From, To string }

// NewProxy is a proxy with no fronts and no rules.
func NewProxy() *Proxy {
	p := &Proxy{blocked: map[Link]bool{}, delay: map[Link]time.Duration{}, conns: map[*pconn]struct{}{},
		sniffTimeout: 10 * time.Second}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// Front listens on a free loopback port for connections to node to, which
// it forwards to target, and returns the address.
func (p *Proxy) Front(to, target string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ln.Close()
		return "", errors.New("faults: proxy closed")
	}
	p.lns = append(p.lns, ln)
	p.wg.Add(1)
	p.mu.Unlock()
	go p.serve(ln, to, target)
	return ln.Addr().String(), nil
}

// Partition cuts every link between nodes of different groups, both ways;
// a node in no group keeps its links. It adds to the rules in force.
func (p *Proxy) Partition(groups ...[]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for gi, g := range groups {
		for gj, h := range groups {
			if gi == gj {
				continue
			}
			for _, a := range g {
				for _, b := range h {
					p.blocked[Link{a, b}] = true
				}
			}
		}
	}
	p.cond.Broadcast()
}

// Delay holds every chunk from one node to another d before writing it.
func (p *Proxy) Delay(from, to string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay[Link{from, to}] = d
	p.cond.Broadcast()
}

// Heal removes every rule: held bytes flow again.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	clear(p.blocked)
	clear(p.delay)
	p.cond.Broadcast()
}

// Blocked reports whether the link from one node to another is cut.
func (p *Proxy) Blocked(from, to string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.blocked[Link{from, to}]
}

// Accepted is how many connections the proxy has taken, for reports.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

// Close stops every front, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	for _, ln := range p.lns {
		ln.Close()
	}
	for c := range p.conns {
		c.done = true
		c.close()
	}
	p.cond.Broadcast()
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) serve(ln net.Listener, to, target string) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.accepted++
		p.wg.Add(1)
		p.mu.Unlock()
		go p.handle(c, to, target)
	}
}

// pconn is one proxied connection: client is the connector, server the
// node it reached.
type pconn struct {
	client, server net.Conn
	from, to       string // from is "" until the connector named itself
	once           sync.Once
	done           bool // under Proxy.mu
}

// close closes both sides; the caller holds Proxy.mu and has set done.
func (c *pconn) close() {
	c.once.Do(func() {
		c.client.Close()
		c.server.Close()
	})
}

// shut marks c done, wakes its waiting pumps and closes it.
func (p *Proxy) shut(c *pconn) {
	p.mu.Lock()
	c.done = true
	p.cond.Broadcast()
	p.mu.Unlock()
	c.close()
}

func (p *Proxy) handle(client net.Conn, to, target string) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", target, 2*time.Second)
	if err != nil {
		client.Close()
		return
	}
	c := &pconn{client: client, server: server, to: to}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		client.Close()
		server.Close()
		return
	}
	p.conns[c] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.shut(c)
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()

	// The node answers first (its INFO); the connector then sends its
	// CONNECT and INFO, which name it.
	named := make(chan struct{})
	var pumps sync.WaitGroup
	pumps.Add(1)
	go func() {
		defer pumps.Done()
		p.pump(c, server, client, named, func() Link { return Link{to, c.from} })
		p.shut(c)
	}()
	head, from, err := sniffName(client, p.sniffTimeout)
	if err != nil {
		close(named)
		p.shut(c)
		pumps.Wait()
		return
	}
	p.mu.Lock()
	c.from = from
	refused := p.blocked[Link{from, to}] || p.blocked[Link{to, from}]
	p.mu.Unlock()
	close(named)
	if refused {
		p.shut(c)
		pumps.Wait()
		return
	}
	if _, err := server.Write(head); err == nil {
		p.pump(c, client, server, nil, func() Link { return Link{from, to} })
	}
	p.shut(c)
	pumps.Wait()
}

// serverNameRE finds the connector's name in its route INFO.
var serverNameRE = regexp.MustCompile(`"server_name":"([^"]+)"`)

// maxSniff bounds what is read of a connection before its connector names
// itself.
const maxSniff = 64 << 10

// sniffName reads from c until its bytes name a server, and returns them
// with the name.
func sniffName(c net.Conn, timeout time.Duration) ([]byte, string, error) {
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return nil, "", err
	}
	defer c.SetReadDeadline(time.Time{})
	var head []byte
	buf := make([]byte, 4096)
	for len(head) < maxSniff {
		n, err := c.Read(buf)
		head = append(head, buf[:n]...)
		if m := serverNameRE.FindSubmatch(head); m != nil && bytes.Contains(head[bytes.Index(head, m[0]):], []byte("\n")) {
			return head, string(m[1]), nil
		}
		if err != nil {
			return nil, "", err
		}
	}
	return nil, "", fmt.Errorf("faults: no server_name in the first %d bytes", maxSniff)
}

// chunk is bytes read at a time.
type chunk struct {
	b  []byte
	at time.Time
}

// pump copies src to dst under the rules of link(): it waits while the
// link is cut, and writes each chunk its delay after reading it. Before
// named is closed (nil: already), bytes flow without rules.
func (p *Proxy) pump(c *pconn, src, dst net.Conn, named chan struct{}, link func() Link) {
	q := make(chan chunk, 256)
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for ch := range q {
			if !p.waitOpen(c, link, named) {
				return
			}
			if d := p.delayOf(link, named); d > 0 {
				if wait := time.Until(ch.at.Add(d)); wait > 0 {
					time.Sleep(wait) // the delay is the fault
				}
			}
			if _, err := dst.Write(ch.b); err != nil {
				p.shut(c)
				return
			}
		}
	}()
	defer func() {
		close(q)
		<-writerDone
	}()
	for {
		if !p.waitOpen(c, link, named) {
			return
		}
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			select {
			case q <- chunk{b: buf[:n], at: time.Now()}:
			case <-writerDone:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// isNamed reports whether named is nil or closed.
func isNamed(named chan struct{}) bool {
	if named == nil {
		return true
	}
	select {
	case <-named:
		return true
	default:
		return false
	}
}

// waitOpen waits while link is cut; false when the connection or the proxy
// closed meanwhile.
func (p *Proxy) waitOpen(c *pconn, link func() Link, named chan struct{}) bool {
	if !isNamed(named) {
		return true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.blocked[link()] && !p.closed && !c.done {
		p.cond.Wait()
	}
	return !p.closed && !c.done
}

func (p *Proxy) delayOf(link func() Link, named chan struct{}) time.Duration {
	if !isNamed(named) {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delay[link()]
}
