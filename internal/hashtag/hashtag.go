// Package hashtag reads keys as Redis Cluster does, their hash tag and
// their slot: the worker refuses, on a cluster, a prefix whose keys would
// not share a slot, and package queue/shard places each shard's
// name in a slot of its own.
package hashtag

import "strings"

// Of returns the hash tag of a key prefix as Redis Cluster reads it: the
// text between the first '{' and the first '}' after it, when that text is
// not empty. Every key that starts with such a prefix hashes to the tag's
// slot; without one, each key hashes as a whole.
func Of(prefix string) string {
	i := strings.IndexByte(prefix, '{')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(prefix[i+1:], '}')
	if j <= 0 {
		return ""
	}
	return prefix[i+1 : i+1+j]
}
