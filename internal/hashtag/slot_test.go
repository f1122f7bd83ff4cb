package hashtag

import "testing"

func TestCRC16CheckValue(t *testing.T) {
	// The check value of CRC-16/XMODEM, and Redis Cluster's own examples.
	if got := CRC16("123456789"); got != 0x31C3 {
		t.Errorf("CRC16(123456789) = %#x, want 0x31c3", got)
	}
	for key, want := range map[string]int{
		"foo":                  12182, // CLUSTER KEYSLOT foo
		"{user1000}.following": 3443,
		"{user1000}.followers": 3443,
		"bar":                  5061,
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
}
