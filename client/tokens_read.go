package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/semaq/semaq/client/internal/denial"
	"github.com/semaq/semaq/semaq"
)

// Token streams: the reader side. See docs/tokens.md.

// ErrTokenGap matches a *TokenGapError: a record of a token stream did not
// arrive within the gap timeout, or too many later ones arrived before it.
// The reader never skips a missing record.
var ErrTokenGap = errors.New("client: token stream gap")

// TokenGapError says which record is missing and for how long it was
// awaited. It matches ErrTokenGap.
type TokenGapError struct {
	ID       string
	Missing  uint64        // seq of the first missing record
	Waited   time.Duration // since a later record showed the gap
	Buffered int           // later records held back
}

func (e *TokenGapError) Error() string {
	return fmt.Sprintf("client: token stream %s: record %d missing after %s (%d later records held back)",
		e.ID, e.Missing, e.Waited.Round(time.Millisecond), e.Buffered)
}

// Is makes the error match ErrTokenGap.
func (e *TokenGapError) Is(target error) bool { return target == ErrTokenGap }

type tokenReadOptions struct {
	tenant     string // tenant token; "" asks the broker
	fromSeq    uint64
	fromOffset uint64
	window     int
	gapTimeout time.Duration
	live       bool
}

// TokenReadOption configures ReadTokens.
type TokenReadOption func(*tokenReadOptions) error

// ForTenant reads the stream of a request of tenant ("" for a request
// made without one). By default a reader reads under the tenant the broker
// gives its connection (ServerInfo's TokenTenant): its user's tenant, or
// every tenant for services and admins (and with auth off); a service
// names the tenant to read one tenant's streams only, and saves asking.
func ForTenant(tenant string) TokenReadOption {
	return func(o *tokenReadOptions) error {
		if tenant == "" {
			o.tenant = semaq.TokenNoTenant
			return nil
		}
		if err := semaq.CheckName(tenant); err != nil {
			return fmt.Errorf("client: ForTenant: tenant %v", err)
		}
		o.tenant = tenant
		return nil
	}
}

// readTenant is the tenant token this client reads token streams under,
// as the broker says (asked once per client).
func (c *Client) readTenant(ctx context.Context) (string, error) {
	c.tokenTenantMu.Lock()
	t := c.tokenTenant
	c.tokenTenantMu.Unlock()
	if t != "" {
		return t, nil
	}
	info, err := c.ServerInfo(ctx)
	if err != nil {
		return "", fmt.Errorf("client: token streams: asking the broker for this connection's tenant: %w", err)
	}
	t = info.TokenTenant
	if t == "" {
		t = semaq.TokenAnyTenant // a broker from before tenants in token subjects
	}
	c.tokenTenantMu.Lock()
	c.tokenTenant = t
	c.tokenTenantMu.Unlock()
	return t, nil
}

// FromSeq starts reading at record seq (1 is the first): a reader that
// saw records up to n resumes with FromSeq(n+1).
func FromSeq(seq uint64) TokenReadOption {
	return func(o *tokenReadOptions) error {
		if seq == 0 {
			return errors.New("client: FromSeq: records are numbered from 1")
		}
		o.fromSeq = seq
		return nil
	}
}

// FromOffset starts reading at token offset n (0 is the first token): a
// chunk that starts before n is cut to begin there.
func FromOffset(n uint64) TokenReadOption {
	return func(o *tokenReadOptions) error {
		o.fromOffset = n
		return nil
	}
}

// WithReorderWindow bounds how many records that arrive ahead of a missing
// one are held back waiting for it (default 1024); one more is a gap.
func WithReorderWindow(n int) TokenReadOption {
	return func(o *tokenReadOptions) error {
		if n < 1 || n > 1<<20 {
			return fmt.Errorf("client: WithReorderWindow: %d is outside 1..1048576", n)
		}
		o.window = n
		return nil
	}
}

// WithGapTimeout sets how long a missing record is awaited once a later
// one has arrived (default 5s).
func WithGapTimeout(d time.Duration) TokenReadOption {
	return func(o *tokenReadOptions) error {
		if d <= 0 {
			return fmt.Errorf("client: WithGapTimeout: %s is not positive", d)
		}
		o.gapTimeout = d
		return nil
	}
}

// WithLiveStart is for a reader made before the stream's first record is
// written — the gateway makes its reader before it queues the request. The
// records then come from a plain subscription, which costs the broker no
// consumer; if one is missing (a record the subscription lost, or a
// reader that was made too late after all) the reader switches at once to
// a JetStream consumer over the stored records, which fills the gap.
// A reader made after the stream ended would wait for nothing: do not use
// it then.
func WithLiveStart() TokenReadOption {
	return func(o *tokenReadOptions) error {
		o.live = true
		return nil
	}
}

// TokenReader reads one token stream in order. Next must be called from
// one goroutine at a time; Close may be called from any and makes a
// blocked Next return. A slow reader holds back only itself: records stay
// in the stream until it asks for them.
type TokenReader struct {
	js     jetstream.JetStream
	denied *denial.Set
	id     string
	opts   tokenReadOptions
	cons   jetstream.Consumer        // nil while reading live
	it     jetstream.MessagesContext // nil while reading live
	live   *nats.Subscription        // WithLiveStart, until a gap
	liveQ  *liveQueue                // what live delivers
	// stopDenied ends the watch for the server's refusal of live.
	stopDenied func()
	done       chan struct{} // closed by Close
	// srcMu guards cons, it and live against Close from another
	// goroutine; nobody blocks while holding it.
	srcMu sync.Mutex

	mu       sync.Mutex // held by Next
	want     uint64     // next seq to deliver
	ahead    map[uint64]*semaq.TokenChunk
	gapSince time.Time
	err      error // sticky end: io.EOF after the final record, or the failure
	dups     int

	closeOnce sync.Once
}

// ReadTokens starts reading the token stream of request id. It may start
// before the writer: it waits for the records. Next returns the chunks in
// order, duplicates dropped.
func (c *Client) ReadTokens(ctx context.Context, id string, opts ...TokenReadOption) (*TokenReader, error) {
	if err := semaq.CheckRequestID(id); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: ReadTokens: %v", err)
	}
	o := tokenReadOptions{window: 1024, gapTimeout: 5 * time.Second}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, semaq.NewAPIError(semaq.ErrBadRequest, "%v", err)
		}
	}
	if o.tenant == "" {
		t, err := c.readTenant(ctx)
		if err != nil {
			return nil, err
		}
		o.tenant = t
	}
	want := uint64(1)
	if o.fromSeq > 0 {
		want = o.fromSeq
	}
	r := &TokenReader{js: c.js, denied: c.denied, id: id, opts: o, want: want, ahead: map[uint64]*semaq.TokenChunk{}, done: make(chan struct{})}
	if o.live {
		// A handler and a queue of our own, not SubscribeSync: a sync
		// subscription allocates a 64k-slot channel, a cost per request.
		q := &liveQueue{ready: make(chan struct{}, 1)}
		// What JetStream republishes once stored: only records the
		// broker's relay accepted.
		subj := semaq.TokenLiveFilter(o.tenant, id)
		if c.denied != nil {
			// A tenant this user may not read: the server refuses the
			// subscription with an asynchronous -ERR, which ends Next
			// at once instead of a wait for records that never come.
			r.stopDenied = c.denied.WatchSubscription(subj, q.fail)
		}
		sub, err := c.nc.Subscribe(subj, q.push)
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("client: reading token stream %s: %w", id, err)
		}
		_ = sub.SetPendingLimits(-1, 64<<20)
		r.live, r.liveQ = sub, q
		return r, nil
	}
	if err := r.openConsumer(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// openConsumer starts reading the stored records from the beginning.
func (r *TokenReader) openConsumer(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	filter := semaq.TokenSubjectFilter(r.opts.tenant, r.id)
	if r.denied != nil {
		// The create's subject names the filter after a consumer name
		// nats.go draws: a refusal of the create ends the wait at once.
		create := "$JS.API.CONSUMER.CREATE." + semaq.TokenStream + "."
		var done func()
		ctx, done = r.denied.WatchMatch(ctx, func(subj string) bool {
			return strings.HasPrefix(subj, create) && strings.HasSuffix(subj, "."+filter)
		})
		defer done()
	}
	cons, err := r.js.OrderedConsumer(ctx, semaq.TokenStream, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{filter},
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		// A reader that vanished without Close frees the broker soon.
		InactiveThreshold: 10 * time.Second,
	})
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return semaq.NewAPIError(semaq.ErrUnavailable, "token stream store %s not found: is this a SemaQ broker?", semaq.TokenStream)
		}
		if cause := denial.Cause(ctx); cause != nil {
			return fmt.Errorf("client: reading token stream %s under tenant %s: %w", r.id, r.opts.tenant, cause)
		}
		return fmt.Errorf("client: reading token stream %s: %w", r.id, err)
	}
	it, err := cons.Messages(jetstream.PullMaxMessages(256))
	if err != nil {
		return fmt.Errorf("client: reading token stream %s: %w", r.id, err)
	}
	r.srcMu.Lock()
	defer r.srcMu.Unlock()
	select {
	case <-r.done: // closed meanwhile
		it.Stop()
		return ErrSubscriptionDone
	default:
	}
	r.cons, r.it = cons, it
	return nil
}

// ID is the request id of the stream.
func (r *TokenReader) ID() string { return r.id }

// Duplicates is how many records were dropped as duplicates so far.
func (r *TokenReader) Duplicates() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dups
}

// Next returns the next chunk in order, waiting for it. The final record
// is returned as a chunk (Final set, usage inside); after it Next returns
// io.EOF. A stream aborted by its writer returns the *semaq.TokenError
// (errors.Is(err, semaq.ErrTokenAborted)); a record that does not come
// returns a *TokenGapError. These ends are sticky.
func (r *TokenReader) Next(ctx context.Context) (*semaq.TokenChunk, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		if r.err != nil {
			return nil, r.err
		}
		if c, ok := r.ahead[r.want]; ok {
			delete(r.ahead, r.want)
			r.want++
			r.gapSince = time.Time{}
			if len(r.ahead) > 0 {
				r.gapSince = time.Now()
			}
			if out, ok := r.deliver(c); ok {
				return out, r.errFor(out)
			}
			continue
		}
		rec, err := r.receive(ctx)
		if err != nil {
			return nil, err
		}
		switch {
		case rec.Seq < r.want:
			r.dups++
		case rec.Seq == r.want:
			r.want++
			if len(r.ahead) > 0 {
				r.gapSince = time.Now() // progress: the next gap waits afresh
			}
			if out, ok := r.deliver(rec); ok {
				return out, r.errFor(out)
			}
		default:
			if _, dup := r.ahead[rec.Seq]; dup {
				r.dups++
				continue
			}
			if len(r.ahead) >= r.opts.window {
				r.err = &TokenGapError{ID: r.id, Missing: r.want, Waited: time.Since(r.gapSince), Buffered: len(r.ahead)}
				return nil, r.err
			}
			r.ahead[rec.Seq] = rec
			if r.gapSince.IsZero() {
				r.gapSince = time.Now()
			}
		}
	}
}

// errFor sets the sticky end a terminal chunk brings.
func (r *TokenReader) errFor(c *semaq.TokenChunk) error {
	switch {
	case c == nil:
		return r.err
	case c.Final != nil:
		r.err = io.EOF
	}
	return nil
}

// deliver applies FromOffset to c; ok is false when nothing of c is left.
// An error record becomes the sticky error and is returned as nil, ok.
func (r *TokenReader) deliver(c *semaq.TokenChunk) (*semaq.TokenChunk, bool) {
	if c.Error != nil {
		r.err = c.Error
		return nil, true
	}
	from := r.opts.fromOffset
	if c.Terminal() || from == 0 || c.Offset >= from {
		return c, true
	}
	end := c.Offset + uint64(c.N)
	if end <= from {
		return nil, false
	}
	k := int(from - c.Offset)
	if len(c.Lens) != c.N {
		return c, true // cannot cut: give the whole chunk
	}
	cut := 0
	for _, l := range c.Lens[:k] {
		cut += l
	}
	c.Text, c.Lens, c.N, c.Offset = c.Text[cut:], c.Lens[k:], c.N-k, from
	return c, true
}

// receive waits for the next record from the broker, bounded by ctx and,
// when records are held back, by the gap timeout.
func (r *TokenReader) receive(ctx context.Context) (*semaq.TokenChunk, error) {
	waitCtx := ctx
	if len(r.ahead) > 0 {
		deadline := r.gapSince.Add(r.opts.gapTimeout)
		if !time.Now().Before(deadline) {
			r.err = &TokenGapError{ID: r.id, Missing: r.want, Waited: time.Since(r.gapSince), Buffered: len(r.ahead)}
			return nil, r.err
		}
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	var data []byte
	r.srcMu.Lock()
	live, it := r.live, r.it
	r.srcMu.Unlock()
	if live != nil {
		d, err := r.liveQ.next(waitCtx, r.done)
		if err != nil {
			return nil, r.waitErr(ctx, waitCtx, err)
		}
		data = d
	} else {
		m, err := it.Next(jetstream.NextContext(waitCtx))
		if err != nil {
			return nil, r.waitErr(ctx, waitCtx, err)
		}
		data = m.Data()
	}
	rec, err := semaq.ParseTokenChunk(data)
	if err != nil {
		r.err = fmt.Errorf("client: token stream %s: %w", r.id, err)
		return nil, r.err
	}
	rec.RequestID = r.id
	if live != nil && rec.Seq > r.want {
		// One writer's records reach a subscription in order: a jump
		// means some were lost or came before it. The stored stream has
		// them all.
		if err := r.switchToStored(ctx); err != nil {
			return nil, err
		}
		return r.receive(ctx)
	}
	return rec, nil
}

// switchToStored replaces the live subscription with a consumer over the
// stored records; the records already seen come again and are dropped as
// duplicates.
func (r *TokenReader) switchToStored(ctx context.Context) error {
	r.srcMu.Lock()
	if r.live != nil {
		_ = r.live.Unsubscribe()
		r.live = nil
	}
	r.srcMu.Unlock()
	select {
	case <-r.done:
		return ErrSubscriptionDone
	default:
	}
	if err := r.openConsumer(ctx); err != nil {
		r.err = err
		return err
	}
	return nil
}

// liveQueue holds what a live subscription delivered until Next takes it.
type liveQueue struct {
	mu    sync.Mutex
	msgs  [][]byte
	err   error         // the subscription's end, once msgs are read
	ready chan struct{} // has a token when msgs may be non-empty or err set
}

// fail ends the queue with err once the records it holds are read.
func (q *liveQueue) fail(err error) {
	q.mu.Lock()
	if q.err == nil {
		q.err = err
	}
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *liveQueue) push(m *nats.Msg) {
	q.mu.Lock()
	q.msgs = append(q.msgs, m.Data)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *liveQueue) next(ctx context.Context, done <-chan struct{}) ([]byte, error) {
	for {
		q.mu.Lock()
		if len(q.msgs) > 0 {
			d := q.msgs[0]
			q.msgs[0] = nil
			q.msgs = q.msgs[1:]
			q.mu.Unlock()
			return d, nil
		}
		if err := q.err; err != nil {
			q.mu.Unlock()
			return nil, err
		}
		q.mu.Unlock()
		select {
		case <-q.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-done:
			return nil, ErrSubscriptionDone
		}
	}
}

// waitErr explains why waiting for a record failed.
func (r *TokenReader) waitErr(ctx, waitCtx context.Context, err error) error {
	if errors.Is(err, semaq.ErrForbidden) {
		r.err = fmt.Errorf("client: reading token stream %s under tenant %s: %w", r.id, r.opts.tenant, err)
		return r.err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if waitCtx.Err() != nil {
		r.err = &TokenGapError{ID: r.id, Missing: r.want, Waited: time.Since(r.gapSince), Buffered: len(r.ahead)}
		return r.err
	}
	if errors.Is(err, ErrSubscriptionDone) || errors.Is(err, jetstream.ErrMsgIteratorClosed) || errors.Is(err, nats.ErrConnectionClosed) {
		return ErrSubscriptionDone
	}
	return fmt.Errorf("client: reading token stream %s: %w", r.id, err)
}

// Close stops reading and deletes the reader's consumer in the background:
// a broker with thousands of idle consumers on SQ_TOKENS does more work
// per record.
func (r *TokenReader) Close() error {
	r.closeOnce.Do(func() {
		r.srcMu.Lock()
		defer r.srcMu.Unlock()
		close(r.done)
		if r.stopDenied != nil {
			r.stopDenied()
		}
		if r.live != nil {
			_ = r.live.Unsubscribe()
		}
		if r.it == nil {
			return
		}
		r.it.Stop()
		info := r.cons.CachedInfo()
		if info == nil {
			return
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = r.js.DeleteConsumer(ctx, semaq.TokenStream, info.Name) // else InactiveThreshold removes it
		}()
	})
	return nil
}

// TokenResult is a whole token stream read by Collect.
type TokenResult struct {
	Text        string
	Calls       []FunctionCall
	Final       semaq.TokenFinal
	Tokens      uint64 // tokens read (after FromOffset)
	Records     int
	TraceParent string
	Session     string
}

// Collect reads the rest of the stream and assembles it: the text, the
// function calls with complete arguments, the final record.
func (r *TokenReader) Collect(ctx context.Context) (*TokenResult, error) {
	var (
		res   TokenResult
		text  strings.Builder
		calls FunctionCalls
	)
	for {
		c, err := r.Next(ctx)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		res.Records++
		res.TraceParent, res.Session = c.TraceParent, c.Session
		if c.Final != nil {
			res.Final = *c.Final
			continue
		}
		res.Tokens += uint64(c.N)
		text.WriteString(c.Text)
		if c.Func != nil {
			calls.Add(*c.Func)
		}
	}
	res.Text = text.String()
	var err error
	if res.Calls, err = calls.Calls(); err != nil {
		return nil, fmt.Errorf("client: token stream %s: %w", r.id, err)
	}
	return &res, nil
}

// FunctionCall is a function (tool) call put together from its fragments.
type FunctionCall struct {
	Index     int    `json:"index"`
	ID        string `json:"id,omitempty"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// FunctionCalls reassembles function-call fragments: the first fragment
// of an index names the call, the later ones append to its arguments. The
// zero value is ready to use; it is not safe for concurrent use.
type FunctionCalls struct {
	calls map[int]*FunctionCall
}

// Add takes the next fragment of a call.
func (fc *FunctionCalls) Add(f semaq.FunctionCallFragment) {
	if fc.calls == nil {
		fc.calls = map[int]*FunctionCall{}
	}
	c := fc.calls[f.Index]
	if c == nil {
		c = &FunctionCall{Index: f.Index}
		fc.calls[f.Index] = c
	}
	if f.ID != "" {
		c.ID = f.ID
	}
	if f.Name != "" {
		c.Name = f.Name
	}
	c.Arguments += f.Arguments
}

// Calls returns the calls by index. Each must have a name and arguments
// that are one complete JSON value (empty arguments become "{}"); the
// first that is not is an error naming it.
func (fc *FunctionCalls) Calls() ([]FunctionCall, error) {
	if len(fc.calls) == 0 {
		return nil, nil
	}
	out := make([]FunctionCall, 0, len(fc.calls))
	for _, c := range fc.calls {
		if c.Name == "" {
			return nil, fmt.Errorf("function call %d has no name", c.Index)
		}
		if strings.TrimSpace(c.Arguments) == "" {
			c.Arguments = "{}"
		}
		if !json.Valid([]byte(c.Arguments)) {
			return nil, fmt.Errorf("function call %d (%s): arguments are not complete JSON: %.200q", c.Index, c.Name, c.Arguments)
		}
		out = append(out, *c)
	}
	slices.SortFunc(out, func(a, b FunctionCall) int { return a.Index - b.Index })
	return out, nil
}

// TokenStatus asks the broker what it knows of request id's token stream
// ($SQ.API.TOKENS.STATUS): whether the id is known at all (records stored,
// a writer's claim, or a queued or held request with that Nats-Msg-Id),
// how many records are stored and whether the stream has ended. A reader
// that must not wait for an id nobody will write checks it before
// ReadTokens.
func (c *Client) TokenStatus(ctx context.Context, id string) (*semaq.TokenStatus, error) {
	if err := semaq.CheckRequestID(id); err != nil {
		return nil, semaq.NewAPIError(semaq.ErrBadRequest, "client: TokenStatus: %v", err)
	}
	var st semaq.TokenStatus
	if err := c.request(ctx, semaq.APITokenStatus, semaq.TokenStatusRequest{ID: id}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}
