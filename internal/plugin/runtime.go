package plugin

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/semaq/semaq/internal/plugin/wire"
)

// MaxModuleBytes bounds a module Load takes. The examples are under 4 MiB.
const MaxModuleBytes = 64 << 20

// maxNameLen bounds a plugin's name, which appears in errors, metrics and logs.
const maxNameLen = 128

// RuntimeConfig configures a Runtime.
type RuntimeConfig struct {
	// CacheDir keeps compiled modules on disk so a restart skips compiling them; "" keeps them in memory only.
	CacheDir string
	// TrustedKeys verify plugin signatures (Verify).
	TrustedKeys []ed25519.PublicKey
	// RequireSignature refuses a module Load is given no signature for.
	RequireSignature bool
}

// Runtime loads plugins: one per node. Modules compile once into a cache the Runtime's plugins share, so loading
// the same bytes again (a reload, a second binding) costs no compilation. Safe for concurrent use.
type Runtime struct {
	cfg   RuntimeConfig
	cache wazero.CompilationCache

	mu      sync.Mutex
	plugins map[*Plugin]struct{} // open ones, closed with the Runtime
	closed  bool
}

// NewRuntime returns a Runtime; Close frees it.
func NewRuntime(ctx context.Context, cfg RuntimeConfig) (*Runtime, error) {
	var cache wazero.CompilationCache
	if cfg.CacheDir != "" {
		var err error
		if cache, err = wazero.NewCompilationCacheWithDir(cfg.CacheDir); err != nil {
			return nil, fmt.Errorf("plugin compilation cache in %s: %w", cfg.CacheDir, err)
		}
	} else {
		cache = wazero.NewCompilationCache()
	}
	for i, k := range cfg.TrustedKeys {
		if len(k) != ed25519.PublicKeySize {
			_ = cache.Close(ctx)
			return nil, fmt.Errorf("trusted plugin key %d is %d bytes; an ed25519 public key is %d", i, len(k), ed25519.PublicKeySize)
		}
	}
	cfg.TrustedKeys = slices.Clone(cfg.TrustedKeys)
	return &Runtime{cfg: cfg, cache: cache, plugins: map[*Plugin]struct{}{}}, nil
}

// Close closes every plugin still open (as Plugin.Close, within ctx), then the compilation cache.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	r.closed = true
	ps := make([]*Plugin, 0, len(r.plugins))
	for p := range r.plugins {
		ps = append(ps, p)
	}
	r.mu.Unlock()
	var errs []error
	for _, p := range ps {
		errs = append(errs, p.Close(ctx))
	}
	errs = append(errs, r.cache.Close(ctx))
	return errors.Join(errs...)
}

// A LoadOption adds to what Load checks or does.
type LoadOption func(*loadOptions)

type loadOptions struct {
	sig       []byte
	onDisable func(reason string)
}

// WithSignature gives Load the module's signature (Sign), checked against RuntimeConfig.TrustedKeys.
func WithSignature(sig []byte) LoadOption { return func(o *loadOptions) { o.sig = sig } }

// WithOnDisable has fn called once, on its own goroutine, when the plugin disables itself after
// Limits.FailAfter failures in a row; reason says why, naming the last failure.
func WithOnDisable(fn func(reason string)) LoadOption {
	return func(o *loadOptions) { o.onDisable = fn }
}

// Load compiles wasm and checks it is a plugin of this ABI that implements stages: it imports nothing but
// wasi_snapshot_preview1, exports memory, semaq_abi_version (returning 1), semaq_alloc and the stages' functions
// with their signatures, and starts within its limits. With RuntimeConfig.RequireSignature, or given a signature,
// the signature must verify. An error names what is wrong; name prefixes every error the plugin later returns.
func (r *Runtime) Load(ctx context.Context, name string, wasm []byte, stages []Stage, lim Limits, opts ...LoadOption) (*Plugin, error) {
	var o loadOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	fail := func(err error) (*Plugin, error) { return nil, fmt.Errorf("plugin %s: %w", name, err) }
	if err := lim.Validate(); err != nil {
		return fail(err)
	}
	lim = lim.WithDefaults()
	for _, s := range stages {
		if s.bit() == 0 {
			_, err := ParseStage(string(s))
			return fail(err)
		}
	}
	if len(wasm) > MaxModuleBytes {
		return fail(fmt.Errorf("module is %d bytes, more than the %d allowed", len(wasm), MaxModuleBytes))
	}
	switch {
	case o.sig != nil:
		if err := Verify(wasm, o.sig, r.cfg.TrustedKeys); err != nil {
			return fail(err)
		}
	case r.cfg.RequireSignature:
		return fail(fmt.Errorf("%w, and this node requires a signature", ErrUnsigned))
	}

	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return fail(errors.New("the plugin runtime is closed"))
	}

	// A wazero runtime per plugin: the memory cap is the runtime's, and plugins have their own. They share the
	// compilation cache, so this costs no compiling.
	rc := wazero.NewRuntimeConfig().
		WithCompilationCache(r.cache).
		WithMemoryLimitPages(lim.MemoryPages).
		WithCloseOnContextDone(true)
	rt := wazero.NewRuntimeWithConfig(ctx, rc)
	p, err := r.load(ctx, rt, name, wasm, stages, lim, o)
	if err != nil {
		_ = rt.Close(context.WithoutCancel(ctx))
		return fail(err)
	}
	r.mu.Lock()
	if closed = r.closed; !closed {
		r.plugins[p] = struct{}{}
	}
	r.mu.Unlock()
	if closed {
		_ = p.closeNow()
		return fail(errors.New("the plugin runtime is closed"))
	}
	return p, nil
}

func (r *Runtime) forget(p *Plugin) {
	r.mu.Lock()
	delete(r.plugins, p)
	r.mu.Unlock()
}

func (r *Runtime) load(ctx context.Context, rt wazero.Runtime, name string, wasm []byte, stages []Stage, lim Limits, o loadOptions) (*Plugin, error) {
	compiled, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		return nil, fmt.Errorf("not a valid WebAssembly module: %w", err)
	}
	if err := checkImports(compiled); err != nil {
		return nil, err
	}
	exports := compiled.ExportedFunctions()
	if err := checkExport(exports, "semaq_abi_version", nil, []api.ValueType{api.ValueTypeI32}); err != nil {
		return nil, err
	}
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		return nil, fmt.Errorf("WASI: %w", err)
	}
	p := &Plugin{
		name:     name,
		lim:      lim,
		rt:       rt,
		compiled: compiled,
		owner:    r,
		idle:     make(chan *instance, lim.MaxInstances),
		slots:    make(chan struct{}, lim.MaxInstances),
		drained:  make(chan struct{}),
	}
	p.onDisable = o.onDisable
	p.slots <- struct{}{}
	inst, err := p.newInstance(ctx)
	if err != nil {
		return nil, fmt.Errorf("starting it: %w", err)
	}
	v, err := inst.call0(ctx, "semaq_abi_version", lim.initTimeout())
	if err != nil {
		return nil, fmt.Errorf("semaq_abi_version: %w", err)
	}
	if v != wire.ABIVersion {
		return nil, fmt.Errorf("%w: it speaks ABI version %d; this broker speaks version %d", ErrABI, v, wire.ABIVersion)
	}
	if _, ok := compiled.ExportedMemories()["memory"]; !ok {
		return nil, fmt.Errorf("%w: it does not export its memory as \"memory\"", ErrABI)
	}
	i32 := api.ValueTypeI32
	if err := checkExport(exports, "semaq_alloc", []api.ValueType{i32}, []api.ValueType{i32}); err != nil {
		return nil, err
	}
	implemented := ^uint32(0)
	if _, ok := exports["semaq_stages"]; ok {
		if err := checkExport(exports, "semaq_stages", nil, []api.ValueType{i32}); err != nil {
			return nil, err
		}
		if implemented, err = inst.call0(ctx, "semaq_stages", lim.initTimeout()); err != nil {
			return nil, fmt.Errorf("semaq_stages: %w", err)
		}
	}
	for _, s := range Stages {
		if _, ok := exports[s.export()]; !ok || implemented&s.bit() == 0 {
			continue
		}
		if err := checkExport(exports, s.export(), []api.ValueType{i32, i32}, []api.ValueType{stageResult(s)}); err != nil {
			return nil, err
		}
		p.stages |= s.bit()
	}
	if p.stages == 0 {
		return nil, fmt.Errorf("%w: it implements no stage (exports none of semaq_ingress, semaq_filter, semaq_tokens)", ErrABI)
	}
	for _, s := range stages {
		if p.stages&s.bit() == 0 {
			return nil, fmt.Errorf("%w: it does not implement the %s stage (no %s export, or semaq_stages leaves it out)", ErrABI, s, s.export())
		}
	}
	if err := inst.bind(); err != nil {
		return nil, err
	}
	p.idle <- inst
	return p, nil
}

func stageResult(s Stage) api.ValueType {
	if s == StageFilter {
		return api.ValueTypeI32
	}
	return api.ValueTypeI64
}

func checkImports(m wazero.CompiledModule) error {
	for _, f := range m.ImportedFunctions() {
		mod, fn, _ := f.Import()
		if mod != wasi_snapshot_preview1.ModuleName {
			return fmt.Errorf("%w: it imports %s.%s; a plugin may import only from %s", ErrABI, mod, fn, wasi_snapshot_preview1.ModuleName)
		}
	}
	for _, m := range m.ImportedMemories() {
		mod, name, _ := m.Import()
		return fmt.Errorf("%w: it imports memory %s.%s; a plugin defines its own", ErrABI, mod, name)
	}
	return nil
}

func checkExport(exports map[string]api.FunctionDefinition, name string, params, results []api.ValueType) error {
	f, ok := exports[name]
	if !ok {
		if name == "semaq_abi_version" {
			return fmt.Errorf("%w: it does not export semaq_abi_version, so it is no SemaQ plugin (build it with plugin/sdk)", ErrABI)
		}
		return fmt.Errorf("%w: it does not export %s", ErrABI, name)
	}
	if !slices.Equal(f.ParamTypes(), params) || !slices.Equal(f.ResultTypes(), results) {
		return fmt.Errorf("%w: %s has signature %s, want %s", ErrABI, name, signature(f.ParamTypes(), f.ResultTypes()), signature(params, results))
	}
	return nil
}

func signature(params, results []api.ValueType) string {
	names := func(ts []api.ValueType) string {
		s := make([]string, len(ts))
		for i, t := range ts {
			s[i] = api.ValueTypeName(t)
		}
		return strings.Join(s, ", ")
	}
	return "(" + names(params) + ") -> (" + names(results) + ")"
}

func checkName(name string) error {
	if name == "" || len(name) > maxNameLen {
		return fmt.Errorf("plugin name %q: must be 1 to %d bytes", name, maxNameLen)
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("plugin name %q: only letters, digits, '-', '_' and '.' are allowed", name)
		}
	}
	return nil
}
