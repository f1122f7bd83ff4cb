package agentclient

import (
	"testing"
	"unsafe"

	"github.com/lettaq/lettaq/internal/allocs"
)

// TestOpenStreamSizeClass pins the open stream, which a thinking turn holds
// while it waits, to 512 bytes: one byte more and the runtime's 8-byte
// header for objects over 512 bytes takes it to the 576 class.
func TestOpenStreamSizeClass(t *testing.T) {
	if got := unsafe.Sizeof(openStream{}); got > 512 {
		t.Errorf("openStream is %d bytes, want at most 512", got)
	}
	if got := allocs.PerCall(10000, func() any { return new(openStream) }); got >= 544 {
		t.Errorf("an openStream allocates %d bytes, want the 512 size class (the next is 576)", got)
	}
}
