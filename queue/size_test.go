package queue

import (
	"testing"
	"unsafe"

	"github.com/lettaq/lettaq/internal/allocs"
)

// TestTurnSizeClass pins the turn, which every in-flight turn holds while
// the agent thinks, to the 1024-byte size class: at 1017 bytes or more its
// header takes it to 1152 (10,000 thinking turns: 1.3 MB of heap, twice
// that at the GC's goal). Fields that would leave padding go beside other
// small ones.
func TestTurnSizeClass(t *testing.T) {
	if got := unsafe.Sizeof(turn{}); got > 1016 {
		t.Errorf("turn is %d bytes, want at most 1016 (the 1024 class with the malloc header)", got)
	}
	if got := allocs.PerCall(10000, func() any { return new(turn) }); got >= 1088 {
		t.Errorf("a turn allocates %d bytes, want the 1024 size class (the next is 1152)", got)
	}
}
