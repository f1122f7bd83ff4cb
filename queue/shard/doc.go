// Package shard spreads one deployment's chats over N shards, so that a
// Redis Cluster carries them on all its masters: each shard is an Asynq
// queue of its own (Asynq hash-tags a queue's keys by its name) and a key
// prefix tagged with the same name, so that a chat's task and its keys
// share one slot.
//
// # The layout
//
// A Layout is N (LETTAQ_SHARDS), the base queue (LETTAQ_QUEUES) and the
// base key prefix (LETTAQ_KEY_PREFIX). With N = 1 (the default) it is
// today's single layout: one queue named as configured, keys under the
// configured prefix, task ids unchanged. With N > 1:
//
//   - a chat's shard is the first 4 bytes of SHA-256(integration + ":" +
//     chat_id), big-endian, mod N (Of);
//   - shard i's queue is "<queue>-<i>-<k>" for the smallest k = 0, 1, 2, …
//     whose slot (Redis Cluster's CRC16 mod 16384) lies within 16384/(8N)
//     of (2i+1)·16384/(2N) (Name): the shards' slots are evenly spaced, so
//     that masters owning equal slot ranges carry equal numbers of shards
//     (16 over 3 masters: 5, 6, 5);
//   - shard i's key prefix is the base prefix without its braces, then
//     "{<queue of i>}:" (Prefix): its keys share the slot of its queue;
//   - a turn's task id carries its shard's hash tag after its kind
//     ("turn:{lettaq-3-17}:telegram:42:m1", TaskID), so that the shard of
//     a task is read from its id alone (OfTask).
//
// # The record
//
// The deployment's layout is recorded in Redis at its first start
// (RecordKey, SET NX; Claim): a worker or producer with another N, base
// queue or prefix is refused with a *MismatchError naming both, since a
// changed layout moves every chat to other queues and keys (a migration:
// docs/operations.md).
package shard
