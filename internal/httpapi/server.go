package httpapi

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Defaults of the front door's bounds (docs/http.md "Limits and safety").
const (
	// DefaultMaxConns bounds the HTTP connections open at once. The NATS
	// port has a listener of its own and is not counted; the cap keeps
	// HTTP from taking every file descriptor the process has.
	DefaultMaxConns = 1024
	// DefaultReadHeaderTimeout bounds reading a request's headers.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultIdleTimeout closes a keep-alive connection with no request.
	DefaultIdleTimeout = 60 * time.Second
	// DefaultWriteTimeout bounds the answer of a request that is not an
	// event stream, counted from its arrival; a queue fetch gets its wait
	// on top.
	DefaultWriteTimeout = time.Minute
	// DefaultMaxStreams bounds the event streams open at once.
	DefaultMaxStreams = 256
	// DefaultStreamBufferBytes bounds what one event stream pulls from the
	// broker ahead of its client (at least one message of max_payload).
	DefaultStreamBufferBytes = 256 << 10
	// DefaultStreamWriteTimeout drops an event-stream client that takes
	// longer than this to take one event.
	DefaultStreamWriteTimeout = 15 * time.Second
	// DefaultMaxDurables bounds the durable subscriptions made over HTTP.
	DefaultMaxDurables = 64
	// DefaultDurableInactive removes a durable subscription made over HTTP
	// after this long without a reader.
	DefaultDurableInactive = time.Hour
)

// ServerConfig configures NewServer. Zero fields take the defaults above.
type ServerConfig struct {
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// MaxHeaderBytes bounds a request's header block; 0 means 64 KiB, which
	// holds a publish's largest allowed message headers (set it above
	// max_header_bytes when that is raised).
	MaxHeaderBytes int
}

// NewServer returns the http.Server of the front door, with its
// connection timeouts set. It sets no ReadTimeout or WriteTimeout: those
// would cut event streams and long gateway answers, and an expired
// ReadTimeout cancels the request's context. Instead Handler bounds each
// request (body read deadline, write deadline; event streams a deadline
// per event). Serve it on LimitListener(ln, DefaultMaxConns).
func NewServer(h http.Handler, cfg ServerConfig) *http.Server {
	if cfg.ReadHeaderTimeout <= 0 {
		cfg.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxHeaderBytes <= 0 {
		cfg.MaxHeaderBytes = 64 << 10
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
	}
}

// LimitListener returns a listener that has at most n of its connections
// open at once (n <= 0: DefaultMaxConns). Accept waits for a slot while n
// are open; the connections waiting stay in the kernel's backlog and hold
// no file descriptor of the process.
func LimitListener(ln net.Listener, n int) net.Listener {
	if n <= 0 {
		n = DefaultMaxConns
	}
	return &limitListener{Listener: ln, slots: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	slots     chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// setDeadlines bounds one request on the connection: its body must arrive
// within BodyTimeout, and an answer that is not an event stream must be
// written within WriteTimeout. Event streams set a deadline per event
// (sse.Stream); the gateway's paths (/v1/) get none here, since a completion
// may take minutes and the gateway bounds its own waits. The write
// deadline is always set or cleared: the server keeps a connection's
// deadline from one request to the next.
func (h *Handler) setDeadlines(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	now := time.Now()
	if r.Body != nil && r.Body != http.NoBody {
		_ = rc.SetReadDeadline(now.Add(h.opts.BodyTimeout))
		r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc}
	}
	p := r.URL.Path
	if isEventStream(p) || strings.HasPrefix(p, "/v1/") {
		_ = rc.SetWriteDeadline(time.Time{})
	} else {
		_ = rc.SetWriteDeadline(now.Add(h.opts.WriteTimeout))
	}
}

func isEventStream(path string) bool {
	return strings.HasPrefix(path, "/api/v1/subscribe/") || strings.HasPrefix(path, "/api/v1/tokens/") ||
		strings.HasPrefix(path, "/api/v1/sessions/") && strings.HasSuffix(path, "/watch")
}

// deadlineBody lifts the body read deadline once the body has been read:
// the server then reads the connection in the background to notice a
// client going away, and an expired deadline there would cancel the
// request's context in the middle of a long answer.
type deadlineBody struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && !b.done {
		b.done = true
		if err == io.EOF {
			_ = b.rc.SetReadDeadline(time.Time{})
		}
	}
	return n, err
}
