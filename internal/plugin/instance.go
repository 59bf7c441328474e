package plugin

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"
)

// instance is one instantiation of a plugin's module. It runs one call at a time (the pool hands it to one caller)
// and is dropped after any failure, since a trap or a stopped call can leave its memory in any state.
type instance struct {
	mod    api.Module
	mem    api.Memory
	alloc  api.Function
	stage  map[Stage]api.Function
	stderr *tail
	stack  [2]uint64 // CallWithStack's params and results, reused so a call does not allocate them
}

func (p *Plugin) newInstance(ctx context.Context) (*instance, error) {
	ctx, cancel := context.WithTimeout(ctx, p.lim.initTimeout())
	defer cancel()
	out := &tail{}
	// No filesystem, no environment, no arguments, no stdin; stdout and stderr kept only as a short tail, which
	// tells an out-of-memory crash from another. Clocks and randomness are harmless, and Go's runtime wants them.
	cfg := wazero.NewModuleConfig().
		WithName("").
		WithStartFunctions("_initialize").
		WithStdout(out).
		WithStderr(out).
		WithSysWalltime().
		WithSysNanotime().
		WithRandSource(rand.Reader)
	mod, err := p.rt.InstantiateModule(ctx, p.compiled, cfg)
	if err != nil {
		return nil, classify(context.Background(), ctx, err, out, nil, p.lim, p.lim.initTimeout())
	}
	inst := &instance{mod: mod, stderr: out}
	if p.stages != 0 { // Load binds the first instance itself, once it knows the stages
		if err := inst.bind(); err != nil {
			_ = mod.Close(context.Background())
			return nil, err
		}
	}
	return inst, nil
}

// bind finds the exports a call uses; Load has checked their signatures.
func (inst *instance) bind() error {
	inst.mem = inst.mod.ExportedMemory("memory")
	inst.alloc = inst.mod.ExportedFunction("semaq_alloc")
	if inst.mem == nil || inst.alloc == nil {
		return fmt.Errorf("%w: memory or semaq_alloc not exported", ErrABI)
	}
	inst.stage = make(map[Stage]api.Function, len(Stages))
	for _, s := range Stages {
		if f := inst.mod.ExportedFunction(s.export()); f != nil {
			inst.stage[s] = f
		}
	}
	return nil
}

func (inst *instance) close() { _ = inst.mod.Close(context.Background()) }

// call0 calls a function of no parameters returning an i32, as Load does to ask the ABI version.
func (inst *instance) call0(ctx context.Context, name string, timeout time.Duration) (uint32, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	f := inst.mod.ExportedFunction(name)
	if f == nil {
		return 0, fmt.Errorf("%w: %s not exported", ErrABI, name)
	}
	res, err := f.Call(ctx)
	if err != nil {
		return 0, fmt.Errorf("%w: %s", ErrTrap, firstLine(err))
	}
	return api.DecodeU32(res[0]), nil
}

// write asks the guest for size bytes and lets enc fill them in place, so the input is copied once.
func (inst *instance) write(ctx context.Context, size int, enc func([]byte) []byte) (uint32, error) {
	inst.stack[0] = api.EncodeU32(uint32(size))
	if err := inst.alloc.CallWithStack(ctx, inst.stack[:]); err != nil {
		return 0, err
	}
	ptr := api.DecodeU32(inst.stack[0])
	view, ok := inst.mem.Read(ptr, uint32(size))
	if !ok {
		return 0, fmt.Errorf("%w: semaq_alloc(%d) returned %d, outside its %d bytes of memory", ErrBadOutput, size, ptr, inst.mem.Size())
	}
	if b := enc(view[:0]); len(b) != size || (size > 0 && &b[0] != &view[0]) {
		return 0, fmt.Errorf("plugin input encoded to %d bytes, not the %d reserved", len(b), size) // a bug here, not the plugin's
	}
	return ptr, nil
}

// invoke calls a stage's function on the input at ptr and returns its one result.
func (inst *instance) invoke(ctx context.Context, f api.Function, ptr uint32, size int) (uint64, error) {
	inst.stack[0], inst.stack[1] = api.EncodeU32(ptr), api.EncodeU32(uint32(size))
	if err := f.CallWithStack(ctx, inst.stack[:]); err != nil {
		return 0, err
	}
	return inst.stack[0], nil
}

// output returns the guest's output named by a packed i64 (address << 32 | length), as a view of its memory: the
// caller copies what it keeps before the instance runs again.
func (inst *instance) output(packed uint64, max int) ([]byte, error) {
	ptr, n := uint32(packed>>32), uint32(packed)
	if uint64(n) > uint64(max) {
		return nil, fmt.Errorf("%w: output is %d bytes, more than the %d allowed", ErrBadOutput, n, max)
	}
	b, ok := inst.mem.Read(ptr, n)
	if !ok {
		return nil, fmt.Errorf("%w: output at [%d, %d) is outside its %d bytes of memory", ErrBadOutput, ptr, uint64(ptr)+uint64(n), inst.mem.Size())
	}
	return b, nil
}

// classify turns what a failed call returned into one of the package's errors. parent is the caller's context,
// call the one bounded by limit (the plugin's timeout, or an instance start's). A call the caller gave up on is not the plugin's failure: its
// error wraps the caller's context error and none of ErrTrap, ErrTimeout, ErrMemory, ErrBadOutput.
func classify(parent, call context.Context, err error, out *tail, mem api.Memory, lim Limits, limit time.Duration) error {
	if errors.Is(err, ErrBadOutput) || errors.Is(err, ErrABI) {
		return err
	}
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		switch exit.ExitCode() {
		case sys.ExitCodeDeadlineExceeded, sys.ExitCodeContextCanceled:
			if parent.Err() != nil {
				return fmt.Errorf("call abandoned: %w", parent.Err())
			}
			if call.Err() != nil {
				return fmt.Errorf("%w after %v", ErrTimeout, limit)
			}
		}
		if outOfMemory(out, mem, lim) {
			return fmt.Errorf("%w (limit %d MiB): exited with code %d", ErrMemory, lim.MemoryPages/16, exit.ExitCode())
		}
		return fmt.Errorf("%w: exited with code %d", ErrTrap, exit.ExitCode())
	}
	if parent.Err() != nil {
		return fmt.Errorf("call abandoned: %w", parent.Err())
	}
	if outOfMemory(out, mem, lim) {
		return fmt.Errorf("%w (limit %d MiB): %s", ErrMemory, lim.MemoryPages/16, firstLine(err))
	}
	return fmt.Errorf("%w: %s", ErrTrap, firstLine(err))
}

// goArena is the step by which Go's WebAssembly heap grows: a guest within it of its cap may have failed to grow.
const goArena = 4 << 20

// outOfMemory tells a crash from running out of memory: the runtime said so, or the memory is within one growth
// step of its cap.
func outOfMemory(out *tail, mem api.Memory, lim Limits) bool {
	if out != nil && out.contains("out of memory") {
		return true
	}
	return mem != nil && uint64(mem.Size())+goArena > uint64(lim.MemoryPages)*65536
}

// firstLine keeps an error to its first line: wazero appends a stack trace of the guest.
func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// tail keeps the last bytes a guest wrote to stdout and stderr, and never more. They are looked at only to tell
// why it crashed: they may quote a payload, so they go into no error or log.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailBytes = 512

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) > tailBytes {
		p = p[len(p)-tailBytes:]
	}
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - tailBytes; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return n, nil
}

func (t *tail) contains(s string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Contains(t.buf, []byte(s))
}
