package scenario

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/semaq/semaq/client"
	"github.com/semaq/semaq/internal/bench"
	"github.com/semaq/semaq/semaq"
)

// Token scenarios on SemaQ use its token streams: each session writes
// answers of tokens.per_stream tokens through client.OpenTokenStream (records
// go through the broker's token relay into SQ_TOKENS; tokens written while
// the write window is full merge into one record) and a reader per answer follows it with
// client.ReadTokens, in order. The baselines carry one message per token.
// A token's latency runs from its Write (or its scheduled time, when the
// publisher is behind) to the reader's Next that returns it: both ends are
// in this process, so the writer's timestamps are shared in memory rather
// than sent.

// tokenAnswer is one answer being written and read.
type tokenAnswer struct {
	id     string
	w      *client.TokenWriter
	read   chan struct{} // closed when its reader is done
	mu     sync.Mutex
	origin []time.Time // per token offset
}

func (a *tokenAnswer) add(t time.Time) {
	a.mu.Lock()
	a.origin = append(a.origin, t)
	a.mu.Unlock()
}

func (a *tokenAnswer) at(off uint64) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if off >= uint64(len(a.origin)) {
		return time.Time{}, false
	}
	return a.origin[off], true
}

const tokenSetup = "semaq token streams: client.OpenTokenStream into SQ_TOKENS (records through the broker's token relay, which checks writer key, record and limits; tokens merge into a record while the write window is full), client.ReadTokens per answer, in order"

// runTokenStreams is the semaq target of a token scenario.
func (m *measurement) runTokenStreams(ctx context.Context, bar *progressBar) error {
	sc := m.sc
	var clients []*client.Client
	defer func() {
		for _, c := range clients {
			c.Close()
		}
	}()
	connect := func(name string) (*client.Client, error) {
		c, err := client.Connect(ctx, m.rig.Broker.ClientURL(), client.WithName("semaq-bench-"+name))
		if err != nil {
			return nil, fmt.Errorf("bench: semaq: %w", err)
		}
		clients = append(clients, c)
		return c, nil
	}
	writers := make([]*client.Client, sc.Publishers)
	readers := make([]*client.Client, sc.Publishers)
	for i := range writers {
		var err error
		if writers[i], err = connect(fmt.Sprintf("tokens-w%d", i)); err != nil {
			return err
		}
		if readers[i], err = connect(fmt.Sprintf("tokens-r%d", i)); err != nil {
			return err
		}
	}
	var reading sync.WaitGroup
	rctx, stopReaders := context.WithCancel(ctx)
	defer func() { stopReaders(); reading.Wait() }()

	stopClock := m.startClock(ctx, bar)
	defer stopClock(false)
	var wg sync.WaitGroup
	errs := make([]error, sc.Publishers)
	for i := range writers {
		wg.Go(func() { errs[i] = m.writeTokens(ctx, rctx, i, writers[i], readers[i], &reading) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	stopClock(true)
	return m.drain(ctx)
}

// writeTokens is publisher i of a token scenario: like publish, with each
// message a token of its session's current answer.
func (m *measurement) writeTokens(ctx, rctx context.Context, i int, wc, rc *client.Client, reading *sync.WaitGroup) error {
	sc := m.sc
	rng := newPublisherRand(sc, i)
	gen := newPayloadGen(sc, i)
	var own []int
	for s := i; s < sc.Sessions; s += sc.Publishers {
		own = append(own, s)
	}
	if len(own) == 0 {
		own = []int{i % sc.Sessions}
	}
	open := map[int]*tokenAnswer{}
	last := map[int]*tokenAnswer{} // each session's latest answer
	answers := map[int]int{}
	var closing sync.WaitGroup
	var closeErr error
	var closeMu sync.Mutex
	finish := func(a *tokenAnswer) {
		closing.Go(func() {
			if err := a.w.Close(ctx, semaq.TokenFinal{FinishReason: "stop"}); err != nil {
				m.fail(err)
				closeMu.Lock()
				closeErr = errors.Join(closeErr, err)
				closeMu.Unlock()
			}
		})
	}
	defer func() {
		for _, a := range open {
			finish(a)
		}
		closing.Wait()
	}()
	arr := newArrivals(rng, float64(sc.Rate)/float64(sc.Publishers), m.start)
	defer arr.stop()
	for {
		due, err := arr.next(ctx)
		if err != nil {
			return err
		}
		if !due.Before(m.measureEnd) {
			return nil
		}
		origin := due
		if now := time.Now(); now.Sub(due) <= bench.PacerSlack {
			origin = now
		}
		s := own[rng.IntN(len(own))]
		a := open[s]
		if a == nil {
			// A session asks its next question once it has read the last
			// answer, as a conversation does: readers never pile up.
			if prev := last[s]; prev != nil {
				select {
				case <-prev.read:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			answers[s]++
			// Unique per round: an earlier round's answers stay readable
			// under their ids until their retention ends.
			id := fmt.Sprintf("bench-%d-r%d-s%d-%d", sc.Seed%1_000_000, m.round, s, answers[s])
			opts := []client.TokenStreamOption{client.WithStreamSession("s" + strconv.Itoa(s)), client.WithWriteWindow(sc.Window)}
			if sc.Trace {
				opts = append(opts, client.WithStreamTraceParent(rootSpan(sc.Seed, "s"+strconv.Itoa(s), int64(answers[s]))))
			}
			w, err := wc.OpenTokenStream(ctx, id, opts...)
			if err != nil {
				return fmt.Errorf("opening token stream %s: %w", id, err)
			}
			a = &tokenAnswer{id: id, w: w, read: make(chan struct{})}
			reader, err := rc.ReadTokens(ctx, id)
			if err != nil {
				// A refused reader (a consumer limit) is the target's
				// answer to the load: counted, and the answer dropped.
				m.fail(fmt.Errorf("reading token stream %s: %w", id, err))
				_ = w.Abort(ctx, err)
				continue
			}
			open[s], last[s] = a, a
			reading.Go(func() { defer close(a.read); m.readTokens(rctx, reader, a) })
		}
		n := gen.size(rng)
		off := rng.IntN(len(gen.text) - n + 1)
		a.add(origin)
		if err := a.w.Write(ctx, string(gen.text[off:off+n])); err != nil {
			m.fail(err)
			delete(open, s)
			continue
		}
		m.published.Add(1)
		if m.inMeasure(origin) {
			m.pubInWindow.Add(1)
		}
		if len(a.origin) >= sc.Tokens.PerStream {
			delete(open, s)
			finish(a)
		}
	}
}

// readTokens follows one answer to its end, recording every token.
func (m *measurement) readTokens(ctx context.Context, r *client.TokenReader, a *tokenAnswer) {
	defer r.Close()
	var want uint64
	for {
		c, err := r.Next(ctx)
		if err != nil {
			if !errors.Is(err, io.EOF) && ctx.Err() == nil {
				m.fail(err)
			}
			return
		}
		if c.Final != nil || c.Error != nil {
			continue
		}
		n := max(c.N, 1)
		now := time.Now()
		if c.Offset != want {
			m.outOfOrder.Add(1)
		}
		want = c.Offset + uint64(n)
		m.completed.Add(int64(n))
		// A record carries several tokens written at different times:
		// each gets its own latency.
		for k := range n {
			origin, ok := a.at(c.Offset + uint64(k))
			if !ok {
				continue
			}
			m.record(origin, now, len(c.Text)/n, 1)
		}
	}
}
