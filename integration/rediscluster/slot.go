package rediscluster

import "strconv"

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// Slot returns the hash slot of key as Redis Cluster computes it: CRC16
// (XMODEM) of the key, or of its hash tag (the text between the first "{"
// and the first "}" after it, when not empty), modulo 16384.
func Slot(key string) int {
	if s := indexByte(key, '{'); s >= 0 {
		if e := indexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return int(crc16(key) % Slots)
}

// TagForSlot returns a short hash tag ("{…}" included) whose keys all fall in
// slot: a test puts keys in a chosen slot with TagForSlot(slot)+"rest".
func TagForSlot(slot int) string { return "{" + NameInSlot("", slot) + "}" }

// NameInSlot returns prefix followed by the smallest number that makes a
// key, or a hash tag, in slot: an Asynq queue of that name keeps its keys
// ("asynq:{name}:…") in slot.
func NameInSlot(prefix string, slot int) string {
	for i := 0; ; i++ {
		name := prefix + strconv.Itoa(i)
		if int(crc16(name)%Slots) == slot {
			return name
		}
	}
}

func indexByte(s string, c byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			return i
		}
	}
	return -1
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the one Redis
// Cluster uses.
func crc16(s string) uint16 {
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
