package queue

import (
	"runtime"
	"testing"
	"unsafe"
)

var sizeSink any

// allocBytes returns the bytes one call of f allocates, on average over n
// calls (within a few bytes: the test's own background allocations): for
// one object, its size class (with the 8-byte header the
// runtime puts before an object of more than 512 bytes that holds
// pointers).
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

// TestTurnSizeClass pins the turn, which every in-flight turn holds while
// the agent thinks, to the 1024-byte size class: at 1017 bytes or more its
// header takes it to 1152 (10,000 thinking turns: 1.3 MB of heap, twice
// that at the GC's goal). Fields that would leave padding go beside other
// small ones.
func TestTurnSizeClass(t *testing.T) {
	if got := unsafe.Sizeof(turn{}); got > 1016 {
		t.Errorf("turn is %d bytes, want at most 1016 (the 1024 class with the malloc header)", got)
	}
	if got := allocBytes(10000, func() any { return new(turn) }); got >= 1088 {
		t.Errorf("a turn allocates %d bytes, want the 1024 size class (the next is 1152)", got)
	}
}
