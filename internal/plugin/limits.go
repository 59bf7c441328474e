package plugin

import (
	"fmt"
	"time"
)

// Limits bound what one plugin may use. A zero field takes its default.
type Limits struct {
	// MemoryPages caps each instance's linear memory, in 64 KiB pages. Go's WebAssembly heap grows in 4 MiB
	// steps, so the cap is a multiple of 64 pages in practice.
	MemoryPages uint32
	// Timeout bounds one call's wall time; a call past it fails with ErrTimeout.
	Timeout time.Duration
	// MaxInstances bounds the instances, each running one call at a time; further calls wait for one.
	MaxInstances int
	// FailAfter is how many failures in a row disable the plugin.
	FailAfter int
}

// Defaults and ceilings of Limits (docs/plugins.md#limits).
const (
	// DefaultMemoryPages is at least twice the peak the example plugins reach on 1 MiB payloads (9.5 MiB,
	// measured by TestMemoryPeak; it moves with the collector's timing), rounded up to Go's 4 MiB step: 24 MiB.
	DefaultMemoryPages  = 384
	DefaultTimeout      = 100 * time.Millisecond
	DefaultMaxInstances = 4
	DefaultFailAfter    = 5

	MaxMemoryPages  = 65536 // 4 GiB, all a 32-bit memory can address
	MaxTimeout      = time.Minute
	MaxMaxInstances = 256
	MaxFailAfter    = 1_000_000

	// minMemoryPages is below what a Go runtime needs to start; a smaller cap could only fail.
	minMemoryPages = 64
)

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	if l.MemoryPages == 0 {
		l.MemoryPages = DefaultMemoryPages
	}
	if l.Timeout == 0 {
		l.Timeout = DefaultTimeout
	}
	if l.MaxInstances == 0 {
		l.MaxInstances = DefaultMaxInstances
	}
	if l.FailAfter == 0 {
		l.FailAfter = DefaultFailAfter
	}
	return l
}

// Validate reports the first field out of its range, naming it. Zero fields are valid (they take defaults).
func (l Limits) Validate() error {
	switch {
	case l.MemoryPages != 0 && (l.MemoryPages < minMemoryPages || l.MemoryPages > MaxMemoryPages):
		return fmt.Errorf("plugin memory_pages %d: must be from %d to %d (64 KiB pages)", l.MemoryPages, minMemoryPages, MaxMemoryPages)
	case l.Timeout < 0 || l.Timeout > MaxTimeout:
		return fmt.Errorf("plugin timeout %v: must be from 0 (the default, %v) to %v", l.Timeout, DefaultTimeout, MaxTimeout)
	case l.MaxInstances < 0 || l.MaxInstances > MaxMaxInstances:
		return fmt.Errorf("plugin max_instances %d: must be from 0 (the default, %d) to %d", l.MaxInstances, DefaultMaxInstances, MaxMaxInstances)
	case l.FailAfter < 0 || l.FailAfter > MaxFailAfter:
		return fmt.Errorf("plugin fail_after %d: must be from 0 (the default, %d) to %d", l.FailAfter, DefaultFailAfter, MaxFailAfter)
	}
	return nil
}

// initTimeout bounds an instance's start (the Go runtime's and the plugin's init functions): generous next to a
// call, since it runs once per instance, but bounded, since init code is the plugin's too.
func (l Limits) initTimeout() time.Duration {
	return min(max(10*l.Timeout, 2*time.Second), 30*time.Second)
}

// maxInput is the largest input a call takes: a quarter of the memory, so an input alone cannot exhaust it and
// make the plugin fail for what a publisher sent.
func (l Limits) maxInput() int { return int(uint64(l.MemoryPages) * 65536 / 4) }
