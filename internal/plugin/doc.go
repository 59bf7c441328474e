// Package plugin runs WebAssembly plugins in the broker: WASI preview 1 reactor modules, written in Go with
// plugin/sdk (or by hand against the ABI of docs/plugins.md), that judge messages at the ingress (StageIngress),
// filter what a subscription sees (StageFilter) and police token streams (StageTokens).
//
// A node makes one Runtime; it compiles each module once into a cache its plugins share (on disk with
// RuntimeConfig.CacheDir). Load checks a module (its signature, its imports, the ABI version, the exports of
// the stages asked) and returns a Plugin:
//
//	rt, _ := plugin.NewRuntime(ctx, plugin.RuntimeConfig{CacheDir: dir})
//	p, err := rt.Load(ctx, "enrich", wasm, []plugin.Stage{plugin.StageIngress}, plugin.Limits{},
//		plugin.WithSignature(sig), plugin.WithOnDisable(func(reason string) { ... }))
//	res, err := p.Ingress(ctx, &plugin.Message{Subject: s, Header: h, Data: data})
//
// A Plugin is safe for concurrent use. It keeps a pool of at most Limits.MaxInstances instances; a call takes one
// to itself and waits, within its context, while all are busy. The plugin has no access to the host beyond its
// input and output: no files, environment, arguments, network or stdin; stdout and stderr are discarded; clocks
// and randomness are allowed.
//
// Failures. A call that traps (ErrTrap), runs past Limits.Timeout (ErrTimeout), runs out of Limits.MemoryPages
// (ErrMemory) or returns output that breaks the ABI or a bound of package wire (ErrBadOutput) fails alone: its
// instance is dropped and a later call makes a fresh one; nothing panics or stalls the host. Whether the message
// then passes or is refused is the caller's decision. Limits.FailAfter such failures in a row disable the plugin
// (Disabled, the WithOnDisable callback once, then ErrDisabled without running). A call its caller gives up on
// (ctx ends first), an input too large for the plugin's memory (ErrInputTooLarge), and a stage the plugin lacks
// (ErrNoStage) are not the plugin's failures and count for nothing. Errors and Stats name what failed, never
// the payload.
//
// Hot reload. A Slot holds the current version of a named plugin: callers take it with Get and give it back with
// the release func; Swap installs a new version for later Gets and then drains the old one (waits for its
// holders, then Close), so no call fails because of a reload.
package plugin
