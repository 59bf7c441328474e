// Package wire is a small NATS client for the ingress's in-process
// connections: it subscribes, parses MSG and HMSG in its own buffer and
// hands them to a handler on its parsing goroutine with the header block as
// raw bytes, and publishes HPUB into a buffer a flusher goroutine writes
// after each chunk of input the handlers finish. nats.go decodes every header block into a map on its
// reader, hands each message to a second goroutine and encodes the headers
// again on the way out; on the ingress's path that was a third of its cost
// (docs/benchmarks/ingress.md, P1).
//
// It speaks only what the ingress needs: CONNECT with an nkey, SUB with a
// queue group, UNSUB, HPUB/PUB, PING/PONG. It reconnects when the server
// closes the connection (a slow consumer) and subscribes again.
package wire

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
)

// Config says how to reach and log in to the server.
type Config struct {
	// Dial opens a connection to the server (nats-server's InProcessConn).
	Dial func() (net.Conn, error)
	// Name names the connection in the server's monitoring.
	Name string
	// Nkey is the user's public key; Sign signs the server's nonce with its
	// private key.
	Nkey string
	Sign func(nonce []byte) ([]byte, error)
	Log  *slog.Logger
}

// TCPDial is a Config.Dial over TCP to addr, with Nagle's algorithm off:
// the client's small frames (an ack, a republished message) go out at
// once instead of waiting for the previous one's ACK.
func TCPDial(addr string, timeout time.Duration) func() (net.Conn, error) {
	return func() (net.Conn, error) {
		c, err := net.DialTimeout("tcp", addr, timeout)
		if err != nil {
			return nil, err
		}
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetNoDelay(true)
		}
		return c, nil
	}
}

// Msg is one delivered message. Its slices point into the connection's
// read buffer: they are valid only until the handler returns.
type Msg struct {
	Subject, Reply []byte
	Header         []byte // the header block; nil without headers
	Data           []byte
}

// A Handler is called on the connection's parsing goroutine, one message
// at a time, in the order the server delivered them. What it publishes on
// the same connection is written once the chunk of input it came in is
// handled.
type Handler func(m *Msg)

// Sub is one subscription.
type Sub struct {
	c              *Conn
	sid            uint64
	subject, queue string
	h              Handler
}

// Conn is one connection. Publish and the subscription calls are safe for
// concurrent use.
type Conn struct {
	cfg Config

	mu      sync.Mutex
	conn    net.Conn
	subs    map[uint64]*Sub
	nextSID uint64
	pongs   []chan error
	closing bool

	active     atomic.Pointer[map[uint64]*Sub] // subs, copy-on-write under mu, for the reader
	maxPayload atomic.Int64

	wlock sync.Mutex // one writer of the pipe at a time; spare
	spare []byte
	wmu   sync.Mutex // wbuf, hbuf, conn as the flusher reads it
	wroom sync.Cond  // on wmu: the flusher took the buffer
	wbuf  []byte
	hbuf  []byte
	kick  chan struct{} // wakes the flusher
	stop  chan struct{} // closed by Close: the flusher writes what is left and ends
	fdone chan struct{}

	rbuf []byte // the reader's alone
	done chan struct{}
}

// ErrClosed is a call on a closed connection.
var ErrClosed = errors.New("wire: connection closed")

// handshakeTimeout bounds the wait for the server's INFO and PONG.
const handshakeTimeout = 5 * time.Second

// flushAt is the buffered output past which Publish wakes the flusher
// without waiting for the reader to run dry; maxBuffered is where Publish
// waits for it (backpressure on whoever publishes); maxKeep is the largest
// buffer the flusher keeps for the next burst (reserve).
const (
	flushAt     = 32 << 10
	maxBuffered = 1 << 20
	maxKeep     = 2 * maxBuffered
)

// Connect dials and logs in, then starts the reader goroutine.
func Connect(cfg Config) (*Conn, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	c := &Conn{cfg: cfg, subs: make(map[uint64]*Sub), done: make(chan struct{}), rbuf: make([]byte, 64<<10),
		kick: make(chan struct{}, 1), stop: make(chan struct{}), fdone: make(chan struct{})}
	c.wroom.L = &c.wmu
	c.active.Store(&map[uint64]*Sub{})
	conn, rest, err := c.login()
	if err != nil {
		return nil, err
	}
	c.conn = conn
	go c.flusher()
	go c.readLoop(conn, rest)
	return c, nil
}

type serverInfo struct {
	Nonce      string `json:"nonce"`
	MaxPayload int64  `json:"max_payload"`
	Headers    bool   `json:"headers"`
}

type connectOp struct {
	Verbose  bool   `json:"verbose"`
	Pedantic bool   `json:"pedantic"`
	Nkey     string `json:"nkey,omitempty"`
	Sig      string `json:"sig,omitempty"`
	Name     string `json:"name"`
	Lang     string `json:"lang"`
	Version  string `json:"version"`
	Protocol int    `json:"protocol"`
	Headers  bool   `json:"headers"`
	Echo     bool   `json:"echo"`
}

// login dials, reads INFO, sends CONNECT and PING and waits for PONG. It
// returns what the server sent after the PONG.
func (c *Conn) login() (net.Conn, []byte, error) {
	conn, err := c.cfg.Dial()
	if err != nil {
		return nil, nil, fmt.Errorf("wire: dial: %w", err)
	}
	fail := func(err error) (net.Conn, []byte, error) {
		conn.Close()
		return nil, nil, err
	}
	_ = conn.SetReadDeadline(time.Now().Add(handshakeTimeout))
	buf := c.rbuf[:0]
	var info serverInfo
	sentConnect := false
	for {
		for {
			f, n, err := parseFrame(buf, MaxControlLine)
			if err != nil {
				return fail(err)
			}
			if n == 0 {
				break
			}
			rest := buf[n:]
			switch f.op {
			case opInfo:
				if sentConnect {
					break
				}
				if err := json.Unmarshal(f.arg, &info); err != nil {
					return fail(fmt.Errorf("wire: server INFO: %w", err))
				}
				if !info.Headers {
					return fail(errors.New("wire: the server does not support headers"))
				}
				if err := c.sendConnect(conn, info.Nonce); err != nil {
					return fail(err)
				}
				sentConnect = true
			case opErr:
				return fail(fmt.Errorf("wire: server refused the connection: %s", f.arg))
			case opPong:
				if sentConnect {
					_ = conn.SetReadDeadline(time.Time{})
					c.maxPayload.Store(info.MaxPayload)
					return conn, append([]byte(nil), rest...), nil
				}
			case opPing:
				if _, err := conn.Write([]byte("PONG\r\n")); err != nil {
					return fail(err)
				}
			}
			buf = append(buf[:0], rest...)
		}
		if len(buf) == cap(buf) {
			return fail(fmt.Errorf("%w: handshake line too long", errProtocol))
		}
		n, err := conn.Read(buf[len(buf):cap(buf)])
		if err != nil {
			return fail(fmt.Errorf("wire: handshake: %w", err))
		}
		buf = buf[:len(buf)+n]
	}
}

func (c *Conn) sendConnect(conn net.Conn, nonce string) error {
	op := connectOp{Name: c.cfg.Name, Lang: "go", Version: "semaq-wire", Protocol: 1, Headers: true, Echo: true, Nkey: c.cfg.Nkey}
	if c.cfg.Sign != nil && nonce != "" {
		sig, err := c.cfg.Sign([]byte(nonce))
		if err != nil {
			return fmt.Errorf("wire: signing the nonce: %w", err)
		}
		op.Sig = base64.RawURLEncoding.EncodeToString(sig)
	}
	js, err := json.Marshal(op)
	if err != nil {
		return err
	}
	msg := append(append([]byte("CONNECT "), js...), "\r\nPING\r\n"...)
	_, err = conn.Write(msg)
	return err
}

// readLoop serves the connection until Close, logging in again whenever
// the server drops it.
func (c *Conn) readLoop(conn net.Conn, pending []byte) {
	defer close(c.done)
	backoff := 10 * time.Millisecond
	for {
		err := c.serve(conn, pending)
		c.mu.Lock()
		closing := c.closing
		c.failPongs(ErrClosed)
		c.mu.Unlock()
		if closing {
			return
		}
		c.cfg.Log.Warn("ingress connection lost; connecting again", "name", c.cfg.Name, "err", err)
		for {
			var lerr error
			conn, pending, lerr = c.login()
			if lerr == nil {
				break
			}
			c.cfg.Log.Warn("ingress connection: login failed", "name", c.cfg.Name, "err", lerr)
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			if c.isClosing() {
				return
			}
		}
		backoff = 10 * time.Millisecond
		if !c.resume(conn) {
			conn.Close()
			return
		}
	}
}

func (c *Conn) isClosing() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closing
}

// resume makes conn the connection and subscribes again; false when Close
// came first.
func (c *Conn) resume(conn net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return false
	}
	c.wmu.Lock()
	c.conn = conn
	c.wbuf = c.wbuf[:0] // what was buffered for the old connection is lost, as a dropped message
	for _, s := range c.subs {
		c.wbuf = appendSub(c.wbuf, s)
	}
	c.wakeFlusher()
	c.wmu.Unlock()
	return true
}

// Reading. The in-process pipe is synchronous: the server's write of a
// delivery waits until this side has read it, and a server goroutine that
// waits is one that parses no publisher's input. So one goroutine only
// reads, into chunks it hands over, while the reader loop (readLoop, serve)
// parses and runs the handlers; a hand-off per chunk, many messages each
// under load.
const (
	chunkSize = 32 << 10
	maxChunks = 32 // read ahead of the handlers at most: 1 MiB
)

type chunk struct {
	b   []byte
	err error
}

// pipeReader reads conn into chunks until it fails or quit closes.
func pipeReader(conn net.Conn, out chan<- chunk, free chan []byte, quit <-chan struct{}) {
	made := 0
	for {
		var b []byte
		select {
		case b = <-free:
		default:
			if made < maxChunks {
				b = make([]byte, chunkSize)
				made++
			} else {
				select {
				case b = <-free:
				case <-quit:
					return
				}
			}
		}
		n, err := conn.Read(b)
		select {
		case out <- chunk{b: b[:n], err: err}:
		case <-quit:
			return
		}
		if err != nil {
			return
		}
	}
}

// serve parses and dispatches until the connection fails.
func (c *Conn) serve(conn net.Conn, pending []byte) error {
	in := make(chan chunk, maxChunks)
	free := make(chan []byte, maxChunks)
	quit := make(chan struct{})
	defer close(quit)
	go pipeReader(conn, in, free, quit)
	buf := c.rbuf
	if len(pending) > len(buf) {
		buf = make([]byte, len(pending))
	}
	end := copy(buf, pending)
	start := 0
	for {
		for {
			f, n, err := parseFrame(buf[start:end], c.readLimit())
			if err != nil {
				conn.Close()
				return err
			}
			if n == 0 {
				break
			}
			start += n
			c.dispatch(&f)
		}
		if start == end {
			start, end = 0, 0
		} else if start > 0 {
			end = copy(buf, buf[start:end])
			start = 0
		}
		// Have what the handlers published from this chunk written
		// while the next is handled. Not here: a write on the
		// synchronous pipe waits for the server to read it, and the
		// handlers must not.
		c.wakeFlusher()
		ch := <-in
		if ch.err != nil {
			return ch.err
		}
		if end+len(ch.b) > len(buf) {
			// A message bigger than the buffer: grow, up to what the
			// server may send at most.
			if end > c.readLimit()+MaxControlLine+2 {
				conn.Close()
				return fmt.Errorf("%w: message larger than the server's limit", errProtocol)
			}
			nb := make([]byte, max(2*len(buf), end+len(ch.b)))
			copy(nb, buf[:end])
			buf, c.rbuf = nb, nb
		}
		end += copy(buf[end:], ch.b)
		free <- ch.b[:cap(ch.b)]
	}
}

func (c *Conn) dispatch(f *frame) {
	switch f.op {
	case opMsg:
		if s := (*c.active.Load())[f.sid]; s != nil {
			m := Msg{Subject: f.subject, Reply: f.reply, Header: f.hdr, Data: f.data}
			s.h(&m)
		}
	case opPing:
		c.wmu.Lock()
		c.wbuf = append(c.wbuf, "PONG\r\n"...)
		c.wmu.Unlock()
	case opPong:
		c.mu.Lock()
		if len(c.pongs) > 0 {
			ch := c.pongs[0]
			c.pongs = c.pongs[1:]
			ch <- nil
		}
		c.mu.Unlock()
	case opErr:
		c.cfg.Log.Warn("ingress connection: server error", "name", c.cfg.Name, "err", string(f.arg))
	case opInfo:
		var info serverInfo
		if json.Unmarshal(f.arg, &info) == nil && info.MaxPayload > 0 {
			c.maxPayload.Store(info.MaxPayload)
		}
	}
}

// failPongs answers every Ping waiting. c.mu is held.
func (c *Conn) failPongs(err error) {
	for _, ch := range c.pongs {
		ch <- err
	}
	c.pongs = nil
}

// QueueSubscribe subscribes to subject in queue group queue ("" for
// none); h gets its messages.
func (c *Conn) QueueSubscribe(subject, queue string, h Handler) (*Sub, error) {
	if !validSubject(subject) || (queue != "" && !validSubject(queue)) {
		return nil, nats.ErrBadSubject
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return nil, ErrClosed
	}
	c.nextSID++
	s := &Sub{c: c, sid: c.nextSID, subject: subject, queue: queue, h: h}
	c.subs[s.sid] = s
	c.publishSubs()
	c.wmu.Lock()
	c.wbuf = appendSub(c.wbuf, s)
	c.wakeFlusher()
	c.wmu.Unlock()
	return s, nil
}

func appendSub(b []byte, s *Sub) []byte {
	b = append(b, "SUB "...)
	b = append(b, s.subject...)
	if s.queue != "" {
		b = append(b, ' ')
		b = append(b, s.queue...)
	}
	b = append(b, ' ')
	b = strconv.AppendUint(b, s.sid, 10)
	return append(b, "\r\n"...)
}

// publishSubs snapshots subs for the reader. c.mu is held.
func (c *Conn) publishSubs() {
	m := make(map[uint64]*Sub, len(c.subs))
	for k, v := range c.subs {
		m[k] = v
	}
	c.active.Store(&m)
}

// Unsubscribe ends s: no message of it is handled after it returns,
// except one the reader is handling now.
func (s *Sub) Unsubscribe() error {
	c := s.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.subs[s.sid]; !ok {
		return nil
	}
	delete(c.subs, s.sid)
	c.publishSubs()
	if c.closing {
		return nil
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wbuf = append(c.wbuf, "UNSUB "...)
	c.wbuf = strconv.AppendUint(c.wbuf, s.sid, 10)
	c.wbuf = append(c.wbuf, "\r\n"...)
	c.wakeFlusher()
	return nil
}

// ImportHeaderAllowance is what the NATS server may add to a message it
// delivers through a service import beyond what its publisher sent (the
// Nats-Request-Info header naming the sender: tens to hundreds of
// bytes), so a publish of the maximal payload through a user account's
// import still reaches the ingress.
const ImportHeaderAllowance = 16 << 10

// readLimit is the largest message the connection reads: the server's
// max_payload, plus what an import adds.
func (c *Conn) readLimit() int { return int(c.maxPayload.Load()) + ImportHeaderAllowance }

// Publish buffers a message; h is encoded as nats.go would (AppendHeader).
// It fails with nats.ErrMaxPayload when headers and data exceed the
// server's limit, and with ErrClosed after Close. The message is written
// by the flusher: past 32 KiB buffered, on Flush, and after each chunk of
// input the handlers finish.
func (c *Conn) Publish(subject, reply string, h nats.Header, data []byte) error {
	if !validSubject(subject) || (reply != "" && !validSubject(reply)) {
		return nats.ErrBadSubject
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for {
		if c.conn == nil {
			return ErrClosed
		}
		// Encoded again after a wait: another publisher may have used
		// hbuf meanwhile.
		var err error
		c.hbuf, err = AppendHeader(c.hbuf[:0], h)
		if err != nil {
			return err
		}
		if int64(len(c.hbuf)+len(data)) > c.maxPayload.Load() {
			return nats.ErrMaxPayload
		}
		need := len(subject) + len(reply) + len(c.hbuf) + len(data) + frameOverhead
		if !c.mustWait(need) {
			c.wbuf = reserve(c.wbuf, need)
			break
		}
		c.wakeFlusher()
		c.wroom.Wait()
	}
	b := c.wbuf
	if len(c.hbuf) > 0 {
		b = append(b, "HPUB "...)
	} else {
		b = append(b, "PUB "...)
	}
	b = append(b, subject...)
	b = append(b, ' ')
	if reply != "" {
		b = append(b, reply...)
		b = append(b, ' ')
	}
	if len(c.hbuf) > 0 {
		b = strconv.AppendInt(b, int64(len(c.hbuf)), 10)
		b = append(b, ' ')
	}
	b = strconv.AppendInt(b, int64(len(c.hbuf)+len(data)), 10)
	b = append(b, "\r\n"...)
	b = append(b, c.hbuf...)
	b = append(b, data...)
	b = append(b, "\r\n"...)
	c.wbuf = b
	if len(b) >= flushAt {
		c.wakeFlusher()
	}
	return nil
}

// frameOverhead bounds the bytes of an HPUB frame besides its subject,
// reply, headers and data: the verb, spaces, two lengths and two CRLFs.
const frameOverhead = 64

// mustWait reports whether a frame of need bytes must wait for the flusher
// to take the buffer: the buffer holds maxBuffered already, or the frame
// would make it grow past maxKeep (or past its capacity, if that is
// larger). A frame always goes into an empty buffer. c.wmu is held.
func (c *Conn) mustWait(need int) bool {
	n := len(c.wbuf)
	return n > 0 && (n >= maxBuffered || n+need > max(cap(c.wbuf), maxKeep))
}

// reserve returns b with room for need more bytes: it doubles up to
// maxKeep, and past it only to hold one frame larger than that on its own.
// The flusher keeps buffers up to maxKeep, so a connection carrying large
// messages grows its two buffers once. Left to append, a 256 KiB message
// landing on a nearly full 1 MiB buffer doubled it past what was kept, and
// the next burst grew a new one from nothing, copying more bytes than the
// payloads themselves.
func reserve(b []byte, need int) []byte {
	n := len(b) + need
	if n <= cap(b) {
		return b
	}
	nb := make([]byte, len(b), max(n, min(2*cap(b), maxKeep)))
	copy(nb, b)
	return nb
}

// Flush has what is buffered written now, without waiting for it (Ping
// waits for the server to have it).
func (c *Conn) Flush() error {
	c.wakeFlusher()
	return nil
}

func (c *Conn) wakeFlusher() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// flusher writes the buffered output, one buffer after the other, so that
// neither the reader nor a publisher waits for the server to read the
// synchronous in-process pipe.
func (c *Conn) flusher() {
	defer close(c.fdone)
	for {
		select {
		case <-c.kick:
			c.writeOut()
		case <-c.stop:
			c.writeOut()
			return
		}
	}
}

// writeOut writes what is buffered. One writer at a time (wlock), so
// buffers reach the server in the order they were filled.
func (c *Conn) writeOut() {
	c.wlock.Lock()
	defer c.wlock.Unlock()
	c.wmu.Lock()
	buf, conn := c.wbuf, c.conn
	c.wbuf = c.spare[:0]
	c.wroom.Broadcast()
	c.wmu.Unlock()
	if len(buf) > 0 && conn != nil {
		if _, err := conn.Write(buf); err != nil {
			conn.Close() // the reader sees it and logs in again
		}
	}
	if cap(buf) > maxKeep {
		buf = nil // a frame past the bound is not kept
	}
	c.spare = buf
}

// Ping writes PING and waits for the server's PONG: every message the
// server sent before it has been handled, and everything published before
// it has been processed by the server.
func (c *Conn) Ping(ctx context.Context) error {
	ch := make(chan error, 1)
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return ErrClosed
	}
	c.pongs = append(c.pongs, ch)
	c.wmu.Lock()
	c.wbuf = append(c.wbuf, "PING\r\n"...)
	c.wakeFlusher()
	c.wmu.Unlock()
	c.mu.Unlock()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// MaxPayload is the server's limit on headers and data of one message.
func (c *Conn) MaxPayload() int64 { return c.maxPayload.Load() }

// Close writes what is buffered and closes the connection; the reader
// goroutine ends soon after (Done).
func (c *Conn) Close() {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	c.closing = true
	c.mu.Unlock()
	close(c.stop)
	<-c.fdone // what was buffered is written
	c.wmu.Lock()
	conn := c.conn
	c.conn = nil
	c.wroom.Broadcast()
	c.wmu.Unlock()
	if conn != nil {
		conn.Close()
	}
}

// Done is closed when the reader goroutine has returned after Close.
func (c *Conn) Done() <-chan struct{} { return c.done }

// validSubject refuses what would break the protocol line: empty, or
// holding a space, tab, CR or LF.
func validSubject(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\r', '\n':
			return false
		}
	}
	return true
}
