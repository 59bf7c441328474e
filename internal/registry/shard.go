package registry

import (
	"hash/maphash"
	"iter"
)

// shardedMap is a map a snapshot can share with the model: a snapshot
// copies 64 shard pointers, and the model copies a shard only on its first
// write after a snapshot. A registration thus costs 1/64th of a map copy
// instead of a whole one (the O(n) per registration that made registering
// slow down with the registry's size). Not safe for concurrent writes;
// a frozen copy is safe for concurrent reads.
type shardedMap[K comparable, V any] struct {
	shards [shardCount]map[K]V
	n      int
	owned  uint64 // bit i: shard i is this map's own, not shared
}

const shardCount = 64

var shardSeed = maphash.MakeSeed()

func newShardedMap[K comparable, V any]() *shardedMap[K, V] { return &shardedMap[K, V]{} }

func shardOf[K comparable](k K) int { return int(maphash.Comparable(shardSeed, k) % shardCount) }

func (m *shardedMap[K, V]) get(k K) (V, bool) {
	if m == nil {
		var zero V
		return zero, false
	}
	v, ok := m.shards[shardOf(k)][k]
	return v, ok
}

// at is get without the presence flag: the zero value when absent.
func (m *shardedMap[K, V]) at(k K) V {
	v, _ := m.get(k)
	return v
}

func (m *shardedMap[K, V]) len() int {
	if m == nil {
		return 0
	}
	return m.n
}

// own makes shard i writable, copying it if a snapshot shares it.
func (m *shardedMap[K, V]) own(i int) map[K]V {
	if m.owned&(1<<i) == 0 {
		c := make(map[K]V, len(m.shards[i])+1)
		for k, v := range m.shards[i] {
			c[k] = v
		}
		m.shards[i] = c
		m.owned |= 1 << i
	}
	return m.shards[i]
}

func (m *shardedMap[K, V]) set(k K, v V) {
	s := m.own(shardOf(k))
	if _, ok := s[k]; !ok {
		m.n++
	}
	s[k] = v
}

func (m *shardedMap[K, V]) del(k K) {
	i := shardOf(k)
	if _, ok := m.shards[i][k]; !ok {
		return
	}
	delete(m.own(i), k)
	m.n--
}

func (m *shardedMap[K, V]) all() iter.Seq2[K, V] {
	return func(yield func(K, V) bool) {
		if m == nil {
			return
		}
		for _, s := range m.shards {
			for k, v := range s {
				if !yield(k, v) {
					return
				}
			}
		}
	}
}

// freeze returns a read-only copy sharing every shard; m's next write to
// a shard copies it first.
func (m *shardedMap[K, V]) freeze() *shardedMap[K, V] {
	c := &shardedMap[K, V]{shards: m.shards, n: m.n}
	m.owned = 0
	return c
}
