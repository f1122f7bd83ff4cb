package agentclient

import (
	"runtime"
	"testing"
	"unsafe"
)

var sizeSink any

// allocBytes returns the bytes one call of f allocates, on average over n
// calls (within a few bytes: the test's own background allocations): for
// one object, its size class.
func allocBytes(n int, f func() any) uint64 {
	runtime.GC()
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	for range n {
		sizeSink = f()
	}
	runtime.ReadMemStats(&b)
	sizeSink = nil
	return (b.TotalAlloc - a.TotalAlloc) / uint64(n)
}

// TestOpenStreamSizeClass pins the open stream, which a thinking turn holds
// while it waits, to 512 bytes: one byte more and the runtime's 8-byte
// header for objects over 512 bytes takes it to the 576 class.
func TestOpenStreamSizeClass(t *testing.T) {
	if got := unsafe.Sizeof(openStream{}); got > 512 {
		t.Errorf("openStream is %d bytes, want at most 512", got)
	}
	if got := allocBytes(10000, func() any { return new(openStream) }); got >= 544 {
		t.Errorf("an openStream allocates %d bytes, want the 512 size class (the next is 576)", got)
	}
}
