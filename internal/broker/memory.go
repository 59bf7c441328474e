package broker

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/semaq/semaq/internal/broker/subsystem"
	"github.com/semaq/semaq/semaq"
)

// The node-wide memory bound (docs/security.md, Bounds). max_memory is
// the memory the node's process may use: the ingress refuses publishes
// (429, no ack over NATS) while the memory the Go runtime holds is past
// memoryHighWater of it, before the limit is reached, and `semaq serve`,
// which owns its process, makes it the runtime's soft limit (its
// collector works harder as the heap nears it; a library must not change
// a process's collector, so the broker itself does not). The default is
// memoryDefaultShare of what the node may have: its cgroup's limit, else
// the machine's memory; GOMEMLIMIT, when set, is taken as it is.

const (
	// memoryDefaultShare of the cgroup's or the machine's memory is the
	// default max_memory.
	memoryDefaultShare = 0.6
	// memoryHighWater of max_memory is where publishes start to be
	// refused.
	memoryHighWater = 0.9
	// memorySampleEvery is how often the guard reads the runtime.
	memorySampleEvery = 100 * time.Millisecond
	// MinMaxMemory is the smallest max_memory accepted.
	MinMaxMemory = 64 << 20
)

// memoryGuard samples the memory the Go runtime holds and says when the
// ingress must refuse. Safe for concurrent use.
type memoryGuard struct {
	limit, high int64
	source      string // where limit came from, for the log
	inUse       atomic.Int64
	over        atomic.Bool
	samples     []metrics.Sample
}

// ResolveMaxMemory is the node's max_memory: the configured bytes, else
// GOMEMLIMIT, else memoryDefaultShare of the cgroup's limit or the
// machine's memory; 0 when none is to be applied (-1 configured).
func ResolveMaxMemory(configured int64) (int64, string) {
	switch {
	case configured > 0:
		return configured, "max_memory"
	case configured < 0:
		return 0, "max_memory -1"
	}
	if cur := debug.SetMemoryLimit(-1); cur != math.MaxInt64 {
		return cur, "GOMEMLIMIT"
	}
	total, from := systemMemory()
	if total <= 0 {
		return 0, "unknown system memory"
	}
	return int64(float64(total) * memoryDefaultShare), fmt.Sprintf("%.0f%% of %s", memoryDefaultShare*100, from)
}

// systemMemory is what the process may have: its cgroup's limit (v2,
// then v1), else the machine's memory.
func systemMemory() (int64, string) {
	for _, f := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && n > 0 && n < 1<<60 {
			return n, "the cgroup's limit"
		}
	}
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return kb << 10, "the machine's memory"
				}
			}
		}
	}
	return 0, ""
}

// newMemoryGuard starts sampling against limit on gate, until it closes;
// nil when limit is 0.
func newMemoryGuard(limit int64, source string, gate *subsystem.Gate) *memoryGuard {
	if limit <= 0 {
		return nil
	}
	g := &memoryGuard{limit: limit, high: int64(float64(limit) * memoryHighWater), source: source,
		samples: []metrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}}
	g.sample()
	gate.Go("sampler", g.run)
	return g
}

func (g *memoryGuard) run(ctx context.Context) {
	t := time.NewTicker(memorySampleEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			g.sample()
		}
	}
}

// sample reads the memory the runtime holds from the OS (what it mapped,
// less what it gave back), the part of RSS the node controls.
func (g *memoryGuard) sample() {
	metrics.Read(g.samples)
	used := int64(g.samples[0].Value.Uint64()) - int64(g.samples[1].Value.Uint64())
	g.inUse.Store(used)
	g.over.Store(used > g.high)
}

// refusal is the ingress's answer while memory is past the high water;
// nil otherwise (and with no guard).
func (g *memoryGuard) refusal() *semaq.APIError {
	if g == nil || !g.over.Load() {
		return nil
	}
	e := semaq.NewAPIError(semaq.ErrOverloaded, "node memory: %d MiB in use, past %.0f%% of max_memory (%d MiB); publishes are refused until the node frees memory",
		g.inUse.Load()>>20, memoryHighWater*100, g.limit>>20)
	e.RetryAfterMs = 1000
	return e
}
