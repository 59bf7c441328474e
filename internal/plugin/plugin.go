package plugin

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero"

	"github.com/semaq/semaq/internal/plugin/wire"
)

// Plugin is a loaded module and its pool of instances. It is safe for concurrent use: each call takes an instance
// to itself, making one while fewer than Limits.MaxInstances exist and waiting for one otherwise.
type Plugin struct {
	name     string
	lim      Limits
	stages   uint32 // bits of the stages it implements
	rt       wazero.Runtime
	compiled wazero.CompiledModule
	owner    *Runtime

	idle  chan *instance // instances free for a call
	slots chan struct{}  // one token per live instance, idle or busy: at most MaxInstances

	mu       sync.Mutex
	closed   bool
	inflight int
	drained  chan struct{} // closed when closed and no call is in flight
	freeOnce sync.Once

	calls, failures atomic.Uint64
	consecutive     atomic.Int64

	failMu         sync.Mutex
	lastErr        string
	disabled       atomic.Bool
	disabledReason string
	onDisable      func(reason string)
}

// Stats is what a plugin has done. It never holds a payload: errors name what failed, not the data.
type Stats struct {
	Calls          uint64 // calls made, failed ones included
	Failures       uint64 // calls that failed with ErrTrap, ErrTimeout, ErrMemory or ErrBadOutput
	Consecutive    int    // failures since the last success
	LastError      string // the last failure's error, "" if none
	Instances      int    // instances alive, idle or busy
	Disabled       bool
	DisabledReason string
}

// Name returns the name the plugin was loaded under.
func (p *Plugin) Name() string { return p.name }

// Limits returns the plugin's limits, defaults filled in.
func (p *Plugin) Limits() Limits { return p.lim }

// Implements reports whether the plugin implements stage s.
func (p *Plugin) Implements(s Stage) bool { return p.stages&s.bit() != 0 }

// Disabled reports whether the plugin has disabled itself, and why.
func (p *Plugin) Disabled() (bool, string) {
	if !p.disabled.Load() {
		return false, ""
	}
	p.failMu.Lock()
	defer p.failMu.Unlock()
	return true, p.disabledReason
}

// Stats returns what the plugin has done so far.
func (p *Plugin) Stats() Stats {
	p.failMu.Lock()
	defer p.failMu.Unlock()
	return Stats{
		Calls:          p.calls.Load(),
		Failures:       p.failures.Load(),
		Consecutive:    int(p.consecutive.Load()),
		LastError:      p.lastErr,
		Instances:      len(p.slots),
		Disabled:       p.disabled.Load(),
		DisabledReason: p.disabledReason,
	}
}

// Ingress runs the ingress stage on in. An error is either the plugin's failure (ErrTrap, ErrTimeout, ErrMemory,
// ErrBadOutput), after which the broker decides whether the message passes or is refused, or a refusal to call
// (ErrDisabled, ErrClosed, ErrNoStage, ErrInputTooLarge, or ctx's error).
func (p *Plugin) Ingress(ctx context.Context, in *Message) (*IngressResult, error) {
	wm := (*wire.Message)(in)
	size := wire.MessageInputSize(wm)
	var res *IngressResult
	err := p.run(ctx, StageIngress, size, func(ctx context.Context, inst *instance) error {
		ptr, err := inst.write(ctx, size, func(b []byte) []byte { return wire.AppendMessageInput(b, wm) })
		if err != nil {
			return err
		}
		packed, err := inst.invoke(ctx, inst.stage[StageIngress], ptr, size)
		if err != nil {
			return err
		}
		if packed == 0 {
			res = &IngressResult{Action: IngressPass}
			return nil
		}
		b, err := inst.output(packed, wire.MaxOutputBytes)
		if err != nil {
			return err
		}
		out, err := wire.DecodeIngress(b)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrBadOutput, err)
		}
		res = &IngressResult{Action: IngressAction(out.Action), Reason: out.Reason, Header: out.Header, Data: out.Data}
		if len(out.Messages) > 0 {
			res.Messages = make([]Message, len(out.Messages))
			for i, m := range out.Messages {
				res.Messages[i] = Message(m)
			}
		}
		return nil
	})
	return res, err
}

// Filter runs the filter stage on in: whether a subscription sees it. Errors are Ingress's.
func (p *Plugin) Filter(ctx context.Context, in *Message) (bool, error) {
	wm := (*wire.Message)(in)
	size := wire.MessageInputSize(wm)
	var keep bool
	err := p.run(ctx, StageFilter, size, func(ctx context.Context, inst *instance) error {
		ptr, err := inst.write(ctx, size, func(b []byte) []byte { return wire.AppendMessageInput(b, wm) })
		if err != nil {
			return err
		}
		r, err := inst.invoke(ctx, inst.stage[StageFilter], ptr, size)
		if err != nil {
			return err
		}
		switch uint32(r) {
		case 0:
		case 1:
			keep = true
		default:
			return fmt.Errorf("%w: semaq_filter returned %d; 1 keeps, 0 drops", ErrBadOutput, int32(r))
		}
		return nil
	})
	return keep, err
}

// Tokens runs the tokens stage on one chunk of stream. Errors are Ingress's.
func (p *Plugin) Tokens(ctx context.Context, stream string, text string) (*TokensResult, error) {
	size := 1 + 4 + len(stream) + 4 + len(text)
	var res *TokensResult
	err := p.run(ctx, StageTokens, size, func(ctx context.Context, inst *instance) error {
		ptr, err := inst.write(ctx, size, func(b []byte) []byte { return wire.AppendTokensInput(b, stream, text) })
		if err != nil {
			return err
		}
		packed, err := inst.invoke(ctx, inst.stage[StageTokens], ptr, size)
		if err != nil {
			return err
		}
		if packed == 0 {
			res = &TokensResult{Action: TokensPass}
			return nil
		}
		b, err := inst.output(packed, wire.MaxOutputBytes)
		if err != nil {
			return err
		}
		out, err := wire.DecodeTokens(b)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrBadOutput, err)
		}
		res = &TokensResult{Action: TokensAction(out.Action), Text: out.Text, Reason: out.Reason}
		return nil
	})
	return res, err
}

// run makes one call: it takes an instance, bounds the call by the timeout, and accounts for the outcome. A
// failed instance is dropped and a fresh one made by a later call.
func (p *Plugin) run(ctx context.Context, s Stage, size int, call func(context.Context, *instance) error) (err error) {
	if !p.Implements(s) {
		return fmt.Errorf("plugin %s: %w: %s", p.name, ErrNoStage, s)
	}
	if size > p.lim.maxInput() {
		return fmt.Errorf("plugin %s: %s: %w: %d bytes, more than the %d a plugin of %d MiB takes", p.name, s, ErrInputTooLarge, size, p.lim.maxInput(), p.lim.MemoryPages/16)
	}
	if err := p.enter(); err != nil {
		return err
	}
	disabledNow := false
	defer func() {
		p.leave()
		if disabledNow && p.onDisable != nil {
			p.onDisable(p.disabledReason) // after leave, so the callback may Close the plugin
		}
	}()
	p.calls.Add(1)

	inst, err := p.acquire(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("plugin %s: %s: waiting for an instance: %w", p.name, s, err)
		}
		err = fmt.Errorf("plugin %s: %s: starting an instance: %w", p.name, s, err)
		disabledNow = p.failed(err)
		return err
	}
	callCtx, cancel := context.WithTimeout(ctx, p.lim.Timeout)
	defer cancel()
	if err = call(callCtx, inst); err == nil {
		p.idle <- inst
		if p.consecutive.Load() != 0 {
			p.consecutive.Store(0)
		}
		return nil
	}
	err = classify(ctx, callCtx, err, inst.stderr, inst.mem, p.lim, p.lim.Timeout)
	inst.close()
	<-p.slots
	err = fmt.Errorf("plugin %s: %s: %w", p.name, s, err)
	if isFailure(err) {
		disabledNow = p.failed(err)
	}
	return err
}

func isFailure(err error) bool {
	return errors.Is(err, ErrTrap) || errors.Is(err, ErrTimeout) || errors.Is(err, ErrMemory) || errors.Is(err, ErrBadOutput)
}

// failed counts a failure and reports whether it is the one that disabled the plugin.
func (p *Plugin) failed(err error) bool {
	p.failures.Add(1)
	n := p.consecutive.Add(1)
	p.failMu.Lock()
	defer p.failMu.Unlock()
	p.lastErr = err.Error()
	if n < int64(p.lim.FailAfter) || p.disabled.Load() {
		return false
	}
	p.disabledReason = fmt.Sprintf("%d failures in a row, the last: %v", n, err)
	p.disabled.Store(true)
	return true
}

func (p *Plugin) enter() error {
	if p.disabled.Load() {
		_, reason := p.Disabled()
		return fmt.Errorf("plugin %s: %w: %s", p.name, ErrDisabled, reason)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("plugin %s: %w", p.name, ErrClosed)
	}
	p.inflight++
	return nil
}

func (p *Plugin) leave() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inflight--
	if p.closed && p.inflight == 0 {
		close(p.drained)
	}
}

// acquire returns an idle instance, or makes one if fewer than MaxInstances exist, or waits for one.
func (p *Plugin) acquire(ctx context.Context) (*instance, error) {
	select {
	case inst := <-p.idle:
		return inst, nil
	default:
	}
	select {
	case inst := <-p.idle:
		return inst, nil
	case p.slots <- struct{}{}:
		inst, err := p.newInstance(ctx)
		if err != nil {
			<-p.slots
			return nil, err
		}
		return inst, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Close drains the plugin: new calls fail with ErrClosed, calls in flight finish, then every instance is freed.
// If ctx ends first, the calls still in flight are stopped and Close returns ctx's error. Close is idempotent.
func (p *Plugin) Close(ctx context.Context) error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		if p.inflight == 0 {
			close(p.drained)
		}
	}
	p.mu.Unlock()
	var err error
	select {
	case <-p.drained:
	case <-ctx.Done():
		err = fmt.Errorf("plugin %s: closing with calls in flight: %w", p.name, ctx.Err())
	}
	if cerr := p.closeNow(); err == nil {
		err = cerr
	}
	return err
}

// closeNow frees the wazero runtime, which stops whatever still runs in it.
func (p *Plugin) closeNow() error {
	var err error
	p.freeOnce.Do(func() {
		err = p.rt.Close(context.Background())
		if p.owner != nil {
			p.owner.forget(p)
		}
	})
	return err
}
