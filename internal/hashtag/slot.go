package hashtag

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// Slot returns the hash slot of key as Redis Cluster computes it: CRC16 of
// the key's hash tag (Of) when it has one, else of the whole key, modulo
// Slots.
func Slot(key string) int {
	if tag := Of(key); tag != "" {
		key = tag
	}
	return int(CRC16(key) % Slots)
}

// CRC16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0, no
// reflection, no final xor), the checksum Redis Cluster hashes keys with:
// CRC16("123456789") is 0x31C3.
func CRC16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
