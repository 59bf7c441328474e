package plugin

import "errors"

// Errors a call fails with. A call's error wraps one of them, and errors.Is tells which. The first four are the
// plugin's failures: each counts towards Limits.FailAfter and discards the instance that failed.
var (
	// ErrTrap: the plugin crashed (a WebAssembly trap, a Go panic, an exit).
	ErrTrap = errors.New("plugin trapped")
	// ErrTimeout: the call ran past Limits.Timeout and was stopped.
	ErrTimeout = errors.New("plugin timed out")
	// ErrMemory: the plugin ran out of memory within Limits.MemoryPages.
	ErrMemory = errors.New("plugin ran out of memory")
	// ErrBadOutput: the plugin's answer broke the ABI: out of its memory, malformed, or past a bound of
	// internal/plugin/wire.
	ErrBadOutput = errors.New("plugin returned malformed output")

	// ErrDisabled: the plugin failed Limits.FailAfter calls in a row and takes no more.
	ErrDisabled = errors.New("plugin disabled")
	// ErrClosed: the plugin was closed (or replaced in its Slot) and takes no more calls.
	ErrClosed = errors.New("plugin closed")
	// ErrNoStage: the plugin does not implement the stage called.
	ErrNoStage = errors.New("plugin does not implement the stage")
	// ErrInputTooLarge: the input would not fit in a quarter of the plugin's memory; not the plugin's failure.
	ErrInputTooLarge = errors.New("input too large for the plugin")

	// ErrABI: Load refused a module that is not a plugin of this ABI (exports, imports, version).
	ErrABI = errors.New("module does not follow the plugin ABI")
	// ErrUnsigned: Load was given no signature where RuntimeConfig.RequireSignature asks for one.
	ErrUnsigned = errors.New("plugin is not signed")
	// ErrBadSignature: the signature does not verify under any trusted key.
	ErrBadSignature = errors.New("plugin signature does not verify")
)
