// Package keyhash is the hash of a message key that route splits and
// key-shared groups pick by: FNV-1a 64 with MurmurHash3's finaliser, stable
// across nodes and releases.
package keyhash

// Of is FNV-1a 64 of s followed by MurmurHash3's 64-bit finaliser: FNV
// alone barely moves its high bits for keys that differ in their last
// bytes (user-1, user-2), and the high bits pick the target.
func Of(s string) uint64 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= prime
	}
	return Mix(h)
}

// Mix is MurmurHash3's 64-bit finaliser.
func Mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}
