package client

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/semaq"
)

// Token streams: the writer side. See docs/tokens.md.

type tokenStreamOptions struct {
	key         string // writer key; random unless WithWriterKey
	traceParent string
	session     string
	retention   time.Duration
	window      int
	maxBuffered int
	// For the broker's token-stream metrics (tokens_observe.go).
	model, tenant string
	start         time.Time
}

// TokenStreamOption configures OpenTokenStream.
type TokenStreamOption func(*tokenStreamOptions) error

// WithWriterKey sets the writer key the broker ties the stream to: the
// first record claims the request id for this key and every later record
// must carry it (docs/tokens.md, "Trust model"). Without it the writer
// makes a random key of its own, which suits a writer that opens and ends
// the stream itself. A worker uses its job's lease (Job.OpenTokenStream),
// which the broker binds to the job's request id. The key is 16 to 128
// letters, digits, '-' and '_'; keep it secret.
func WithWriterKey(key string) TokenStreamOption {
	return func(o *tokenStreamOptions) error {
		if err := semaq.CheckTokenKey(key); err != nil {
			return fmt.Errorf("client: WithWriterKey: %w", err)
		}
		o.key = key
		return nil
	}
}

// newTokenKey makes a random writer key: 128 bits, base64url.
func newTokenKey() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("client: making a writer key: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// tokenErr turns the relay's JetStream-shaped refusal into the
// *semaq.APIError it is, so errors.Is matches semaq.ErrTokenLimit and the
// other sentinels.
func tokenErr(err error) error {
	if ae, ok := errors.AsType[*jetstream.APIError](err); ok && ae.ErrorCode >= 20000 {
		return &semaq.APIError{Code: ae.Code, ErrCode: uint16(ae.ErrorCode), Description: ae.Description}
	}
	return err
}

// WithStreamTraceParent binds a W3C traceparent to every record of the
// stream, so a chain of agents can be followed end to end.
func WithStreamTraceParent(tp string) TokenStreamOption {
	return func(o *tokenStreamOptions) error {
		if len(tp) > 512 {
			return errors.New("client: WithStreamTraceParent: longer than 512 bytes")
		}
		o.traceParent = tp
		return nil
	}
}

// WithStreamSession binds a session (AI-Session) to every record.
func WithStreamSession(session string) TokenStreamOption {
	return func(o *tokenStreamOptions) error {
		if len(session) > semaq.MaxEnvelopeValue {
			return fmt.Errorf("client: WithStreamSession: longer than %d bytes", semaq.MaxEnvelopeValue)
		}
		o.session = session
		return nil
	}
}

// WithRetention keeps the stream readable for d after it is closed or
// aborted (default semaq.DefaultTokenRetention; at most semaq.MaxTokenAge).
func WithRetention(d time.Duration) TokenStreamOption {
	return func(o *tokenStreamOptions) error {
		if d < 0 || d > semaq.MaxTokenAge {
			return fmt.Errorf("client: WithRetention: %s is outside 0..%s", d, semaq.MaxTokenAge)
		}
		o.retention = d
		return nil
	}
}

// WithWriteWindow bounds the records in flight to the broker without an
// acknowledgement (default 1024). When the window is full, tokens written
// meanwhile are merged into the next record instead of waiting.
func WithWriteWindow(n int) TokenStreamOption {
	return func(o *tokenStreamOptions) error {
		if n < 1 || n > 1<<16 {
			return fmt.Errorf("client: WithWriteWindow: %d is outside 1..65536", n)
		}
		o.window = n
		return nil
	}
}

// Limits of one record the writer builds.
const (
	maxRecordTokens = 1024
	maxRecordBytes  = 32 << 10
)

// pendingToken is a token or function-call fragment not yet sent.
type pendingToken struct {
	text string
	fn   *semaq.FunctionCallFragment
}

// tokenPublisher is one JetStream context shared by a client's token
// writers: a context of its own per writer would subscribe an ack inbox
// (and start two goroutines) for every request. Each writer tracks its own
// acknowledgements, so its window is its own.
type tokenPublisher struct {
	once sync.Once
	js   jetstream.JetStream
	err  error
}

func (c *Client) tokenJS() (jetstream.JetStream, error) {
	p := &c.tokens
	p.once.Do(func() {
		// The timeout fails a record the broker never answers, so Close
		// cannot wait for ever.
		p.js, p.err = jetstream.New(c.nc, jetstream.WithPublishAsyncMaxPending(1<<20),
			jetstream.WithPublishAsyncTimeout(30*time.Second))
	})
	return p.js, p.err
}

// TokenWriter writes the output of one request as a token stream. Write
// and WriteFunctionCall never wait for the broker or for readers: records
// go out asynchronously, at most the write window unacknowledged, and
// tokens written while the window is full are merged into one record.
// Close or Abort ends the stream and waits until every record is stored.
//
// Its methods may be called from several goroutines, but the order of
// tokens is the order of the calls that return.
type TokenWriter struct {
	c    *Client
	id   string
	js   jetstream.JetStream
	opts tokenStreamOptions
	hdr  nats.Header // the writer key, on every chunk; never changed

	mu      sync.Mutex
	pending []pendingToken
	bytes   int    // of text pending
	seq     uint64 // last record seq assigned
	offset  uint64 // tokens assigned to records
	written uint64 // tokens accepted by Write
	err     error  // first failure; the stream is broken after it
	ended   bool
	wake    chan struct{} // flusher has work
	room    chan struct{} // pending fell below maxBuffered
	flushed chan struct{} // flusher exited

	// The first record not stored, when err is set by one: an error record
	// takes its place, so readers see the stream end where it broke.
	failSeq, failOffset uint64

	first time.Time // when the first token was written; guarded by mu

	// Owned by the flusher goroutine, then by end once the flusher exited.
	buf      []byte
	inflight []inflightRecord // oldest first
}

// inflightRecord is a record sent and not yet acknowledged.
type inflightRecord struct {
	f           jetstream.PubAckFuture
	seq, offset uint64
}

// OpenTokenStream starts writing the token stream of request id. Nothing
// is sent until the first token; a reader may start before or after.
func (c *Client) OpenTokenStream(ctx context.Context, id string, opts ...TokenStreamOption) (*TokenWriter, error) {
	if err := semaq.CheckRequestID(id); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: OpenTokenStream: %v", err)
	}
	o := tokenStreamOptions{retention: semaq.DefaultTokenRetention, window: 1024, maxBuffered: 8 << 20}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, semaq.NewAPIError(semaq.ErrBadRequest, "%v", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if o.start.IsZero() {
		o.start = time.Now()
	}
	if o.key == "" {
		k, err := newTokenKey()
		if err != nil {
			return nil, err
		}
		o.key = k
	}
	w := &TokenWriter{c: c, id: id, opts: o, hdr: nats.Header{semaq.HdrTokenKey: {o.key}},
		wake: make(chan struct{}, 1), room: make(chan struct{}, 1), flushed: make(chan struct{})}
	js, err := c.tokenJS()
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	w.js = js
	go w.flusher()
	return w, nil
}

// ID is the request id of the stream.
func (w *TokenWriter) ID() string { return w.id }

// Tokens is how many tokens have been written so far.
func (w *TokenWriter) Tokens() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.written
}

// failAt breaks the stream at record seq (0: no record was refused).
func (w *TokenWriter) failAt(err error, seq, offset uint64) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
		w.failSeq, w.failOffset = seq, offset
	}
	w.mu.Unlock()
}

// Write appends one token. It returns at once unless more than 8 MiB of
// text waits to be sent, then it waits for room or ctx. An error means the
// stream is broken (a record could not be stored, or it was ended).
func (w *TokenWriter) Write(ctx context.Context, text string) error {
	return w.add(ctx, pendingToken{text: text})
}

// WriteFunctionCall appends a fragment of a function (tool) call: the
// first fragment of a call gives its ID and Name, the rest pieces of its
// JSON arguments. A fragment counts as one token.
func (w *TokenWriter) WriteFunctionCall(ctx context.Context, f semaq.FunctionCallFragment) error {
	if f.Index < 0 || f.Index > 1024 {
		return semaq.NewAPIError(semaq.ErrBadRequest, "client: WriteFunctionCall: index %d is outside 0..1024", f.Index)
	}
	return w.add(ctx, pendingToken{fn: &f})
}

func (w *TokenWriter) add(ctx context.Context, t pendingToken) error {
	for {
		w.mu.Lock()
		if w.err != nil {
			err := w.err
			w.mu.Unlock()
			return err
		}
		if w.ended {
			w.mu.Unlock()
			return fmt.Errorf("client: token stream %s: write after Close or Abort", w.id)
		}
		if w.bytes < w.opts.maxBuffered {
			w.pending = append(w.pending, t)
			w.bytes += len(t.text)
			if w.written == 0 {
				w.first = time.Now()
			}
			w.written++
			w.mu.Unlock()
			select {
			case w.wake <- struct{}{}:
			default:
			}
			return nil
		}
		w.mu.Unlock()
		select {
		case <-w.room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// flusher turns pending tokens into records and publishes them. It runs
// until the stream is ended and everything pending is sent.
func (w *TokenWriter) flusher() {
	defer close(w.flushed)
	var batch []pendingToken
	for {
		w.mu.Lock()
		batch, w.pending = w.pending, batch[:0]
		w.bytes = 0
		ended, failed := w.ended, w.err != nil
		w.mu.Unlock()
		select {
		case w.room <- struct{}{}:
		default:
		}
		if len(batch) == 0 {
			if ended || failed {
				return
			}
			<-w.wake
			continue
		}
		if failed {
			continue // drop: the stream is broken
		}
		w.send(batch)
	}
}

// send publishes batch as as few records as the limits allow: runs of text
// tokens merge, each function-call fragment is a record of its own.
func (w *TokenWriter) send(batch []pendingToken) {
	for len(batch) > 0 {
		var c semaq.TokenChunk
		n := 1
		if batch[0].fn != nil {
			c.Func = batch[0].fn
			c.N = 1
		} else {
			size := len(batch[0].text)
			for n < len(batch) && n < maxRecordTokens && batch[n].fn == nil && size+len(batch[n].text) <= maxRecordBytes {
				size += len(batch[n].text)
				n++
			}
			c.N = n
			if n == 1 {
				c.Text = batch[0].text
			} else {
				text := make([]byte, 0, size)
				c.Lens = make([]int, n)
				for i := range n {
					text = append(text, batch[i].text...)
					c.Lens[i] = len(batch[i].text)
				}
				c.Text = string(text)
			}
		}
		batch = batch[n:]
		w.mu.Lock()
		w.seq++
		c.Seq, c.Offset = w.seq, w.offset
		w.offset += uint64(c.N)
		w.mu.Unlock()
		if err := w.publish(semaq.TokenWriteChunkSubject(w.id), &c, w.hdr); err != nil {
			w.failAt(err, c.Seq, c.Offset) // settle set it first if it was an earlier record
			return
		}
	}
}

func (w *TokenWriter) publish(subject string, c *semaq.TokenChunk, hdr nats.Header) error {
	c.TraceParent, c.Session = w.opts.traceParent, w.opts.session
	w.buf = semaq.AppendTokenChunk(w.buf[:0], c)
	if len(w.buf) > semaq.MaxTokenRecordBytes {
		return semaq.NewAPIError(semaq.ErrTokenLimit, "client: token stream %s: record %d has %d bytes; a record is at most %d (a single token or function call fragment too large)",
			w.id, c.Seq, len(w.buf), semaq.MaxTokenRecordBytes)
	}
	if c.Seq == 1 && w.opts.tenant != "" {
		// Record 1 names the request's tenant: the broker stores the
		// stream under it until the job's binding confirms it
		// (docs/tokens.md, Tenant).
		h := make(nats.Header, len(hdr)+1)
		for k, v := range hdr {
			h[k] = v
		}
		h.Set(semaq.HdrTenant, w.opts.tenant)
		hdr = h
	}
	m := &nats.Msg{Subject: subject, Data: append([]byte(nil), w.buf...), Header: hdr}
	// Forget what is acknowledged; wait for the oldest while the window
	// is full.
	for len(w.inflight) > 0 {
		took, err := w.settle(len(w.inflight) >= w.opts.window, nil)
		if err != nil {
			return err
		}
		if !took {
			break
		}
	}
	for {
		f, err := w.js.PublishMsgAsync(m, jetstream.WithStallWait(time.Second))
		if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			continue // the broker is slow: keep waiting, the window bounds us
		}
		if err != nil {
			return fmt.Errorf("client: token stream %s: publishing: %w", w.id, err)
		}
		w.inflight = append(w.inflight, inflightRecord{f: f, seq: c.Seq, offset: c.Offset})
		return nil
	}
}

// settle takes the answer of the oldest record in flight, if it is there
// or, with wait, once it comes (unless done closes first); took says it
// did. A refusal breaks the stream. (An answer can be received only once:
// the future's channel holds one value.)
func (w *TokenWriter) settle(wait bool, done <-chan struct{}) (took bool, err error) {
	rec := w.inflight[0]
	f := rec.f
	if wait {
		select {
		case <-f.Ok():
		case err = <-f.Err():
		case <-done:
			return false, errors.New("gave up waiting")
		}
	} else {
		select {
		case <-f.Ok():
		case err = <-f.Err():
		default:
			return false, nil
		}
	}
	w.inflight[0] = inflightRecord{}
	w.inflight = w.inflight[1:]
	if err != nil {
		err = fmt.Errorf("client: token stream %s: storing record %d: %w", w.id, rec.seq, tokenErr(err))
		w.failAt(err, rec.seq, rec.offset)
	}
	return true, err
}

// Close ends the stream normally with final (finish reason and usage)
// and waits until every record is stored. A writer that failed earlier
// returns that error and writes no final record.
func (w *TokenWriter) Close(ctx context.Context, final semaq.TokenFinal) error {
	if final.FinishReason == "" {
		final.FinishReason = "stop"
	}
	return w.end(ctx, &semaq.TokenChunk{Final: &final})
}

// Abort ends the stream with an error. A *semaq.TokenError keeps its code;
// any other error is sent as code "aborted" with its text. Readers get the
// error after every token written before it.
func (w *TokenWriter) Abort(ctx context.Context, cause error) error {
	te, ok := errors.AsType[*semaq.TokenError](cause)
	if !ok {
		msg := "aborted"
		if cause != nil {
			msg = cause.Error()
		}
		te = &semaq.TokenError{Code: "aborted", Message: msg}
	}
	return w.end(ctx, &semaq.TokenChunk{Error: te})
}

func (w *TokenWriter) end(ctx context.Context, term *semaq.TokenChunk) error {
	w.mu.Lock()
	if w.ended {
		w.mu.Unlock()
		return fmt.Errorf("client: token stream %s: already ended", w.id)
	}
	w.ended = true
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
	select {
	case <-w.flushed:
	case <-ctx.Done():
		return fmt.Errorf("client: token stream %s: sending pending tokens: %w", w.id, ctx.Err())
	}
	for len(w.inflight) > 0 {
		if _, err := w.settle(true, ctx.Done()); err != nil && ctx.Err() != nil {
			return fmt.Errorf("client: token stream %s: waiting for acknowledgements: %w", w.id, ctx.Err())
		}
	}
	w.mu.Lock()
	err := w.err
	w.seq++
	term.Seq, term.Offset = w.seq, w.offset
	if err != nil && w.failSeq != 0 {
		term.Seq, term.Offset = w.failSeq, w.failOffset
	}
	w.mu.Unlock()
	if err != nil && term.Final != nil {
		return err
	}
	ctx, cancel := w.c.withTimeout(ctx)
	defer cancel()
	term.TraceParent, term.Session = w.opts.traceParent, w.opts.session
	m := nats.NewMsg(semaq.TokenWriteEndSubject(w.id))
	m.Data = semaq.AppendTokenChunk(nil, term)
	m.Header.Set(semaq.HdrTokenKey, w.opts.key)
	m.Header.Set(semaq.HdrTokenRetention, w.opts.retention.String())
	w.measure(m.Header)
	if _, perr := w.js.PublishMsg(ctx, m); perr != nil {
		return errors.Join(err, fmt.Errorf("client: token stream %s: storing the terminal record: %w", w.id, tokenErr(perr)))
	}
	return err
}

// AbortTokenStream ends the token stream of request id with an error on
// behalf of a writer that is gone (a worker that died mid-stream): the
// error record follows the last record stored (it is record 1 of a stream
// that has none). A stream that already ended is left as it is. The broker
// takes the record only from the stream's writer: pass its key with
// WithWriterKey (a redelivered job's worker: Job.AbortTokenStream); the
// trace and session options label the record; other options are ignored.
// Where the stream got to comes from the broker's status API.
func (c *Client) AbortTokenStream(ctx context.Context, id string, te *semaq.TokenError, opts ...TokenStreamOption) error {
	if err := semaq.CheckRequestID(id); err != nil {
		return semaq.NewAPIError(semaq.ErrBadRequest, "client: AbortTokenStream: %v", err)
	}
	var o tokenStreamOptions
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return semaq.NewAPIError(semaq.ErrBadRequest, "%v", err)
		}
	}
	if o.key == "" {
		k, err := newTokenKey()
		if err != nil {
			return err
		}
		o.key = k
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	// How far the stream got, as the broker says: the status API, which
	// workers may ask of any tenant's stream, where reading it is not
	// theirs.
	st, err := c.TokenStatus(ctx, id)
	if err != nil {
		return err
	}
	if st.Ended {
		return nil
	}
	term := &semaq.TokenChunk{Seq: st.Records + 1, Offset: st.Offset, Error: te,
		TraceParent: o.traceParent, Session: o.session}
	m := nats.NewMsg(semaq.TokenWriteEndSubject(id))
	m.Data = semaq.AppendTokenChunk(nil, term)
	m.Header.Set(semaq.HdrTokenKey, o.key)
	if _, err := c.js.PublishMsg(ctx, m); err != nil {
		return fmt.Errorf("client: token stream %s: storing the error record: %w", id, tokenErr(err))
	}
	return nil
}

// LastTokenRecord returns the last record stored for request id, nil when
// there is none. It reads under the tenant the broker gives this
// connection (see ForTenant).
func (c *Client) LastTokenRecord(ctx context.Context, id string) (*semaq.TokenChunk, error) {
	if err := semaq.CheckRequestID(id); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: LastTokenRecord: %v", err)
	}
	ctx, cancel := c.withTimeout(ctx)
	defer cancel()
	tenant, err := c.readTenant(ctx)
	if err != nil {
		return nil, err
	}
	return c.lastTokenRecord(ctx, tenant, id)
}

// lastTokenRecord is LastTokenRecord under tenant (a tenant token or
// semaq.TokenAnyTenant).
func (c *Client) lastTokenRecord(ctx context.Context, tenant, id string) (*semaq.TokenChunk, error) {
	st, err := c.js.Stream(ctx, semaq.TokenStream)
	if err != nil {
		return nil, fmt.Errorf("client: token streams: %w", err)
	}
	// The stream's last record is its highest: the terminal one once it
	// has ended.
	m, err := st.GetLastMsgForSubject(ctx, semaq.TokenSubjectFilter(tenant, id))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("client: token stream %s: %w", id, err)
	}
	rec, err := semaq.ParseTokenChunk(m.Data)
	if err != nil {
		return nil, fmt.Errorf("client: token stream %s: %w", id, err)
	}
	rec.RequestID = id
	return rec, nil
}
