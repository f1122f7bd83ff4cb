package ordering

import (
	"testing"
	"unsafe"
)

// TestLeaseSize pins a Lease, which a thinking turn holds while it waits,
// to the 192-byte size class (its bools side by side: no padding between).
func TestLeaseSize(t *testing.T) {
	if got := unsafe.Sizeof(Lease{}); got > 192 {
		t.Errorf("Lease is %d bytes, want at most 192", got)
	}
}
