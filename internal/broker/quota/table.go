package quota

import (
	"strings"
	"time"
)

// entry is the buckets of one tenant or user.
type entry struct {
	rpm, tpm bucket
	pinned   bool // a configured tenant: not counted against the bound
}

// table holds the buckets of tenants or users, bounded: names from
// outside (AI-Tenant, when auth does not stamp it) must not grow it. It
// keeps configured tenants (bounded by the configuration) and at most max
// others. A full bucket is the same as none, so when the table is at its
// bound it first forgets the full ones (at most once per sweepEvery, as a
// sweep reads the whole table); a name that still finds no room shares
// the overflow entry with every other name past the bound, so inventing
// names never buys more quota.
type table struct {
	m         map[string]*entry
	dynamic   int // entries not pinned
	max       int
	overflow  entry
	lastSweep int64
	swept     bool
}

// sweepEvery is the least time between two sweeps of a full table.
const sweepEvery = int64(time.Second)

func (t *table) init(max, def int) {
	if max <= 0 {
		max = def
	}
	t.max = max
	t.m = make(map[string]*entry)
}

// get returns name's entry, made if need be; shared is true for the
// overflow entry. The lock is held.
func (t *table) get(name string, pinned bool, now int64) (e *entry, shared bool) {
	if e := t.m[name]; e != nil {
		return e, false
	}
	if !pinned && t.dynamic >= t.max {
		t.sweep(now)
		if t.dynamic >= t.max {
			return &t.overflow, true
		}
	}
	e = &entry{pinned: pinned}
	t.m[strings.Clone(name)] = e // the name may alias a message's buffer
	if !pinned {
		t.dynamic++
	}
	return e, false
}

// lookup returns name's entry without making one: the overflow entry
// when name has none and the table is at its bound. The lock is held.
func (t *table) lookup(name string) *entry {
	if e := t.m[name]; e != nil {
		return e
	}
	if t.dynamic >= t.max {
		return &t.overflow
	}
	return nil
}

// sweep forgets the full buckets, at most once per sweepEvery.
func (t *table) sweep(now int64) {
	if t.swept && now-t.lastSweep < sweepEvery {
		return
	}
	t.swept, t.lastSweep = true, now
	for k, e := range t.m {
		if e.rpm.full(now) && e.tpm.full(now) {
			delete(t.m, k)
			if !e.pinned {
				t.dynamic--
			}
		}
	}
}
