// Package allocs measures what a function allocates, for tests that pin the
// size class of the objects a waiting turn holds.
package allocs

import "runtime"

var sink any

// PerCall returns the bytes one call of f allocates, on average over n calls
// (within a few bytes: the caller's background allocations). For a function
// that makes one object, that is its size class, with the 8-byte header the
// runtime puts before an object of more than 512 bytes that holds pointers.
func PerCall(n int, f func() any) uint64 {
	runtime.GC()
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	for range n {
		sink = f()
	}
	runtime.ReadMemStats(&b)
	sink = nil
	return (b.TotalAlloc - a.TotalAlloc) / uint64(n)
}
