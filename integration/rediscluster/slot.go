package rediscluster

import (
	"strconv"

	"github.com/lettaq/lettaq/internal/hashtag"
)

// Slots is the number of hash slots of a Redis Cluster.
const Slots = hashtag.Slots

// Slot returns the hash slot of key as Redis Cluster computes it: CRC16
// (XMODEM) of the key, or of its hash tag (the text between the first "{"
// and the first "}" after it, when not empty), modulo 16384.
func Slot(key string) int { return hashtag.Slot(key) }

// TagForSlot returns a short hash tag ("{…}" included) whose keys all fall in
// slot: a test puts keys in a chosen slot with TagForSlot(slot)+"rest".
func TagForSlot(slot int) string { return "{" + NameInSlot("", slot) + "}" }

// NameInSlot returns prefix followed by the smallest number that makes a
// key, or a hash tag, in slot: an Asynq queue of that name keeps its keys
// ("asynq:{name}:…") in slot.
func NameInSlot(prefix string, slot int) string {
	for i := 0; ; i++ {
		name := prefix + strconv.Itoa(i)
		if int(hashtag.CRC16(name)%Slots) == slot {
			return name
		}
	}
}
